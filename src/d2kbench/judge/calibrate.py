"""Judge calibration: the expert (every property met) and ablated experts (one property removed each).

Each task's calibration set is its `expert.py` and every `ablations/<property_id>.py`: a correct
Triton kernel identical in design to the expert except that the named property is removed. The
judge sees each file without its module docstring (the ablations' docstrings name what was removed).
For every (candidate, property) the expected verdict is "met" except for the removed property; the
judge's agreement is the share of its valid samples that give the expected verdict.
"""

from __future__ import annotations

import ast
import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from d2kbench.agent.models import ModelClient
from d2kbench.judge.ask import DEFAULT_RETRIES
from d2kbench.judge.judging import Subject, judge_subject
from d2kbench.suite import Task

ABLATIONS = "ablations"
EXPERT = "expert"


@dataclass(frozen=True)
class Candidate:
    task: Task
    name: str  # "expert" or the removed property's id
    path: Path

    @property
    def removed(self) -> str | None:
        return None if self.name == EXPERT else self.name

    def expected(self, property_id: str) -> bool:
        return property_id != self.removed


def calibration_set(task: Task) -> list[Candidate]:
    """The expert, then the task's ablations in name order; an ablation must name a rubric property."""
    ids = {p.id for p in task.rubric}
    candidates = [Candidate(task, EXPERT, task.expert_path)]
    for path in sorted((task.path / ABLATIONS).glob("*.py")):
        if path.stem not in ids:
            raise ValueError(f"{path}: an ablation is named after the property it removes; {path.stem!r} is not "
                             f"a property of {task.id} ({', '.join(sorted(ids))})")
        candidates.append(Candidate(task, path.stem, path))
    return candidates


def without_module_docstring(source: str) -> str:
    """`source` with its module docstring removed (lines kept otherwise as they are)."""
    body = ast.parse(source).body
    first = body[0] if body else None
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        return source
    lines = source.splitlines(keepends=True)
    return "".join(lines[: first.lineno - 1] + lines[first.end_lineno:]).lstrip("\n")


def subject_of(candidate: Candidate) -> Subject:
    text = without_module_docstring(candidate.path.read_text(encoding="utf-8"))
    return Subject("implementation", candidate.task, text, "calibration", "calibration", 0,
                   f"{candidate.task.id}/{candidate.name}", candidate.name)


def compare(candidate: Candidate, record: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per rubric property: expected verdict, the judge's mean, its agreement (None on failure)."""
    rows = []
    for p in candidate.task.rubric:
        expected = candidate.expected(p.id)
        mean = record["summary"]["properties"][p.id]["mean"] if record["status"] == "ok" else None
        agreement = None if mean is None else (mean if expected else 1.0 - mean)
        rows.append({"task": candidate.task.id, "candidate": candidate.name, "property": p.id, "layer": p.layer,
                     "expected": expected, "judged_mean": mean, "agreement": agreement})
    return rows


async def calibrate(tasks: list[Task], judge: ModelClient, judge_model: str, *, samples: int = 1,
                    retries: int = DEFAULT_RETRIES, concurrency: int = 1) -> dict[str, Any]:
    """Judge every candidate of the tasks' calibration sets; rows, per-candidate outcomes and the accuracy."""
    candidates = [c for task in tasks for c in calibration_set(task)]
    gate = asyncio.Semaphore(concurrency)

    async def one(candidate: Candidate) -> dict[str, Any]:
        async with gate:
            return await judge_subject(subject_of(candidate), judge, judge_model, samples=samples, retries=retries)

    records = await asyncio.gather(*(one(c) for c in candidates))
    rows, outcomes = [], []
    for candidate, record in zip(candidates, records, strict=True):
        candidate_rows = compare(candidate, record)
        rows += candidate_rows
        wrong = [r["property"] for r in candidate_rows if r["agreement"] is not None and r["agreement"] < 0.5]
        outcomes.append({"task": candidate.task.id, "candidate": candidate.name, "removed": candidate.removed,
                         "status": record["status"], "wrong": wrong,
                         "exact": record["status"] == "ok" and not wrong})
    judged = [r["agreement"] for r in rows if r["agreement"] is not None]
    return {"judge_model": judge_model, "samples": samples, "rows": rows, "candidates": outcomes,
            "accuracy": sum(judged) / len(judged) if judged else None,
            "judge_failures": sum(o["status"] != "ok" for o in outcomes), "records": records}


def _verdict(value: float | None) -> str:
    return "failure" if value is None else f"{value:.2f}"


def calibration_markdown(result: dict[str, Any]) -> str:
    """The calibration tables: per candidate, then per property (expected vs judged), then the accuracy."""
    accuracy = "n/a (no valid judge answer)" if result["accuracy"] is None else f"{100 * result['accuracy']:.1f}%"
    lines = [f"# Judge calibration: {result['judge_model']} ({result['samples']} sample(s))", "",
             f"Accuracy (share of valid samples giving the expected verdict, over every candidate x property): "
             f"**{accuracy}**; judge failures: {result['judge_failures']} candidate(s).", "",
             "| task | candidate | removed property | judge | wrongly judged |", "|---|---|---|---|---|"]
    for o in result["candidates"]:
        status = "failure" if o["status"] != "ok" else ("exact" if o["exact"] else "wrong")
        lines.append(f"| {o['task']} | {o['candidate']} | {o['removed'] or '-'} | {status} | "
                     f"{', '.join(o['wrong']) or '-'} |")
    lines += ["", "| task | candidate | property | layer | expected | judged (share met) | agreement |",
              "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        expected = "met" if r["expected"] else "NOT met"
        lines.append(f"| {r['task']} | {r['candidate']} | {r['property']} | {r['layer']} | {expected} | "
                     f"{_verdict(r['judged_mean'])} | {_verdict(r['agreement'])} |")
    return "\n".join(lines) + "\n"
