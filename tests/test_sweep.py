"""bench/sweep.py end to end on the CPU (Triton's interpreter, the host clock): each variant checked, then the
baselines and the right variants timed in balanced rounds; a variant that fails is reported, never timed."""

import json
import os
import subprocess
import sys

import pytest

from d2kbench.suite import find_task
from tests.conftest import ROOT


def test_the_sweep_times_every_right_variant_in_every_round(tmp_path):
    out = tmp_path / "sweep.json"
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "bench/sweep.py", "moe_align_block_size", "--device", "cpu", "--workloads",
         "cpu_single_t75_e20_bs8", "--set", "FILL_BLOCK=1024,256,1000", "--reps", "2", "--rounds", "3",
         "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    sweep = json.loads(out.read_text())
    records = {r["variant"]: r for r in sweep["records"]}
    assert sweep["complete"] is True
    assert {"reference", "as shipped", "FILL_BLOCK=256"} <= set(records)
    for label in ("reference", "as shipped", "FILL_BLOCK=256"):
        assert len(records[label]["rounds_us"]) == 3 and records[label]["us"] > 0
    assert records["FILL_BLOCK=256"]["knobs"] == {"FILL_BLOCK": 256}
    # a block that is not a power of two cannot compile (tl.arange): reported, not timed
    assert records["FILL_BLOCK=1000"]["us"] is None and records["FILL_BLOCK=1000"]["wrong"]
    assert "WRONG" in proc.stdout and "| cpu_single_t75_e20_bs8 | as shipped |" in proc.stdout


def test_a_sweep_cut_off_keeps_the_workloads_it_finished(tmp_path):
    """The file is rewritten after each workload, `complete` false until the last (a GPU step's time limit cut one
    off and lost every number: bench/results/2026-12-06-owed-32 call2); killed after its first, it holds that one."""
    out = tmp_path / "sweep.json"
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, "bench/sweep.py", "moe_align_block_size", "--device", "cpu", "--workloads",
         "cpu_decode_t3_e64_bs32,cpu_single_t75_e20_bs8", "--reps", "1", "--rounds", "2", "--json", str(out)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:  # the message follows the write: killed then, the file is whole and the second workload unfinished
        line = next((line for line in proc.stderr if line.startswith(f"{out}: ")), "")
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert line.strip() == f"{out}: 1 of 2 runs written"
    sweep = json.loads(out.read_text())
    assert sweep["complete"] is False
    assert {r["workload"] for r in sweep["records"]} == {"cpu_decode_t3_e64_bs32"}
    assert {r["variant"] for r in sweep["records"]} >= {"reference", "as shipped"}


def test_an_unknown_workload_is_refused_before_anything_is_timed(tmp_path):
    proc = subprocess.run(
        [sys.executable, "bench/sweep.py", "moe_align_block_size", "--device", "cpu", "--workloads",
         "cpu_single_t75_e20_bs8,no_such_workload", "--json", str(tmp_path / "sweep.json")],
        cwd=ROOT, env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT / "src")},
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "has no workload 'no_such_workload'" in proc.stderr
    assert not (tmp_path / "sweep.json").exists() and "| cpu_single_t75_e20_bs8 |" not in proc.stdout


def test_the_sweep_checks_fp8_codes_as_the_gpu_rounds_them(tmp_path):
    """On the cpu the sweep's checks run in its own process: without the evaluator workers' fp8 patch the
    interpreter's casts misround and every variant of quant's expert, the shipped one too, was called wrong."""
    out = tmp_path / "sweep.json"
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "bench/sweep.py", "quant_per_token_group_fp8", "--device", "cpu", "--workloads",
         "cpu_f32_m45_k384_col", "--set", "MAX_COL_GROUPS=1", "--reps", "1", "--rounds", "1", "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = {r["variant"]: r for r in json.loads(out.read_text())["records"]}
    assert not records["as shipped"].get("wrong") and not records["MAX_COL_GROUPS=1"].get("wrong")
    assert records["as shipped"]["us"] > 0 and records["MAX_COL_GROUPS=1"]["us"] > 0


@pytest.mark.parametrize(("task_id", "extra"), [("attn_decode_paged_gqa", []),
                                              ("quant_per_token_group_fp8", ["--oracle-cpu"])])
def test_the_memcheck_driver_checks_every_workload_it_runs(task_id, extra):
    """bench/diag/memcheck_expert.py (the program compute-sanitizer runs on the GPU), on the cpu split: every
    workload reported ok, quant's fp8 codes among them (the interpreter's fp8 casts rounded as the evaluator's
    workers round them; they were reported wrong before), and with the oracle on CPU copies of the inputs."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "bench/diag/memcheck_expert.py", task_id, "--device", "cpu", "--splits", "cpu", *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.splitlines() == [f"{w.name}: ok" for w in find_task(task_id).split("cpu")]


def test_a_variant_is_the_expert_with_its_knob_rewritten_before_import(tmp_path):
    """What the module derives from a knob at import follows it: muon's launch configuration is a dict built from
    MM_BLOCK_N, which setting the attribute on the loaded module left at the shipped tiles."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from sweep import variant_source
    finally:
        sys.path.remove(str(ROOT / "bench"))
    from d2kbench.evaluate.worker import load_module
    from d2kbench.suite import find_task

    task = find_task("muon_newton_schulz")
    source = task.expert_path.read_text()
    path = tmp_path / "expert_variant.py"
    path.write_text(variant_source(source, {"MM_BLOCK_N": 256, "MM_STAGES": 4}))
    module = load_module(path, "test_sweep_variant_muon")
    assert (module._CONFIG_LARGE["mm_block_n"], module._CONFIG_LARGE["mm_stages"]) == (256, 4)
    with pytest.raises(ValueError, match="exactly once"):
        variant_source(source, {"_CONFIG_LARGE": {}})  # not a one-line assignment
