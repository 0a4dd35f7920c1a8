"""Expert code paths that a tuning knob turns on, kept correct while they are off: the sweep on the H200 decides
whether they ship (bench/sweep.py --set NAME=...), so they must pass the task's checks as they stand."""

import pytest

from d2kbench.evaluate.evaluator import EvalOptions, compile_report, evaluate
from d2kbench.suite import find_task

KNOBS = [
    ("attn_decode_paged_gqa", "PREFETCH_PAGE_IDS = True", "PREFETCH_PAGE_IDS = False"),
    ("attn_decode_paged_gqa", "FUSED_MERGE = False", "FUSED_MERGE = True"),
    ("attn_decode_paged_gqa", "KV_HEADS_FASTEST = True", "KV_HEADS_FASTEST = False"),
    # No waves to fill: one split per (sequence, KV head), stage 1 writes the output (qwen3_8b_lvar's path on the
    # H200, which no cpu workload takes as shipped).
    ("attn_decode_paged_gqa", "WAVES = 8 ", "WAVES = 0 "),
    ("muon_newton_schulz", "MM_BLOCK_N = 128", "MM_BLOCK_N = 256"),  # production tiles: sm_90 compile only
    ("muon_newton_schulz", "SYM_BLOCK_K = 64", "SYM_BLOCK_K = 128"),  # production tiles: sm_90 compile only
]


@pytest.mark.parametrize(("task_id", "shipped", "other"), KNOBS, ids=[k[2] for k in KNOBS])
def test_the_other_setting_passes_the_cpu_workloads(task_id, shipped, other, tmp_path):
    task = find_task(task_id)
    source = task.expert_path.read_text()
    assert source.count(shipped) == 1, f"{shipped!r} is no longer in expert.py exactly once"
    variant = tmp_path / "expert_variant.py"
    variant.write_text(source.replace(shipped, other))
    result = evaluate(task, variant, EvalOptions(device="cpu"))
    assert result.verdict == "pass", f"{result.reason}: {result.detail}"


@pytest.mark.parametrize(("task_id", "shipped", "other"), KNOBS, ids=[k[2] for k in KNOBS])
def test_the_other_setting_compiles_for_sm90(task_id, shipped, other, tmp_path):
    """What the interpreter does not check: the variant lowers for the H200 (atomics' semantics, cache modifiers,
    shared memory) on the task's profile workload, without spills."""
    task = find_task(task_id)
    variant = tmp_path / "expert_variant.py"
    variant.write_text(task.expert_path.read_text().replace(shipped, other))
    kernels = compile_report(task, variant)
    assert kernels, "the variant launched no Triton kernel"
    for k in kernels:
        assert k["ok"], f"{k['kernel']}: {k.get('error')}"
        assert k.get("spill_store_bytes", 0) == 0, f"{k['kernel']} spills registers"


def test_muons_register_cap_holds_and_passes_the_cpu_workloads(tmp_path):
    """SYM_MAXNREG = 128 (a sweep's candidate: two symmetric-product programs per SM instead of one) runs the cpu
    workloads right, and its sm_90 compile keeps every symmetric product within 128 registers, spilling little."""
    task = find_task("muon_newton_schulz")
    source = task.expert_path.read_text()
    assert source.count("SYM_MAXNREG = None") == 1
    variant = tmp_path / "expert_variant.py"
    variant.write_text(source.replace("SYM_MAXNREG = None", "SYM_MAXNREG = 128"))
    result = evaluate(task, variant, EvalOptions(device="cpu"))
    assert result.verdict == "pass", f"{result.reason}: {result.detail}"
    sym = [k for k in compile_report(task, variant) if k["kernel"] == "_sym_gemm_kernel"]
    assert sym and all(k["ok"] and k["registers"] <= 128 for k in sym)
    assert max(k.get("spill_store_bytes", 0) for k in sym) < 512
