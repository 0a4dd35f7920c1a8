"""Is the latency-bound fraction band's spread a per-process offset, and does the L2 flush make it?

The expert timed against itself in two workers lands 2-5% off 1.00 on the 5 us kernels (moe qwen3_30b, quant m8),
in either direction from one evaluation to the next; within one process, captures agree (owed-5 `outputs.log`:
output placement is not the cause). This starts `--processes` fresh processes one after another; each times the
expert's graph replay with the evaluator's Timer over `--captures` fresh captures per mode, the modes interleaved:
`flush` as the evaluator times (L2 flushed, head start), `warm` with the flush left out (the kernel's code, its
parameters and its inputs may stay in L2). The spread of the per-process medians in each mode says whether the
offset lives in the process, and whether what the flush evicts (cold fetches of code and constants at addresses
that differ per process) carries it.

    PYTHONPATH=src python3 bench/diag/latency_process_offset.py [--processes 8] [--captures 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CASES = (("moe_align_block_size", "qwen3_30b_a3b_t16_bs16"), ("quant_per_token_group_fp8", "dsv3_m8_k7168_row"))


def child(captures: int, reps: int) -> dict[str, dict[str, float]]:
    import torch

    from d2kbench.evaluate.timing import Timer
    from d2kbench.evaluate.worker import load_module
    from d2kbench.suite import find_task

    timer = Timer(torch.device("cuda"))
    flush = timer.flush
    out: dict[str, dict[str, float]] = {}
    for task_id, name in CASES:
        task = find_task(task_id)
        ref = load_module(task.reference_path, f"ref_{task_id}")
        expert = load_module(task.expert_path, f"expert_{task_id}").run
        inputs = list(ref.make_inputs(task.workload(name), 1, "cuda"))
        medians: dict[str, list[float]] = {"flush": [], "warm": []}
        for _ in range(captures):
            for mode in medians:
                timer.flush = flush if mode == "flush" else (lambda: None)
                times, _ = timer.time(lambda slot, f=expert, x=inputs: f(*x), lambda slot: None, [0], reps, warmup=10,
                                      graph=True)
                medians[mode].append(statistics.median(times) * 1e3)
        out[name] = {mode: statistics.median(v) for mode, v in medians.items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--captures", type=int, default=4)
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.captures, args.reps)))
        return
    runs = []
    for i in range(args.processes):
        done = subprocess.run([sys.executable, __file__, "--child", "--captures", str(args.captures),
                               "--reps", str(args.reps)], capture_output=True, text=True, timeout=300)
        if done.returncode:
            print(f"process {i} failed:\n{done.stderr[-2000:]}", flush=True)
            continue
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"process {i}: " + "; ".join(f"{name} flush {m['flush']:.2f} us, warm {m['warm']:.2f} us"
                                          for name, m in runs[-1].items()), flush=True)
    for _, name in CASES:
        for mode in ("flush", "warm"):
            values = [r[name][mode] for r in runs]
            if values:
                print(f"{name} {mode}: per-process medians {min(values):.2f}-{max(values):.2f} us, spread "
                      f"{max(values) / min(values) - 1:.1%} over {len(values)} processes")


if __name__ == "__main__":
    main()
