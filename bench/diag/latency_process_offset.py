"""Is the latency-bound fraction band's spread a per-process offset, and does the L2 flush make it?

The expert timed against itself in two workers lands 2-5% off 1.00 on the 5 us kernels (moe qwen3_30b, quant m8),
in either direction from one evaluation to the next; within one process, captures agree (owed-5 `outputs.log`:
output placement is not the cause). This starts `--processes` fresh processes one after another; each times the
expert's graph replay with the evaluator's Timer over `--captures` fresh captures per mode, the modes interleaved:
`flush` as the evaluator timed to 2026-12-03 (L2 flushed, head start, events around the replay), `warm` with the
flush left out (the kernel's code, its parameters and its inputs may stay in L2), `inside` flushed and timed by
event nodes inside the graph (`Timer.graph_events_inside`: the replay's start on the GPU left out). The spread
of the per-process medians in each mode says whether the offset lives in the process, whether what the flush
evicts (cold fetches of code and constants at addresses that differ per process) carries it, and whether it is
the replay's start. `touched` (ninth session) is `inside` with one element of every 64 KiB of each input read
right after the flush: if the per-process spread is page-table walks after the flush (each process has its own
page tables, and the flush evicts their cached entries along with the data), it shrinks there.

    PYTHONPATH=src python3 bench/diag/latency_process_offset.py [--processes 8] [--captures 4] [--probe]

With `--probe` each process first times a probe of its own (one small torch kernel, graph-replayed and flushed the
same way) before anything else is loaded, and again at the end: if the probe's offset from process to process
follows the kernels', a worker could measure its offset before a candidate's code exists and the evaluator
could take it out of latency-bound times (the answer of bench/results/2026-12-03-h200-owed-offset: it is the
process's, not the kernel's).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CASES = (("moe_align_block_size", "qwen3_30b_a3b_t16_bs16"), ("quant_per_token_group_fp8", "dsv3_m8_k7168_row"))


def probe_us(timer, captures: int, reps: int) -> float:
    """The median graph replay of one small torch kernel (a 4 KiB add), flushed as the evaluator times."""
    import torch

    x = torch.ones(1024, device="cuda")
    medians = []
    for _ in range(captures):
        times, _ = timer.time(lambda slot: x.add(1.0), lambda slot: None, [0], reps, warmup=10, graph=True)
        medians.append(statistics.median(times) * 1e3)
    return statistics.median(medians)


def child(captures: int, reps: int, probe: bool) -> dict[str, dict[str, float]]:
    import torch

    from d2kbench.evaluate.timing import Timer

    timer = Timer(torch.device("cuda"))
    timer.graph_events_inside = False  # "flush" and "warm" time from outside, as the evaluator did to 2026-12-03
    out: dict[str, dict[str, float]] = {}
    if probe:
        out["probe"] = {"first": probe_us(timer, captures, reps)}

    from d2kbench.evaluate.worker import load_module
    from d2kbench.suite import find_task

    flush = timer.flush
    for task_id, name in CASES:
        task = find_task(task_id)
        ref = load_module(task.reference_path, f"ref_{task_id}")
        expert = load_module(task.expert_path, f"expert_{task_id}").run
        inputs = list(ref.make_inputs(task.workload(name), 1, "cuda"))
        medians: dict[str, list[float]] = {"flush": [], "warm": [], "inside": [], "touched": []}
        pages = [x.reshape(-1).view(torch.uint8)[::1 << 16] for x in inputs if isinstance(x, torch.Tensor)]

        def flush_and_touch(pages: list = pages) -> None:
            flush()
            for page in pages:
                page.max()

        for _ in range(captures):
            for mode in medians:
                timer.flush = {"warm": lambda: None, "touched": flush_and_touch}.get(mode, flush)
                timer.graph_events_inside = mode in ("inside", "touched")
                times, _ = timer.time(lambda slot, f=expert, x=inputs: f(*x), lambda slot: None, [0], reps, warmup=10,
                                      graph=True)
                medians[mode].append(statistics.median(times) * 1e3)
        out[name] = {mode: statistics.median(v) for mode, v in medians.items()}
    timer.flush, timer.graph_events_inside = flush, False
    if probe:
        out["probe"]["last"] = probe_us(timer, captures, reps)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--captures", type=int, default=4)
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.captures, args.reps, args.probe)))
        return
    runs = []
    for i in range(args.processes):
        command = [sys.executable, __file__, "--child", "--captures", str(args.captures), "--reps", str(args.reps)]
        done = subprocess.run(command + ["--probe"] * args.probe, capture_output=True, text=True, timeout=300)
        if done.returncode:
            print(f"process {i} failed:\n{done.stderr[-2000:]}", flush=True)
            continue
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"process {i}: " + "; ".join(f"{name} " + ", ".join(f"{k} {v:.2f} us" for k, v in m.items())
                                          for name, m in runs[-1].items()), flush=True)
    for _, name in CASES:
        for mode in ("flush", "warm", "inside", "touched"):
            values = [r[name][mode] for r in runs]
            if values:
                print(f"{name} {mode}: per-process medians {min(values):.2f}-{max(values):.2f} us, spread "
                      f"{max(values) / min(values) - 1:.1%} over {len(values)} processes")
                if "probe" in runs[0]:  # what a correction by the probe taken before loading would leave
                    fixed = [r[name][mode] - (r["probe"]["first"] - runs[0]["probe"]["first"]) for r in runs]
                    print(f"    less each process's first probe: {min(fixed):.2f}-{max(fixed):.2f} us, spread "
                          f"{max(fixed) / min(fixed) - 1:.1%}; correlation with it "
                          f"{statistics.correlation(values, [r['probe']['first'] for r in runs]):.2f}")
    if runs and "probe" in runs[0]:
        first, last = ([r["probe"][k] for r in runs] for k in ("first", "last"))
        print(f"probe first {min(first):.2f}-{max(first):.2f} us, last {min(last):.2f}-{max(last):.2f} us; "
              f"correlation first-last {statistics.correlation(first, last):.2f}")


if __name__ == "__main__":
    main()
