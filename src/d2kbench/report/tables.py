"""The report's tables; every number is formatted once, here, by `fmt`.

The Markdown, CSV and HTML writers (`render`) only lay these strings out, so a number printed in
one format is the same string in the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from d2kbench.report.crosstab import property_crosstab
from d2kbench.report.metrics import (
    FAST_P,
    ConfigSummary,
    SeedResult,
    TaskOutcome,
    fully_correct_models,
    geomean_speedup,
    select,
)
from d2kbench.report.paired import GapClosure, gap_closures, median_gap_closure, paired_difference
from d2kbench.report.records import CONFIGS, SCORE_KEYS, UNGUIDED, CellResult, PropertyVerdict
from d2kbench.report.stats import spearman


def fmt(value: object) -> str:
    """The one text form of a value: '-' for missing, yes/no, integers as they are, floats to 3 decimals
    (3 significant digits below 0.01, so a tiny ratio does not print as zero)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.3g}" if 0 < abs(value) < 0.01 else f"{value:.3f}"
    return str(value)


def fmt_p(p: float) -> str:
    return f"{p:g}"


@dataclass(frozen=True)
class Table:
    name: str  # file stem of its CSV
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""


def _table(name: str, title: str, columns: Sequence[str], rows: Iterable[Sequence[object]], note: str = "") -> Table:
    return Table(name, title, tuple(columns), tuple(tuple(fmt(v) for v in row) for row in rows), note)


def settings_table(floor: float, resamples: int, seed: int, crosstab_config: str) -> Table:
    rows = [("floor", floor), ("bootstrap resamples", resamples), ("bootstrap seed", seed),
            ("confidence level", "95%"), ("fast_p thresholds", ", ".join(fmt_p(p) for p in FAST_P)),
            ("cross-table guided config", crosstab_config)]
    return _table("settings", "Settings", ("setting", "value"), rows)


def summary_table(summaries: Sequence[ConfigSummary]) -> Table:
    columns = ("model", "config", "tasks", "seeds", "missing cells", "correctness", "floor", "performance score",
               "score min seed", "score max seed", "fully correct", "geomean speedup", "fraction of expert",
               "sol fraction", *(f"fast_{fmt_p(p)}" for p in FAST_P))
    rows = [(s.model, s.config, s.tasks, s.seeds, s.missing, s.correctness_rate, s.floor, s.performance_score,
             s.score_min_seed, s.score_max_seed, s.fully_correct, s.geomean_speedup, s.fraction_of_expert,
             s.sol_fraction, *(s.fast[p] for p in FAST_P)) for s in summaries]
    note = ("Geomean speedup only for models correct on every task and seed in every config; fraction of expert "
            "and sol fraction are geometric means over correct tasks only.")
    return _table("summary", "Summary per model and config", columns, rows, note)


def layer_stacking_table(summaries: Sequence[ConfigSummary]) -> Table:
    models = list(dict.fromkeys(s.model for s in summaries))
    by_key = {(s.model, s.config): s for s in summaries}
    rows = []
    for model in models:
        for metric in ("correctness_rate", "performance_score", "geomean_speedup"):
            rows.append((model, metric.replace("_", " "),
                         *(getattr(by_key[(model, c)], metric) if (model, c) in by_key else None for c in CONFIGS)))
    return _table("layer_stacking", "Layer stacking", ("model", "metric", *CONFIGS), rows)


def paired_table(outcomes: Sequence[TaskOutcome], summaries: Sequence[ConfigSummary], expert: dict[str, float],
                 floor: float, resamples: int, seed: int) -> tuple[Table, dict[tuple[str, str, str], GapClosure]]:
    """The paired table, and each task's gap closure keyed by (model, config, task) for the task table."""
    by_key = {(s.model, s.config): s for s in summaries}
    rows, closures = [], {}
    for model, config in by_key:
        if config == UNGUIDED or (model, UNGUIDED) not in by_key:
            continue
        unguided, guided = select(outcomes, model, UNGUIDED), select(outcomes, model, config)
        diff = paired_difference(unguided, guided, floor, resamples, seed)
        ratio = diff.score_ratio or (None, None, None)
        both_correct = model in fully_correct_models(outcomes, (UNGUIDED, config))
        gaps = gap_closures(unguided, guided, expert, floor)
        closures.update({(model, config, g.task): g for g in gaps})
        u, g = by_key[(model, UNGUIDED)], by_key[(model, config)]
        rows.append((model, config, diff.tasks, u.correctness_rate, g.correctness_rate, diff.correctness.estimate,
                     diff.correctness.low, diff.correctness.high, u.performance_score, g.performance_score, *ratio,
                     geomean_speedup(unguided) if both_correct else None,
                     geomean_speedup(guided) if both_correct else None,
                     median_gap_closure(gaps), sum(c.value is not None for c in gaps)))
    columns = ("model", "guided config", "tasks", "correctness unguided", "correctness guided", "correctness diff",
               "diff ci low", "diff ci high", "score unguided", "score guided", "score ratio", "ratio ci low",
               "ratio ci high", "geomean speedup unguided", "geomean speedup guided", "median gap closure",
               "gap tasks")
    note = ("Guided minus unguided, paired by task. Correctness diff: mean difference in correct share. Score ratio: "
            "exp of the mean difference in log floored speedup (= guided score / unguided score). Intervals: "
            "percentile bootstrap over tasks. Geomean speedups only when the model is correct on every task in both "
            "configs. Gap closure: median over the tasks where it is defined (gap tasks).")
    return _table("paired", "Unguided vs guided, per model", columns, rows, note), closures


