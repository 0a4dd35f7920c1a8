"""Does how much memory a process holds decide a latency-bound kernel's time? In latency_placement's run
(bench/results/2026-12-03-h200-owed-3) the moe expert's graph replay on qwen3_30b went from 5.28 to 5.60 us in
every process once the process had allocated more buffers, even on the inputs it had timed fast before; the
evaluator's two workers hold very different amounts (the trusted one: every input set, the oracle's outputs,
the exported blocks).

    PYTHONPATH=src python3 bench/diag/latency_memory.py [--task moe_align_block_size] [--reps 1000]

In one process, the expert is timed (the evaluator's Timer: events and CUDA graph replay, three fresh captures
each) while the process holds 0, 1, 8 and 32 GiB more, then again after freeing them. If the times follow the
memory held, the evaluator has to equalise what its workers hold (or time both in one process); if they do not,
the per-capture spread is the GPU's own.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from d2kbench.evaluate.timing import Timer
from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task

GIB = 1 << 30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="moe_align_block_size")
    parser.add_argument("--reps", type=int, default=1000)
    args = parser.parse_args()
    task = find_task(args.task)
    ref = load_module(task.reference_path, "ref")
    expert = load_module(task.expert_path, "expert").run
    timer = Timer(torch.device("cuda"))
    workloads = [w for w in task.split("scored")][:2]
    inputs = {w.name: list(ref.make_inputs(w, 1, "cuda")) for w in workloads}
    held: list[torch.Tensor] = []
    print(f"{args.task}: medians in us of three fresh captures each (events / graph replay)")
    for label, extra_gib in (("0 GiB more", 0), ("1 GiB more", 1), ("8 GiB more", 8), ("32 GiB more", 32),
                             ("freed again", None)):
        if extra_gib is None:
            held.clear()
            torch.cuda.empty_cache()
        else:
            while len(held) < extra_gib:
                held.append(torch.ones(GIB, dtype=torch.uint8, device="cuda"))  # touched: pages really mapped
        for w in workloads:
            cells = []
            for _ in range(3):
                row = []
                for graph in (False, True):
                    times, _ = timer.time(lambda slot, x=inputs[w.name]: expert(*x), lambda slot: None, [0],
                                          args.reps, warmup=10, graph=graph)
                    row.append(statistics.median(times) * 1e3)
                cells.append(f"{row[0]:6.2f}/{row[1]:6.2f}")
            reserved = torch.cuda.memory_reserved() / GIB
            print(f"{w.name:28s} {label:12s} ({reserved:5.1f} GiB reserved)  {'  '.join(cells)}", flush=True)


if __name__ == "__main__":
    main()
