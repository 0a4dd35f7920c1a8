"""The report's metrics, as pure functions over `CellResult`s. docs/metrics.md has the formulas.

Cells are grouped into `TaskOutcome`s, one per (model, config, task) with one `SeedResult` per seed.
The tasks of the matrix are every task any cell (or matrix key) names; the seeds of a (model, config)
are the seeds any of its cells names. A cell that is missing from that grid counts as incorrect.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from d2kbench.report.records import CONFIGS, CellResult, check_unique
from d2kbench.report.stats import geomean

DEFAULT_FLOOR = 0.1
FAST_P = (0.0, 0.5, 1.0, 1.5, 2.0)


def _geomean_or_none(values: Sequence[float | None]) -> float | None:
    return None if not values or any(v is None for v in values) else geomean(values)


@dataclass(frozen=True)
class SeedResult:
    """One seed of a task: correct or not, and its ratios (geometric means over scored workloads).
    Ratios are None for an incorrect seed and for a correct one evaluated without timings."""

    seed: int
    correct: bool
    missing: bool = False
    speedup: float | None = None
    fraction_of_expert: float | None = None
    sol_fraction: float | None = None
    speedup_vs_comparator: float | None = None

    @classmethod
    def from_cell(cls, cell: CellResult) -> SeedResult:
        if not cell.correct:
            return cls(cell.seed, False)
        w = cell.workloads
        return cls(cell.seed, True, False, _geomean_or_none([x.speedup for x in w]),
                   _geomean_or_none([x.expert_fraction for x in w]),
                   _geomean_or_none([x.sol_fraction for x in w]),
                   _geomean_or_none([x.speedup_vs_comparator for x in w]))

    def floored(self, floor: float) -> float | None:
        """max(speedup, floor); the floor when incorrect; None when correct but not timed."""
        if not self.correct:
            return floor
        return None if self.speedup is None else max(self.speedup, floor)


@dataclass(frozen=True)
class TaskOutcome:
    model: str
    config: str
    task: str
    seeds: tuple[SeedResult, ...]

    @property
    def correct_seeds(self) -> tuple[SeedResult, ...]:
        return tuple(s for s in self.seeds if s.correct)

    @property
    def correct_share(self) -> float:
        return len(self.correct_seeds) / len(self.seeds)

    @property
    def all_correct(self) -> bool:
        return all(s.correct for s in self.seeds)

    @property
    def missing(self) -> int:
        return sum(s.missing for s in self.seeds)

    @property
    def speedup(self) -> float | None:
        """The task speedup: geometric mean over seeds; None unless every seed is correct and timed."""
        return _geomean_or_none([s.speedup for s in self.seeds]) if self.all_correct else None

    @property
    def spread(self) -> tuple[float, float] | None:
        """(min, max) of the correct seeds' speedups; None if any correct seed is untimed or none is correct."""
        values = [s.speedup for s in self.correct_seeds]
        return None if not values or None in values else (min(values), max(values))

    def floored(self, floor: float) -> float | None:
        """Geometric mean over seeds of max(speedup, floor), an incorrect seed counting as the floor."""
        return _geomean_or_none([s.floored(floor) for s in self.seeds])

    def fast(self, p: float) -> float | None:
        """Share of seeds that are correct with speedup > p; None if a correct seed is untimed."""
        values = [s.speedup for s in self.correct_seeds]
        return None if None in values else sum(v > p for v in values) / len(self.seeds)

    def correct_mean(self, attribute: str) -> float | None:
        """Geometric mean over the correct seeds of a ratio (fraction_of_expert, sol_fraction, ...)."""
        return _geomean_or_none([getattr(s, attribute) for s in self.correct_seeds])


def task_outcomes(cells: Iterable[CellResult], matrix: Iterable[tuple[str, str, str, int]] = ()) -> list[TaskOutcome]:
    """Group cells into outcomes, sorted by model, config (in CONFIGS order), task. `matrix` may add
    (model, task, config, seed) keys that have no result yet (unfinished runs): they widen the grid
    like any cell's key. Missing cells are incorrect."""
    cells = check_unique(cells)
    keys = [c.key for c in cells] + list(matrix)
    tasks = sorted({task for _, task, _, _ in keys})
    by_key = {c.key: c for c in cells}
    seeds: dict[tuple[str, str], set[int]] = defaultdict(set)
    for model, _, config, seed in keys:
        if config not in CONFIGS:
            raise ValueError(f"matrix key {(model, config, seed)}: config must be one of {', '.join(CONFIGS)}")
        seeds[(model, config)].add(seed)
    out = []
    for model, config in sorted(seeds, key=lambda mc: (mc[0], CONFIGS.index(mc[1]))):
        for task in tasks:
            results = []
            for seed in sorted(seeds[(model, config)]):
                cell = by_key.get((model, task, config, seed))
                results.append(SeedResult(seed, False, missing=True) if cell is None else SeedResult.from_cell(cell))
            out.append(TaskOutcome(model, config, task, tuple(results)))
    return out