def task_table(outcomes: Sequence[TaskOutcome], expert: dict[str, float],
               closures: dict[tuple[str, str, str], GapClosure], floor: float) -> Table:
    rows = []
    for o in outcomes:
        spread = o.spread or (None, None)
        gap = closures.get((o.model, o.config, o.task))
        rows.append((o.model, o.config, o.task, f"{len(o.correct_seeds)}/{len(o.seeds)}", o.speedup, *spread,
                     o.floored(floor), expert.get(o.task), o.correct_mean("fraction_of_expert"),
                     o.correct_mean("speedup_vs_comparator"), o.correct_mean("sol_fraction"),
                     None if gap is None else gap.value, None if gap is None else gap.status))
    columns = ("model", "config", "task", "correct seeds", "speedup", "speedup min seed", "speedup max seed",
               "floored speedup", "expert speedup", "fraction of expert", "speedup vs comparator", "sol fraction",
               "gap closure", "gap status")
    note = ("Speedups over the PyTorch reference (geometric means over scored workloads, then seeds). Floored: "
            "max(speedup, floor), an incorrect seed counting as the floor. Fraction of expert, speedup vs comparator "
            "and sol fraction are over the correct seeds.")
    return _table("tasks", "Per task", columns, rows, note)


def fast_p_table(summaries: Sequence[ConfigSummary]) -> Table:
    rows = [(s.model, s.config, fmt_p(p), s.fast[p]) for s in summaries for p in FAST_P]
    return _table("fast_p", "fast_p: share of tasks correct and faster than p x the reference",
                  ("model", "config", "p", "fast_p"), rows)


def crosstab_table(verdicts: Sequence[PropertyVerdict], config: str) -> Table:
    rows = [(c.layer, c.proposed, c.implemented_unguided, c.implemented_given, c.count)
            for c in property_crosstab(verdicts, config)]
    note = (f"(model, task, property) triples with a design verdict, an unguided verdict and a verdict in {config}; "
            "rows with proposed and not implemented given are properties left unimplemented although spelled out.")
    return _table("crosstab", "Rubric properties: proposed x implemented unguided x implemented when given",
                  ("layer", "proposed in design", "implemented unguided", "implemented given", "count"), rows, note)


def judge_tables(cells: Sequence[CellResult]) -> tuple[Table, Table]:
    """Mean judge scores per (model, config), and Spearman's rho between the implementation score
    (combined) and the measured speedup of each correct, timed cell."""
    pairs = sorted({(c.model, c.config) for c in cells}, key=lambda mc: (mc[0], CONFIGS.index(mc[1])))
    scores, agreement = [], []
    for model, config in pairs:
        group = [c for c in cells if (c.model, c.config) == (model, config)]
        for kind in ("design", "implementation"):
            scored = [getattr(c, f"{kind}_scores") for c in group if getattr(c, f"{kind}_scores")]
            if scored:
                means = [_mean([s[k] for s in scored if k in s]) for k in SCORE_KEYS]
                scores.append((model, config, kind, *means, len(scored)))
        ranked = [(c.implementation_scores["combined"], speedup) for c in group
                  if c.implementation_scores and "combined" in c.implementation_scores
                  and (speedup := _cell_speedup(c)) is not None]
        if ranked:
            rho = spearman([r[0] for r in ranked], [r[1] for r in ranked])
            agreement.append((model, config, rho, len(ranked)))
    score_table = _table("judge_scores", "Judge scores (means over cells)",
                         ("model", "config", "kind", *SCORE_KEYS, "cells"), scores)
    agreement_table = _table("rank_agreement", "Rank agreement: implementation score vs measured speedup",
                             ("model", "config", "spearman rho", "cells"), agreement,
                             "Over the correct, timed cells; rho is empty (-) when undefined (a constant side).")
    return score_table, agreement_table


def _cell_speedup(cell: CellResult) -> float | None:
    """A correct, timed cell's speedup (geometric mean over its workloads), else None."""
    return SeedResult.from_cell(cell).speedup


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None
