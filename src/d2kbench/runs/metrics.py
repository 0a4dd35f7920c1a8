"""Per-run scores from an `EvalResult`, and the summary table of a store (per model x config)."""

from __future__ import annotations

import json
import sqlite3
import statistics
from collections.abc import Iterable
from typing import Any

from d2kbench.evaluate.result import EvalResult


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of positive values; None for no values."""
    values = list(values)
    return statistics.geometric_mean(values) if values else None


def _scored_geomean(result: EvalResult, field: str) -> float | None:
    """Geomean of one per-workload ratio over the scored workloads; None unless every one has it."""
    values = [getattr(w, field) for w in result.workloads if w.split == "scored"]
    if not values or any(v is None or v <= 0 for v in values):
        return None
    return geomean(values)


def run_scores(result: EvalResult) -> dict[str, Any]:
    """The store's outcome columns for one final evaluation.

    task speedup = geomean over scored workloads of reference / candidate when the answer is correct
    (every workload, hidden included), else null; likewise fraction of expert and speed-of-light
    fraction. In interpreter mode nothing is timed, so all three are null.
    """
    correct = result.correct
    speedups = {w.name: w.speedup for w in result.workloads if w.split == "scored"}
    return {
        "verdict": result.verdict, "reason": result.reason, "detail": result.detail,
        "mode": result.mode, "device": result.device,
        "task_speedup": _scored_geomean(result, "speedup") if correct else None,
        "fraction_of_expert": _scored_geomean(result, "fraction_of_expert") if correct else None,
        "sol_fraction": _scored_geomean(result, "sol_fraction") if correct else None,
        "workload_speedups": json.dumps(speedups),
        "eval_json": json.dumps(result.to_json()),
    }


def summarize(rows: list[sqlite3.Row]) -> list[dict[str, Any]]:
    """One line per (model, config): cells, finished, correct, failed, geomean task speedup, mean fraction of expert."""
    groups: dict[tuple[str, str], list[sqlite3.Row]] = {}
    for row in rows:
        groups.setdefault((row["model"], row["config"]), []).append(row)
    lines = []
    for (model, config), group in sorted(groups.items()):
        done = [r for r in group if r["status"] == "done"]
        correct = [r for r in done if r["verdict"] == "pass"]
        fractions = [r["fraction_of_expert"] for r in correct if r["fraction_of_expert"] is not None]
        lines.append({
            "model": model, "config": config, "cells": len(group), "done": len(done), "correct": len(correct),
            "failed": sum(r["status"] == "failed" for r in group),
            "geomean_speedup": geomean(r["task_speedup"] for r in correct if r["task_speedup"] is not None),
            "mean_fraction_of_expert": sum(fractions) / len(fractions) if fractions else None,
            "modes": sorted({r["mode"] for r in done if r["mode"]}),
        })
    return lines


def format_summary(lines: list[dict[str, Any]]) -> str:
    """The summary as a fixed-width text table, with a note when nothing was timed."""
    if not lines:
        return "no cells in the store"
    header = f"{'model':24s} {'config':9s} {'cells':>5s} {'done':>5s} {'correct':>7s} {'failed':>6s} " \
             f"{'speedup':>8s} {'frac.expert':>11s}"
    out = [header, "-" * len(header)]
    for line in lines:
        speedup = f"{line['geomean_speedup']:.3f}" if line["geomean_speedup"] is not None else "-"
        fraction = f"{line['mean_fraction_of_expert']:.3f}" if line["mean_fraction_of_expert"] is not None else "-"
        out.append(f"{line['model']:24s} {line['config']:9s} {line['cells']:5d} {line['done']:5d} "
                   f"{line['correct']:7d} {line['failed']:6d} {speedup:>8s} {fraction:>11s}")
    if any("interpreter" in line["modes"] for line in lines):
        out.append("interpreter mode (no GPU): correctness on the cpu workloads only, no timings, so no speedups")
    out.append("speedup: geomean over correct cells of the task speedup (reference / candidate, geomean over "
               "scored workloads); frac.expert: mean over correct cells")
    return "\n".join(out)