def select(outcomes: Iterable[TaskOutcome], model: str, config: str) -> list[TaskOutcome]:
    return [o for o in outcomes if o.model == model and o.config == config]


def expert_speedups(cells: Iterable[CellResult]) -> dict[str, float]:
    """Per task, the expert's speedup over the reference: geometric mean over the cells that carry it
    (on every workload) of each cell's geometric mean over workloads."""
    per_task: dict[str, list[float]] = defaultdict(list)
    for c in cells:
        values = [w.expert_speedup for w in c.workloads]
        if values and None not in values:
            per_task[c.task].append(geomean(values))
    return {task: geomean(values) for task, values in per_task.items()}


def correctness_rate(outcomes: Sequence[TaskOutcome]) -> float:
    """Correct cells / cells of the (model, config): with one seed, correct tasks / tasks."""
    if not outcomes:
        raise ValueError("correctness rate of no tasks")
    return sum(len(o.correct_seeds) for o in outcomes) / sum(len(o.seeds) for o in outcomes)


def performance_score(outcomes: Sequence[TaskOutcome], floor: float = DEFAULT_FLOOR) -> float | None:
    """Geometric mean over tasks of each task's floored speedup (incorrect = floor); None if a
    correct cell has no timings."""
    if floor <= 0:
        raise ValueError(f"the floor must be > 0, got {floor}")
    return _geomean_or_none([o.floored(floor) for o in outcomes])


def performance_score_by_seed(outcomes: Sequence[TaskOutcome], floor: float = DEFAULT_FLOOR) -> dict[int, float | None]:
    """The Performance Score of each seed on its own (its spread is the spread over seeds)."""
    seeds = sorted({s.seed for o in outcomes for s in o.seeds})
    return {seed: _geomean_or_none([s.floored(floor) for o in outcomes for s in o.seeds if s.seed == seed])
            for seed in seeds}


def fast_p(outcomes: Sequence[TaskOutcome], p: float) -> float | None:
    """Share of tasks (cells, with seeds) that are correct and faster than p times the reference."""
    values = [o.fast(p) for o in outcomes]
    return None if not values or None in values else sum(values) / len(values)


def fully_correct_models(outcomes: Sequence[TaskOutcome], configs: Sequence[str]) -> list[str]:
    """Models correct on every task and seed in every one of `configs` (a model lacking a config is not)."""
    models = sorted({o.model for o in outcomes})
    return [m for m in models
            if all(select(outcomes, m, c) and all(o.all_correct for o in select(outcomes, m, c)) for c in configs)]


def geomean_speedup(outcomes: Sequence[TaskOutcome]) -> float | None:
    """Geometric mean over tasks of the task speedup; meaningful for a fully-correct model only
    (the caller checks that with `fully_correct_models`). None if a task is incorrect or untimed."""
    return _geomean_or_none([o.speedup for o in outcomes])


def correct_mean(outcomes: Sequence[TaskOutcome], attribute: str) -> float | None:
    """Geometric mean over the tasks with a correct seed of a ratio (fraction_of_expert, sol_fraction):
    conditional on correctness, so always shown with the correctness rate."""
    values = [o.correct_mean(attribute) for o in outcomes if o.correct_seeds]
    return _geomean_or_none(values)


@dataclass(frozen=True)
class ConfigSummary:
    """Every model-level metric of one (model, config)."""

    model: str
    config: str
    tasks: int
    seeds: int
    missing: int
    correctness_rate: float
    floor: float
    performance_score: float | None
    score_min_seed: float | None
    score_max_seed: float | None
    fully_correct: bool
    geomean_speedup: float | None
    fraction_of_expert: float | None
    sol_fraction: float | None
    fast: dict[float, float | None]


def summarize(outcomes: Sequence[TaskOutcome], floor: float = DEFAULT_FLOOR) -> list[ConfigSummary]:
    """One summary per (model, config); "fully correct" is over every config in `outcomes`."""
    configs = [c for c in CONFIGS if any(o.config == c for o in outcomes)]
    fully = set(fully_correct_models(outcomes, configs))
    pairs = list(dict.fromkeys((o.model, o.config) for o in outcomes))
    out = []
    for model, config in pairs:
        group = select(outcomes, model, config)
        by_seed = list(performance_score_by_seed(group, floor).values())
        spread = (None, None) if None in by_seed else (min(by_seed), max(by_seed))
        out.append(ConfigSummary(
            model, config, len(group), len(group[0].seeds), sum(o.missing for o in group),
            correctness_rate(group), floor, performance_score(group, floor), *spread, model in fully,
            geomean_speedup(group) if model in fully else None,
            correct_mean(group, "fraction_of_expert"), correct_mean(group, "sol_fraction"),
            {p: fast_p(group, p) for p in FAST_P}))
    return out
