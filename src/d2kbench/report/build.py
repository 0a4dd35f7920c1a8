"""`build_report`: cells (and optional judge verdicts) in, every table and plot of the report out."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from d2kbench.report import figures
from d2kbench.report.metrics import DEFAULT_FLOOR, expert_speedups, summarize, task_outcomes
from d2kbench.report.records import CellResult, PropertyVerdict, check_unique
from d2kbench.report.stats import DEFAULT_RESAMPLES, DEFAULT_SEED
from d2kbench.report.svg import Plot
from d2kbench.report.tables import (
    Table,
    crosstab_table,
    fast_p_table,
    judge_tables,
    layer_stacking_table,
    paired_table,
    settings_table,
    summary_table,
    task_table,
)


@dataclass(frozen=True)
class ReportOptions:
    floor: float = DEFAULT_FLOOR
    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED
    crosstab_config: str = "L1+L2+L3"
    title: str = "D2K-Bench report"

    def __post_init__(self) -> None:
        if not self.floor > 0 or self.resamples < 1:
            raise ValueError(f"need floor > 0 and resamples >= 1, got {self.floor} and {self.resamples}")


@dataclass(frozen=True)
class Report:
    title: str
    tables: tuple[Table, ...]
    plots: tuple[Plot, ...]

    def table(self, name: str) -> Table:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(f"no table {name!r}; tables: {', '.join(t.name for t in self.tables)}")


def build_report(cells: Iterable[CellResult], verdicts: Iterable[PropertyVerdict] = (),
                 options: ReportOptions | None = None, matrix: Iterable[tuple[str, str, str, int]] = ()) -> Report:
    """All metrics of the cells as tables, the plots, and a table of the plots' axis ticks. `matrix`:
    (model, task, config, seed) keys of runs without a result yet, counted as missing (incorrect)."""
    options = options or ReportOptions()
    cells = check_unique(cells)
    if not cells:
        raise ValueError("no cells to report on")
    verdicts = list(verdicts)
    outcomes = task_outcomes(cells, matrix)
    summaries = summarize(outcomes, options.floor)
    expert = expert_speedups(cells)
    paired, closures = paired_table(outcomes, summaries, expert, options.floor, options.resamples, options.seed)
    tables = [settings_table(options.floor, options.resamples, options.seed, options.crosstab_config),
              summary_table(summaries), paired, layer_stacking_table(summaries),
              task_table(outcomes, expert, closures, options.floor), fast_p_table(summaries)]
    if any(c.design_scores or c.implementation_scores for c in cells):
        tables += judge_tables(cells)
    if verdicts:
        tables.append(crosstab_table(verdicts, options.crosstab_config))
    plots = [*figures.paired_scatters(outcomes, options.floor), figures.layer_stacking_plot(summaries),
             figures.fast_p_plot(summaries), *figures.task_bars(outcomes, expert, options.floor)]
    plots = [p for p in plots if p is not None]
    axes = Table("plot_axes", "Plot axes", ("plot", "axis", "tick"),
                 tuple((p.name, axis, tick) for p in plots for axis, tick in p.ticks))
    return Report(options.title, (*tables, axes), tuple(plots))
