"""Where a candidate's first call on a workload spends its time: attention's checked calls took about 2 s per
workload and muon's about 3.5 s, of which the last call of each workload took 0.08 s
(bench/results/2026-12-04-h200-owed-10: `candidate.call.run` against `candidate.call[run, traced]`).

    PYTHONPATH=src python3 bench/diag/first_call.py TASK [--calls 3] [--cache DIR]

Runs the task's expert in this process, unconfined, the way the candidate's worker calls it (inputs made on the
GPU beforehand): for each scored workload, `--calls` calls one after the other, each synchronized. Per call it
prints the wall time, the seconds spent in Triton's compile step (compiling, or loading from the cache: the
launch counter's `compile_s`) and the rest. Run it twice with the same `--cache` (a Triton cache folder, empty
the first time) to see a cold and a warm compile cache.
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("task")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--cache", default="")
    args = parser.parse_args()
    if args.cache:
        os.environ["TRITON_CACHE_DIR"] = args.cache
    start = time.perf_counter()
    import torch

    from d2kbench.evaluate import integrity
    from d2kbench.evaluate.worker import load_module
    from d2kbench.suite import find_task

    imported = time.perf_counter() - start
    task = find_task(args.task)
    launches = integrity.TritonLaunches()
    launches.install()
    ref = load_module(task.reference_path, "task_reference")
    expert = load_module(task.expert_path, "task_expert")
    torch.cuda.init()
    print(f"# {task.id}: imports {imported:.2f} s; cache {os.environ.get('TRITON_CACHE_DIR', '(default)')}")
    for workload in task.workloads:
        if workload.split != "scored":
            continue
        inputs = ref.make_inputs(workload, 1, "cuda")
        torch.cuda.synchronize()
        for i in range(args.calls):
            launches.compile_s = 0.0
            t0 = time.perf_counter()
            with torch.no_grad():
                expert.run(*inputs)
            host = time.perf_counter() - t0
            torch.cuda.synchronize()
            wall = time.perf_counter() - t0
            print(f"{workload.name} call {i}: {wall * 1e3:.1f} ms (host {host * 1e3:.1f}, compile "
                  f"{launches.compile_s * 1e3:.1f}, launches {launches.count})", flush=True)


if __name__ == "__main__":
    main()
