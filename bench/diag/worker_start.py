"""What the workers' bytecode cache (`evaluate/bytecode.py`) saves on this machine.

    PYTHONPATH=src python3 bench/diag/worker_start.py [--task quant_per_token_group_fp8] [--repeats 2]

In a fresh cache folder: a worker's imports (the op guard's first op included) timed in a new Python without the
cache and with it once warm; then a cold evaluation of the task's expert, correctness only (in a process of its
own, so nothing is imported yet), before the cache is warm (its warm-up starts beside it) and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from d2kbench.evaluate import bytecode

IMPORTS = ("import time; t = time.perf_counter(); from d2kbench.evaluate import worker, timing; "
           "worker.warm_op_guard(); import triton.language; print(time.perf_counter() - t)")
EVALUATE = ("import json; from d2kbench.suite import find_task; "
            "from d2kbench.evaluate.evaluator import EvalOptions, evaluate; "
            "t = find_task({task!r}); r = evaluate(t, t.expert_path, EvalOptions(time=False)); "
            "print(json.dumps({{'verdict': r.verdict, 'elapsed_s': r.elapsed_s, 'phases_s': r.phases_s}}))")


def python(code: str, env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    return proc.stdout.strip().splitlines()[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="quant_per_token_group_fp8")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="d2k-bytecode-diag-"))
    folder.chmod(0o755)
    env = {**os.environ, "D2K_BYTECODE_CACHE": str(folder), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPYCACHEPREFIX", None)
    empty = Path(tempfile.mkdtemp(prefix="d2k-bytecode-empty-"))  # a prefix with nothing in it: no bytecode at all
    for i in range(args.repeats):
        print(f"imports, the packages' own bytecode (if any) {i}: {float(python(IMPORTS, env)):.2f} s", flush=True)
        no_cache = float(python(IMPORTS, {**env, "PYTHONPYCACHEPREFIX": str(empty)}))
        print(f"imports, no bytecode at all {i}: {no_cache:.2f} s", flush=True)
    print(f"cold evaluation, cache not warm: {python(EVALUATE.format(task=args.task), env)}", flush=True)
    start = time.perf_counter()
    while not bytecode.ready(folder) and time.perf_counter() - start < 300:
        time.sleep(0.5)
    print(f"cache warm: {bytecode.ready(folder)} ({time.perf_counter() - start:.1f} s after that evaluation ended; "
          f"{sum(1 for _ in folder.rglob('*.pyc'))} files)", flush=True)
    for i in range(args.repeats):
        cached = float(python(IMPORTS, {**env, "PYTHONPYCACHEPREFIX": str(folder)}))
        print(f"imports, from the cache {i}: {cached:.2f} s", flush=True)
    for i in range(args.repeats):
        print(f"cold evaluation, cache warm {i}: {python(EVALUATE.format(task=args.task), env)}", flush=True)
    for path in (folder, empty):
        shutil.rmtree(path, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
