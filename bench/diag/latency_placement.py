"""Does where a latency-bound kernel's inputs lie decide its time? The moe expert timed against itself moved by
about 0.5 us (3-9%) between processes and evaluations, sandboxed or not (bench/results/2026-12-03-h200-owed-2).

    PYTHONPATH=src python3 bench/diag/latency_placement.py [--task moe_align_block_size] [--processes 3]

Each of N fresh processes times the task's expert with the evaluator's Timer (L2 flushed, head start, CUDA graph
replay and plain events) on each scored workload, with the inputs: as make_inputs left them; each at the start of
a 2 MB page of one buffer; each at 1 MB + 4 KB into its page (straddling a page for inputs over 1 MB); and each
at a random 256-byte offset; then as made twice more (graphs captured anew). If the per-process spread vanishes
with fixed page offsets, and the offset variants differ from each other, placement (TLB misses after the flush)
is the cause; if the repeats already differ within one process, each capture has an offset of its own.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys

PAGE = 2 << 20


def child(task_id: str, reps: int, seed: int) -> None:
    import torch

    from d2kbench.evaluate.timing import Timer
    from d2kbench.evaluate.worker import load_module
    from d2kbench.suite import find_task

    task = find_task(task_id)
    ref = load_module(task.reference_path, "ref")
    expert = load_module(task.expert_path, "expert").run
    timer = Timer(torch.device("cuda"))
    rng = random.Random(seed)

    def pages(v) -> int:  # room for the tensor at any of the variants' offsets
        return -(-(v.numel() * v.element_size() + PAGE // 2 + 4096) // PAGE)

    def placed(made: list, shift) -> list:
        tensors = [v for v in made if isinstance(v, torch.Tensor)]
        buffer = torch.empty((sum(map(pages, tensors)) + 1) * PAGE, dtype=torch.uint8, device="cuda")
        base = (-buffer.data_ptr()) % PAGE
        out, slot = [], 0
        for v in made:
            if not isinstance(v, torch.Tensor):
                out.append(v)
                continue
            nbytes = v.numel() * v.element_size()
            start = base + slot * PAGE + shift()
            view = buffer[start:start + nbytes].view(v.dtype).view(v.shape)
            view.copy_(v)
            out.append(view)
            slot += pages(v)
        return out

    report = {}
    for w in task.split("scored"):
        made = list(ref.make_inputs(w, 1, "cuda"))
        variants = {
            "as made": made,
            "page start": placed(made, lambda: 0),
            "1 MB + 4 KB in": placed(made, lambda: PAGE // 2 + 4096),
            "random 256 B offset": placed(made, lambda: 256 * rng.randrange(PAGE // 256 // 2)),
        }
        for name, inputs in variants.items():
            row = {}
            for graph in (False, True):
                times, _ = timer.time(lambda slot, inputs=inputs: expert(*inputs), lambda slot: None, [0], reps,
                                      warmup=10, graph=graph)
                row["graph" if graph else "events"] = statistics.median(times) * 1e3
            report[f"{w.name} | {name}"] = row
        for again in range(2):  # the same inputs, timed and captured anew: does one process vary by itself?
            row = {}
            for graph in (False, True):
                times, _ = timer.time(lambda slot, made=made: expert(*made), lambda slot: None, [0], reps, warmup=10,
                                      graph=graph)
                row["graph" if graph else "events"] = statistics.median(times) * 1e3
            report[f"{w.name} | as made, again {again + 1}"] = row
    print(json.dumps(report), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="moe_align_block_size")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.child:
        child(args.task, args.reps, args.seed)
        return
    runs = []
    for p in range(args.processes):
        out = subprocess.run([sys.executable, __file__, "--child", "--task", args.task, "--reps", str(args.reps),
                              "--seed", str(p)], capture_output=True, text=True, timeout=600)
        if out.returncode:
            print(f"process {p} failed:\n{out.stderr[-2000:]}")
            return
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{args.task}: medians in us, one column per process (events / graph replay)")
    for key in runs[0]:
        cells = "  ".join(f"{r[key]['events']:6.2f}/{r[key]['graph']:6.2f}" for r in runs)
        print(f"{key:55s} {cells}")


if __name__ == "__main__":
    main()
