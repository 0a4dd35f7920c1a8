"""What the candidate's first checked call does for seconds: muon's took 5.2 s of a 21.4 s warm evaluation (compile
stage 0.45 s; every later call 0.1 s), bench/results/2026-12-04-h200-owed-19 call4 (`bench/diag/eval_requests.py`).

    PYTHONPATH=src python3 bench/diag/first_call_profile.py [--task muon_newton_schulz]

The candidate is the task's expert behind a wrapper whose first call runs under cProfile and writes the profile's
top functions (cumulative time) to a file; the task is evaluated twice (the second warm, prestarted workers), and
the second evaluation's profile is printed. The candidate runs unconfined (sandbox off: the wrapper loads the
expert from the task's folder and writes outside its own), sharing the trusted worker's Triton cache.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from d2kbench.evaluate.evaluator import EvalOptions, evaluate
from d2kbench.suite import find_task

WRAPPER = '''"""The expert, its first call profiled."""
import cProfile
import importlib.util
import io
import pstats

_spec = importlib.util.spec_from_file_location("profiled_expert", {expert!r})
_expert = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_expert)
_calls = [0]


def run(*inputs):
    _calls[0] += 1
    if _calls[0] > 1:
        return _expert.run(*inputs)
    profile = cProfile.Profile()
    out = profile.runcall(_expert.run, *inputs)
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(40)
    with open({report!r}, "a") as f:
        f.write(text.getvalue())
    return out
'''


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="muon_newton_schulz")
    args = parser.parse_args()
    task = find_task(args.task)
    folder = Path(tempfile.mkdtemp(prefix="d2k-first-call-"))
    report = folder / "profile.txt"
    wrapper = folder / "profiled.py"
    wrapper.write_text(WRAPPER.format(expert=str(task.expert_path.resolve()), report=str(report)))
    options = EvalOptions(prestart=True, sandbox=False)
    for i in range(2):
        report.unlink(missing_ok=True)
        start = time.perf_counter()
        result = evaluate(task, wrapper, options)
        phases = ", ".join(f"{k} {v:.1f}" for k, v in result.phases_s.items())
        runs = {k: round(v, 2) for k, v in result.requests_s.items() if k.startswith("candidate.call")}
        print(f"evaluation {i}: {result.verdict}, {time.perf_counter() - start:.1f} s ({phases}); {runs}", flush=True)
    print(report.read_text() if report.exists() else "(no profile written)")


if __name__ == "__main__":
    main()
