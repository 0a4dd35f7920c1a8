"""The integrity checks on the GPU (issue 6): planted candidates get their verdicts, and baseline
sabotage from the candidate's process leaves the reference time unchanged.

    PYTHONPATH=src python3 bench/gpu_integrity.py [--tasks quant_per_token_group_fp8] [--json FILE]

Part 1 evaluates every planted candidate of tests/planted on the toy axpy task on the GPU, hidden
workloads included as in a final evaluation (untouched_tail.py is wrong only where N is not a
multiple of its block), and compares its verdict with the expected one (the CPU tests' table plus
the GPU-only cheats).
Part 2, per task: the expert evaluated as a candidate (clean), then the expert with a sabotage
prelude appended (flags flipped, a long GPU kernel queued at import, or a thread that keeps the
GPU busy), with the static scan switched off for the sabotaged runs so that the process split,
the per-request device sync and the pause of the candidate's process are shown to hold alone.
The reference's median time must stay within 3% of the clean run's on the workloads of 50 us or more
(shorter ones move by a few percent between evaluations anyway: bench/results/2026-12-03-h200-owed-2), or the
evaluation must be refused as `infra/gpu_contended` (never a score).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from d2kbench.evaluate import static_scan
from d2kbench.evaluate.evaluator import EvalOptions, evaluate
from d2kbench.suite import find_task, load_task

ROOT = Path(__file__).resolve().parents[1]
PLANTED = ROOT / "tests" / "planted"
# planted files whose dynamic check is shown with the static scan off
SCAN_OFF = {"gpu_persisting_l2.py", "gpu_timer_halved.py"}
JUDGED_MIN_US = 50.0  # the sabotage check's drift is judged on reference times of at least this
EXPECTED = {  # file: (verdict, a reason that must be among the failures)
    "wrong_values.py": ("incorrect", "mismatch"),
    "nan_one.py": ("incorrect", "nan"),
    "untouched_tail.py": ("incorrect", "nan"),
    "stale_by_address.py": ("integrity", "stale_output"),
    "stale_by_shape.py": ("integrity", "stale_output"),
    "aliased_output.py": ("integrity", "alias"),
    "torch_does_work.py": ("integrity", "aten_op"),
    "no_triton.py": ("integrity", "no_triton_launch"),
    "mutates_input.py": ("integrity", "input_mutated"),
    "subclass_output.py": ("integrity", "not_plain_tensor"),
    "forged_reply.py": ("integrity", "forged_result"),
    "raises.py": ("error", "exception"),
    "syntax_error.py": ("error", "import_error"),
    "no_run.py": ("error", "no_run"),
    "segfault.py": ("crash", "worker_died"),
    "exit_with_fake_verdict.py": ("crash", "worker_died"),
    "infinite_loop.py": ("timeout", "call_timeout"),
    "static_patches_torch.py": ("integrity", "forbidden_code"),
    "deferred_thread.py": ("integrity", "side_stream"),
    "timed_pointer_cache.py": ("incorrect", "timed_output_mismatch"),
    "gpu_illegal_address.py": ("crash", "cuda_error"),
    "gpu_endless_kernel.py": ("timeout", "call_timeout"),
    "gpu_side_stream.py": ("integrity", "side_stream"),
    "torch_behind_guard.py": ("integrity", "foreign_kernel"),
    "gpu_persisting_l2.py": ("integrity", "persisting_l2"),  # the static scan off: the dynamic check alone
    "gpu_timer_halved.py": ("integrity", "patched_timer"),  # the static scan off: the parent's wall clock alone
    "gpu_graph_cached.py": ("incorrect", "graph_replay_mismatch"),  # n1m's graph replays rechecked
    "gpu_content_cache.py": ("integrity", "input_cache"),  # outputs keyed by contents: each round's fresh set
    "gpu_content_cache_lookahead.py": ("integrity", "input_cache"),  # works new contents out in the first call after
    # the write: the fresh set is written after the warm-up and its call is the batch's first
    "gpu_graph_content_cache.py": ("integrity", "input_cache"),  # a device-side cache inside the graph: its first
    # replay on each round's replay set, written after the captures
    "sandbox_reads_seed.py": (None, None),  # reported, verdict depends on what it reaches
    "sandbox_reads_task_files.py": (None, None),
    "sandbox_writes_outside.py": (None, None),
    "sandbox_opens_socket.py": (None, None),
}

SABOTAGE = {
    "flags_and_queued_kernel": '''
import torch as _torch
import triton as _triton
import triton.language as _tl
_torch.backends.cuda.matmul.allow_tf32 = True
_torch.backends.cudnn.allow_tf32 = True
_torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
_torch.backends.cuda.enable_flash_sdp(False)
_torch.set_float32_matmul_precision("medium")


@_triton.jit
def _spin(ptr, iters):
    acc = _tl.load(ptr + _tl.program_id(0))
    for _ in range(iters):
        acc = acc * 1.0000001 + 1e-7
    _tl.store(ptr + _tl.program_id(0), acc)


_spin_buffer = _torch.ones(132 * 16, device="cuda")
_spin[(132 * 16,)](_spin_buffer, 1_000_000_000)  # about two seconds of GPU work queued at import
''',
    "busy_thread": '''
import threading as _threading
import torch as _torch

_big = _torch.empty(1 << 28, dtype=_torch.uint8, device="cuda")
_other = _torch.empty_like(_big)


def _hog():
    while True:
        _other.copy_(_big)


_threading.Thread(target=_hog, daemon=True).start()
''',
}


@contextmanager
def scan_off(off: bool = True):
    """The static scan's forbidden findings ignored for the block: the dynamic defences shown alone."""
    scan = static_scan.forbidden_summary
    if off:
        static_scan.forbidden_summary = lambda findings: None
    try:
        yield
    finally:
        static_scan.forbidden_summary = scan


