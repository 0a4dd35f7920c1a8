"""Run a task's expert once per workload, for compute-sanitizer (the interpreter does not catch out-of-bounds
accesses). On the GPU machine, from the repository root:

    PYTHONPATH=src compute-sanitizer --tool memcheck --error-exitcode 9 \
        python3 bench/diag/memcheck_expert.py TASK [--splits scored,hidden] [--workloads a,b] [--oracle-cpu]

Each workload's inputs are drawn by the task's make_inputs (seed 1), the expert is called once, and its outputs
are compared with the oracle's under the task's rules: a wrong output exits 1, a memory error exits 9
(compute-sanitizer's report above it). --oracle-cpu computes the oracle from CPU copies of the inputs, so that
no torch kernel of the oracle runs under the tool: racecheck reports torch's own reduction kernels (the float64
norm) as hazards and takes minutes over them (bench/results/2026-12-07-h100-owed-39 call7).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sweep import mismatch, oracle_outputs  # noqa: E402

from d2kbench.evaluate import interp_fp8  # noqa: E402
from d2kbench.evaluate.worker import as_tuple, load_module  # noqa: E402
from d2kbench.suite import find_task  # noqa: E402


def on_cpu(value):
    return value.cpu() if isinstance(value, torch.Tensor) else value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("task")
    parser.add_argument("--splits", default="scored,hidden")
    parser.add_argument("--workloads", default="", help="comma-separated names (default: every workload of --splits)")
    parser.add_argument("--device", default="cuda", help="cpu: the interpreter on the cpu split (tests)")
    parser.add_argument("--oracle-cpu", action="store_true", help="the oracle on CPU copies of the inputs")
    args = parser.parse_args()
    if args.device == "cpu":
        interp_fp8.install()  # as the evaluator's workers do: the interpreter's own fp8 casts misround
    task = find_task(args.task)
    ref = load_module(task.reference_path, f"memcheck_ref_{task.id}")
    expert = load_module(task.expert_path, f"memcheck_expert_{task.id}")
    names = set(args.workloads.split(",")) if args.workloads else None
    wrong = 0
    for split in args.splits.split(","):
        for workload in task.split(split):
            if names is not None and workload.name not in names:
                continue
            inputs = list(ref.make_inputs(workload, 1, args.device))
            # before the call: some tasks write inputs in place
            expected = oracle_outputs(ref, task, [on_cpu(v) for v in inputs] if args.oracle_cpu else inputs)
            got = as_tuple(expert.run(*inputs))
            if args.device == "cuda":
                torch.cuda.synchronize()
            if args.oracle_cpu:
                inputs, got = [on_cpu(v) for v in inputs], tuple(on_cpu(v) for v in got)
            detail = mismatch(task, workload, ref, inputs, got, expected)
            print(f"{workload.name}: {'ok' if detail is None else 'WRONG: ' + detail}", flush=True)
            wrong += detail is not None
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
