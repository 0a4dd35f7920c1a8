"""Judgement records as the report's inputs: per-property verdicts and judge scores on the cells.

A property counts as met when more than half of a judgement's valid samples say so; a judgement
without a valid sample contributes nothing (it is a failure, not a "not met").
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from d2kbench.judge.records import JUDGEMENTS, read_records
from d2kbench.report.records import CellResult, PropertyVerdict
from d2kbench.suite import Task


def load_judgements(run_dir: Path) -> list[dict[str, Any]]:
    """The judgement records of a run folder (DIR/judgements/), those with at least one valid sample."""
    return [r for r in read_records(Path(run_dir) / JUDGEMENTS) if r["status"] == "ok"]


def property_verdicts(records: Iterable[Mapping[str, Any]], tasks: Mapping[str, Task]) -> list[PropertyVerdict]:
    """One `PropertyVerdict` per property of each judgement (source `design` or the run's config)."""
    verdicts = []
    for r in records:
        layers = {p.id: p.layer for p in tasks[r["task"]].rubric}
        for pid, stat in r["summary"]["properties"].items():
            verdicts.append(PropertyVerdict(r["model"], r["task"], pid, layers[pid], r["source"],
                                            stat["mean"] > 0.5, r["seed"]))
    return verdicts


def with_judge_scores(cells: Iterable[CellResult], records: Iterable[Mapping[str, Any]]) -> list[CellResult]:
    """The cells with `implementation_scores` (their run's judgement: the mean over samples) and
    `design_scores` (the mean over the model's designs of the task), where judgements exist."""
    implementation: dict[tuple, dict[str, float]] = {}
    designs: dict[tuple, list[dict[str, float]]] = defaultdict(list)
    for r in records:
        means = {key: stat["mean"] for key, stat in r["summary"]["scores"].items()}
        if r["kind"] == "design":
            designs[(r["model"], r["task"])].append(means)
        else:
            implementation[(r["model"], r["task"], r["source"], r["seed"])] = means
    out = []
    for cell in cells:
        design = designs.get((cell.model, cell.task))
        design_means = {k: sum(d[k] for d in design) / len(design) for k in design[0]} if design else None
        out.append(dataclasses.replace(cell, implementation_scores=implementation.get(cell.key),
                                       design_scores=design_means))
    return out
