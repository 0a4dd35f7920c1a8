"""Does where a latency-bound kernel's outputs land decide its graph-replay time? In latency_memory's run
(bench/results/2026-12-03-h200-owed-4) fresh captures agreed with each other until the process's memory changed,
then all moved together by up to 0.4 us, without a trend in the memory held; input placement did not matter
(owed-3). The outputs, which `run` allocates inside each capture, are the placement not yet varied.

    PYTHONPATH=src python3 bench/diag/latency_output_placement.py [--task moe_align_block_size] [--captures 24]

One process times the expert with the evaluator's Timer (graph replay) over `--captures` fresh captures; before
each, a padding block of 0-16 pages of 2 MiB, at random, is allocated and kept, so each capture's private memory
pool (where `run` allocates its outputs) lands on other pages. Each capture's median is printed with its padding
and its first output's address. If the medians spread as widely as between processes and move with the pages,
output placement is the cause, and the evaluator could pad before each capture at random so that both workers
average over placements instead of each keeping one.
"""

from __future__ import annotations

import argparse
import random
import statistics

import torch

from d2kbench.evaluate.timing import Timer
from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task

PAGE = 2 << 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="moe_align_block_size")
    parser.add_argument("--captures", type=int, default=24)
    parser.add_argument("--reps", type=int, default=500)
    args = parser.parse_args()
    task = find_task(args.task)
    ref = load_module(task.reference_path, "ref")
    expert = load_module(task.expert_path, "expert").run
    timer = Timer(torch.device("cuda"))
    rng = random.Random(0)
    kept: list[torch.Tensor] = []
    for w in task.split("scored")[:2]:
        inputs = list(ref.make_inputs(w, 1, "cuda"))
        rows = []
        for _ in range(args.captures):
            pad = PAGE * rng.randrange(17)
            kept.append(torch.empty(max(pad, 1), dtype=torch.uint8, device="cuda"))
            times, outputs = timer.time(lambda slot, x=inputs: expert(*x), lambda slot: None, [0], args.reps, warmup=10,
                                        graph=True)
            first = outputs[0][0] if isinstance(outputs[0], (tuple, list)) else outputs[0]
            rows.append((statistics.median(times) * 1e3, pad // PAGE, hex(first.data_ptr())))
        medians = [r[0] for r in rows]
        print(f"{w.name}: {len(rows)} captures, graph-replay medians {min(medians):.2f}-{max(medians):.2f} us "
              f"(median {statistics.median(medians):.2f})", flush=True)
        for median, pages, address in sorted(rows):
            print(f"    {median:6.2f} us  padding {pages:2d} pages  first output at {address}")


if __name__ == "__main__":
    main()
