"""One call of a task's expert (or comparator) for Nsight Compute, on the GPU machine.

    PYTHONPATH=src ncu --profile-from-start off --set full -o OUT \
        python3 bench/ncu_target.py TASK WORKLOAD [--comparator] [--set NAME=VALUE ...]

Warms up (compiles, autotunes) outside the profiled range, then calls the kernel once between
cudaProfilerStart and cudaProfilerStop, so ncu sees exactly the kernels of one timed call. `--set` profiles
a variant of the expert: each knob's module-level assignment set as bench/sweep.py sets it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch
from sweep import load_variant, parse_value, variant_label  # bench/, this script's folder

from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task")
    parser.add_argument("workload")
    parser.add_argument("--comparator", action="store_true", help="profile the comparator instead of the expert")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a knob of the expert")
    args = parser.parse_args()
    if args.set and args.comparator:
        parser.error("--set changes the expert; the comparator has no knobs")
    task = find_task(args.task)
    ref = load_module(task.reference_path, f"ncu_ref_{task.id}")
    inputs = list(ref.make_inputs(task.workload(args.workload), args.seed, "cuda"))
    if args.comparator:
        prepared = ref.comparator_prepare(*inputs) if hasattr(ref, "comparator_prepare") else inputs
        fn, inputs = ref.comparator, list(prepared)
    else:
        knobs = {name: parse_value(value) for name, _, value in (item.partition("=") for item in args.set)}
        scratch = tempfile.TemporaryDirectory(prefix="d2k-ncu-")
        try:
            fn = load_variant(task.expert_path.read_text(), knobs, Path(scratch.name), f"ncu_expert_{task.id}").run
        except ValueError as exc:
            parser.error(str(exc))
        print("expert", variant_label(knobs, {}))
    for _ in range(3):
        fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
