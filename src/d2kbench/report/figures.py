"""The report's plots. Every number in a tooltip is `fmt` of a value that a table also holds."""

from __future__ import annotations

from collections.abc import Sequence

from d2kbench.report.metrics import FAST_P, ConfigSummary, TaskOutcome, select
from d2kbench.report.records import CONFIGS, UNGUIDED
from d2kbench.report.svg import (
    Plot,
    Point,
    Series,
    bar_plot,
    category_axis,
    line_plot,
    linear_axis,
    log_axis,
    scatter_plot,
)
from d2kbench.report.tables import fmt, fmt_p


def _models(outcomes: Sequence[TaskOutcome]) -> list[str]:
    return list(dict.fromkeys(o.model for o in outcomes))


def paired_scatters(outcomes: Sequence[TaskOutcome], floor: float) -> list[Plot]:
    """Per guided config: each task's floored speedup unguided (x) against guided (y), one colour per model."""
    plots = []
    for config in CONFIGS[1:]:
        series = []
        for model in _models(outcomes):
            guided = {o.task: o.floored(floor) for o in select(outcomes, model, config)}
            points = [Point(u, g, f"{model} / {o.task}: {UNGUIDED} {fmt(u)}, {config} {fmt(g)}")
                      for o in select(outcomes, model, UNGUIDED)
                      if (u := o.floored(floor)) is not None and (g := guided.get(o.task)) is not None]
            if points:
                series.append(Series(model, tuple(points)))
        if series:
            values = [v for s in series for p in s.points for v in (p.x, p.y)]
            plots.append(scatter_plot(
                f"paired-{config}", f"Paired per-task speedup: {UNGUIDED} vs {config}",
                log_axis(f"floored speedup, {UNGUIDED}", values), log_axis(f"floored speedup, {config}", values),
                series))
    return plots


def layer_stacking_plot(summaries: Sequence[ConfigSummary]) -> Plot | None:
    """Performance Score per config, one line per model; None with fewer than two configs."""
    configs = [c for c in CONFIGS if any(s.config == c for s in summaries)]
    series = []
    for model in dict.fromkeys(s.model for s in summaries):
        points = [Point(configs.index(s.config), s.performance_score,
                        f"{model} {s.config}: performance score {fmt(s.performance_score)}")
                  for s in summaries if s.model == model and s.performance_score is not None]
        if points:
            series.append(Series(model, tuple(points)))
    if len(configs) < 2 or not series:
        return None
    return line_plot("layer-stacking", "Layer stacking: Performance Score by guidance config",
                     category_axis("guidance config", configs),
                     log_axis("performance score", [p.y for s in series for p in s.points]), series)


def fast_p_plot(summaries: Sequence[ConfigSummary]) -> Plot | None:
    series = []
    for s in summaries:
        points = [Point(p, s.fast[p], f"{s.model} {s.config}: fast_{fmt_p(p)} {fmt(s.fast[p])}")
                  for p in FAST_P if s.fast[p] is not None]
        if points:
            series.append(Series(f"{s.model} {s.config}", tuple(points), dashed=s.config == UNGUIDED))
    if not series:
        return None
    return line_plot("fast-p", "fast_p: share of tasks correct and faster than p x the reference",
                     linear_axis("p", [(p, fmt_p(p)) for p in FAST_P]),
                     linear_axis("fast_p", [(v, fmt_p(v)) for v in (0, 0.25, 0.5, 0.75, 1)]), series)


def task_bars(outcomes: Sequence[TaskOutcome], expert: dict[str, float], floor: float) -> list[Plot]:
    """Per model: each task's floored speedup in every config beside the expert's speedup."""
    plots = []
    for model in _models(outcomes):
        tasks = list(dict.fromkeys(o.task for o in outcomes if o.model == model))
        series = []
        for config in CONFIGS:
            points = [Point(tasks.index(o.task), v, f"{o.task} {config}: {fmt(v)}")
                      for o in select(outcomes, model, config) if (v := o.floored(floor)) is not None]
            if points:
                series.append(Series(config, tuple(points)))
        expert_points = [Point(i, expert[t], f"{t} expert: {fmt(expert[t])}")
                         for i, t in enumerate(tasks) if t in expert]
        if expert_points:
            series.append(Series("expert", tuple(expert_points)))
        if series:
            values = [p.y for s in series for p in s.points]
            plots.append(bar_plot(f"tasks-{model}", f"{model}: per-task speedup against the expert", tasks, series,
                                  log_axis("speedup (floored)", values)))
    return plots
