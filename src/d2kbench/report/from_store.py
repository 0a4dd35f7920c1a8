"""The adapter from a run folder (`d2kbench.runs.store`) to `CellResult`s, and `d2k report DIR`."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from d2kbench.report.records import CellResult, WorkloadScore


def _scored_workloads(result: Mapping[str, Any]) -> tuple[WorkloadScore, ...]:
    """The scored workloads' ratios from an `EvalResult` JSON; none unless every scored workload was timed.
    The expert's speedup is speedup / fraction of expert = t_reference / t_expert, on the evaluator's
    scored times (CUDA-graph times for latency-bound tasks)."""
    scored = [w for w in result.get("workloads", []) if w.get("split") == "scored"]
    if not scored or any(w.get("speedup") is None for w in scored):
        return ()
    return tuple(WorkloadScore(
        w["name"], w["speedup"],
        expert_speedup=w["speedup"] / w["fraction_of_expert"] if w.get("fraction_of_expert") else None,
        speedup_vs_comparator=w.get("speedup_vs_comparator"), fraction_of_expert=w.get("fraction_of_expert"),
        sol_fraction=w.get("sol_fraction")) for w in scored)


@dataclass(frozen=True)
class StoreCells:
    """A run folder's finished cells, every (model, task, config, seed) of its matrix, and how many
    cells are not finished, by status (pending, running, failed): those count as missing (incorrect)."""

    cells: list[CellResult]
    matrix: list[tuple[str, str, str, int]]
    unfinished: Counter[str]


def cells_from_rows(rows: Iterable[Mapping[str, Any]]) -> StoreCells:
    """Cells from the store's `cells` rows: those with status `done` become `CellResult`s."""
    cells, matrix, unfinished = [], [], Counter()
    for row in rows:
        matrix.append((row["model"], row["task"], row["config"], int(row["seed"])))
        if row["status"] != "done":
            unfinished[row["status"]] += 1
            continue
        correct = row["verdict"] == "pass"
        result = json.loads(row["eval_json"]) if correct and row["eval_json"] else {}
        cells.append(CellResult(row["model"], row["task"], row["config"], int(row["seed"]), correct,
                                _scored_workloads(result)))
    return StoreCells(cells, matrix, unfinished)


def load_cells(run_dir: Path) -> StoreCells:
    """Read a run folder (read-only) into cells."""
    from d2kbench.runs.store import Store

    store = Store(run_dir, write=False)
    try:
        return cells_from_rows(store.rows())
    finally:
        store.close()


def report_command(args: argparse.Namespace) -> int:
    """`d2k report DIR [--out PATH] [--floor F]`: exit 0 on success, 2 on a usage or data error."""
    from d2kbench.judge.export import load_judgements, property_verdicts, with_judge_scores
    from d2kbench.report.build import ReportOptions, build_report
    from d2kbench.report.render import write_report
    from d2kbench.runs.store import check_folder
    from d2kbench.suite import load_suite

    out = args.out or args.dir / "report"
    try:
        loaded = load_cells(args.dir)
        check_folder(out, "--out" if args.out else "the report")
        judged = load_judgements(args.dir)  # from `d2k judge DIR`; none yet is fine
        cells = with_judge_scores(loaded.cells, judged)
        verdicts = property_verdicts(judged, {t.id: t for t in load_suite()}) if judged else []
        report = build_report(cells, verdicts, options=ReportOptions(floor=args.floor), matrix=loaded.matrix)
    except ValueError as exc:
        print(f"d2k report: {exc}", file=sys.stderr)
        return 2
    paths = write_report(report, out)
    for status, count in sorted(loaded.unfinished.items()):
        print(f"note: {count} cell(s) {status}, not finished: counted as missing (incorrect)", file=sys.stderr)
    if any(c.correct and not c.timed for c in loaded.cells):
        print("note: some correct cells have no timings (interpreter mode): their speed metrics are not reported",
              file=sys.stderr)
    print(f"wrote {len(paths)} files under {out}: {out / 'report.html'}, {out / 'report.md'}, {out / 'csv'}/")
    return 0
