"""Compile every expert (and, with --ablations, every ablation) for sm_90 on every workload of the given splits,
with whichever Triton is first on the path, and print one line per kernel specialisation:

    PYTHONPATH=src python3 bench/diag/compile_all.py [--tasks a,b] [--splits scored,hidden] [--ablations]
    PYTHONPATH=.venv/device-triton:src python3 bench/diag/compile_all.py ...    # the H200's Triton (3.6)

The tests compile each expert on its profile workload only; this walks them all (about 4 minutes for the four
tasks on two cores). It exits 1 where a kernel fails to compile or ptxas serialized its wgmma (C7515): the
upper-triangle ablation's Gram launches on 8192x28672, found this way (docs/perf/optimizer.md, thirty-ninth session).
Spills are printed, not judged (the tests hold the accepted ones).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import triton

from d2kbench.evaluate.evaluator import compile_report
from d2kbench.suite import load_suite


def candidates(task, ablations: bool) -> list[Path]:
    files = [task.expert_path]
    if ablations:
        files += sorted((task.expert_path.parent / "ablations").glob("*.py"))
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default="", help="comma-separated task ids (default: every task)")
    parser.add_argument("--splits", default="scored,hidden")
    parser.add_argument("--ablations", action="store_true", help="the ablations too")
    args = parser.parse_args()
    wanted = set(args.tasks.split(",")) if args.tasks else None
    splits = args.splits.split(",")
    print(f"triton {triton.__version__}", flush=True)
    bad = 0
    for task in load_suite():
        if wanted is not None and task.id not in wanted:
            continue
        for path in candidates(task, args.ablations):
            for workload in (w for w in task.workloads if w.split in splits):
                seen = set()
                for k in compile_report(task, path, workload=workload.name):
                    key = (k["kernel"], tuple(sorted(k.get("constexprs", {}).items())))
                    if key in seen:  # one line per specialisation (muon launches one kernel 19 times)
                        continue
                    seen.add(key)
                    problem = k.get("error") if not k["ok"] else (
                        f"wgmma SERIALIZED: {k['wgmma_serialized']}" if "wgmma_serialized" in k else "")
                    bad += bool(problem)
                    print(f"{task.id} {path.stem} {workload.name} {k['kernel']}: registers {k.get('registers', '?')}, "
                          f"spills {k.get('spill_store_bytes', 0)} B, wgmma {'yes' if k.get('wgmma') else 'no'}"
                          f"{'; ' + problem if problem else ''}", flush=True)
    print(f"{bad} kernel(s) failed or serialized", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
