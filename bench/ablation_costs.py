"""What each judge-calibration ablation costs on this GPU: the expert with one rubric property removed
(`ablations/<property>.py`, docs/judge.md), evaluated as a candidate against the expert.

    PYTHONPATH=src python3 bench/ablation_costs.py [--tasks a,b] [--repeats 2] [--json FILE] [--markdown FILE]

Each evaluation times the ablation and the expert on the task's scored workloads; a workload's slowdown is
1 / fraction_of_expert (t_ablation / t_expert), over `--repeats` evaluations its median and range. A property's
`h200_cost` in rubric.toml quotes these figures with their results folder; the table prints it beside them.
Exit status 1 where an ablation does not pass (each must stay a correct kernel).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from d2kbench.evaluate.evaluator import EvalOptions, evaluate
from d2kbench.evaluate.result import EvalResult
from d2kbench.judge.calibrate import calibration_set
from d2kbench.suite import find_task, load_suite


def slowdowns(results: list[EvalResult]) -> dict[str, list[float]]:
    """Per workload, each evaluation's t_ablation / t_expert, for the evaluations that timed it."""
    out: dict[str, list[float]] = {}
    for r in results:
        for w in r.workloads:
            if w.fraction_of_expert:
                out.setdefault(w.name, []).append(1.0 / w.fraction_of_expert)
    return out


def table_rows(record: dict[str, Any]) -> list[str]:
    """Markdown rows of one ablation's record: one per workload, the rubric's recorded cost beside the first."""
    verdicts = ", ".join(record["verdicts"])
    rows = []
    for i, (name, values) in enumerate(record["slowdowns"].items()):
        shown = f"{statistics.median(values):.3f}x ({min(values):.3f}-{max(values):.3f})"
        recorded = record["recorded"] if i == 0 else ""
        rows.append(f"| {record['task']} | `{record['ablation']}` | {name} | {shown} | {verdicts} | {recorded} |")
    if not rows:
        rows.append(f"| {record['task']} | `{record['ablation']}` | (nothing timed) | | {verdicts} | "
                    f"{record['recorded']} |")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="", help="comma-separated task ids (default: every task)")
    parser.add_argument("--repeats", type=int, default=2, help="evaluations per ablation")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    tasks = [find_task(t) for t in args.tasks.split(",")] if args.tasks else list(load_suite())
    options = EvalOptions(prestart=True)
    records, ok = [], True
    lines = ["| task | ablation (property removed) | workload | slowdown, median (range) | verdicts | "
             "rubric's recorded cost |", "|---|---|---|---|---|---|"]
    for task in tasks:
        costs = {p.id: p.h200_cost for p in task.rubric}
        for candidate in calibration_set(task):
            if not candidate.removed:
                continue
            results = [evaluate(task, candidate.path, options) for _ in range(args.repeats)]
            record = {"task": task.id, "ablation": candidate.removed,
                      "verdicts": [f"{r.verdict}/{r.reason}" if r.reason else r.verdict for r in results],
                      "slowdowns": slowdowns(results), "recorded": costs.get(candidate.removed, ""),
                      "failures": [f.line() for r in results for f in r.failures]}
            ok &= all(r.verdict == "pass" for r in results)
            records.append(record)
            rows = table_rows(record)
            lines.extend(rows)
            print(*rows, *record["failures"], sep="\n", flush=True)
            if args.json:  # after each ablation: a run cut short keeps what it finished
                args.json.write_text(json.dumps(records, indent=1))
    if args.markdown:
        args.markdown.write_text("\n".join(lines) + "\n")
    print(f"\nevery ablation passed: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