def planted_part(names: list[str], results: list[dict]) -> bool:
    task = load_task(ROOT / "tests" / "fixtures" / "toy_axpy")
    ok = True
    print("| planted | verdict | reasons | expected | |\n|---|---|---|---|---|")
    for name in names:
        verdict, reason = EXPECTED[name]
        with scan_off(name in SCAN_OFF):
            r = evaluate(task, PLANTED / name, EvalOptions(include_hidden=True, call_timeout_s=15, load_timeout_s=60))
        reasons = sorted({f.reason for f in r.failures})
        reasons += [f"replay-set slowdown {w.name} {w.replay_fresh_slowdown}" for w in r.workloads
                    if w.replay_fresh_slowdown]
        good = verdict is None or (r.verdict == verdict and reason in reasons)
        if name == "gpu_endless_kernel.py":  # the GPU is usable again: the expert still passes after it
            after = evaluate(task, task.expert_path, EvalOptions(time=False))
            good &= after.verdict == "pass"
            reasons.append(f"expert afterwards: {after.verdict}")
        ok &= good
        print(f"| {name} | {r.verdict}/{r.reason} ({r.elapsed_s:.1f} s) | {', '.join(reasons)} | "
              f"{verdict}/{reason} | {'ok' if good else 'WRONG'} |", flush=True)
        results.append({"part": "planted", "file": name, "verdict": r.verdict, "reason": r.reason,
                        "reasons": reasons, "expected": [verdict, reason], "ok": good, "detail": r.detail[:300]})
    return ok


def reference_ms(result) -> dict[str, float]:
    return {w.name: w.timings["reference"].median_ms for w in result.workloads if "reference" in w.timings}


def sabotage_part(task_ids: list[str], results: list[dict]) -> bool:
    ok = True
    for task_id in task_ids:
        task = find_task(task_id)
        clean = evaluate(task, task.expert_path, EvalOptions())
        base = reference_ms(clean)
        print(f"\n## {task_id}: clean expert {clean.verdict}; reference ms {base}")
        for label, prelude in SABOTAGE.items():
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "candidate.py"
                path.write_text(task.expert_path.read_text() + "\n" + prelude)
                with scan_off():
                    r = evaluate(task, path, EvalOptions())
            got = reference_ms(r)
            drift = {w: got[w] / base[w] - 1 for w in got if w in base}
            judged = {w: d for w, d in drift.items() if base[w] * 1e3 >= JUDGED_MIN_US}
            # pass with unchanged reference times, or refused as a shared GPU (infra, never a score)
            held = r.verdict == "pass" and bool(judged) and all(abs(d) <= 0.03 for d in judged.values())
            good = held or (r.verdict, r.reason) == ("infra", "gpu_contended")
            ok &= good
            shown = ", ".join(f"{w} {d:+.1%}{'' if w in judged else ' (not judged)'}" for w, d in drift.items())
            drained = sum(w.drained_s for w in r.workloads)
            print(f"- {label}: {r.verdict}/{r.reason}; reference drift {shown or '-'}; waited {drained:.2f} s for "
                  f"queued work to drain; {'ok' if good else 'CHANGED'} ({r.detail[:200]})")
            results.append({"part": "sabotage", "task": task_id, "variant": label, "verdict": r.verdict,
                            "reason": r.reason, "clean_reference_ms": base, "reference_ms": got,
                            "drift": drift, "drained_s": drained, "ok": good})
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="quant_per_token_group_fp8")
    parser.add_argument("--planted", default="", help="comma-separated planted files (default: all; '-': none)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: list[dict] = []
    names = [] if args.planted == "-" else args.planted.split(",") if args.planted else list(EXPECTED)
    ok = planted_part(names, results)
    ok &= sabotage_part([t for t in args.tasks.split(",") if t], results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print("\nALL OK" if ok else "\nSOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
