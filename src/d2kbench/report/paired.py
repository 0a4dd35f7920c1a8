"""Guided against unguided, task by task: paired differences with bootstrap intervals, and gap closure.

Both work on a task's floored speedup (`TaskOutcome.floored`: the geometric mean over seeds of
max(speedup, floor), an incorrect seed counting as the floor), the quantity the Performance Score
averages, so an incorrect run has a defined value and the mean log difference is exactly the log
of the ratio of the two Performance Scores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from d2kbench.report.metrics import DEFAULT_FLOOR, TaskOutcome
from d2kbench.report.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, Interval, bootstrap_mean, median


def _paired(unguided: Sequence[TaskOutcome], guided: Sequence[TaskOutcome]) -> list[tuple[TaskOutcome, TaskOutcome]]:
    by_task = {o.task: o for o in guided}
    if sorted(by_task) != sorted(o.task for o in unguided):
        raise ValueError("paired comparison needs the same tasks in both configs")
    return [(u, by_task[u.task]) for u in unguided]


@dataclass(frozen=True)
class PairedDifference:
    """Guided minus unguided for one model: `correctness` is the mean over tasks of the difference in
    correct share (in [-1, 1]); `log_score` the mean over tasks of ln(floored guided) - ln(floored
    unguided), None when a correct run is untimed. `score_ratio` = exp(log_score), the ratio of the
    Performance Scores, with the interval's ends exponentiated."""

    model: str
    guided_config: str
    tasks: int
    correctness: Interval
    log_score: Interval | None

    @property
    def score_ratio(self) -> tuple[float, float, float] | None:
        s = self.log_score
        return None if s is None else (math.exp(s.estimate), math.exp(s.low), math.exp(s.high))


def paired_difference(unguided: Sequence[TaskOutcome], guided: Sequence[TaskOutcome], floor: float = DEFAULT_FLOOR,
                      resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> PairedDifference:
    """Paired differences over the tasks of one model, each with a percentile-bootstrap 95% interval
    (tasks resampled with replacement)."""
    pairs = _paired(unguided, guided)
    if not pairs:
        raise ValueError("paired comparison of no tasks")
    correctness = bootstrap_mean([g.correct_share - u.correct_share for u, g in pairs], resamples, seed)
    floored = [(u.floored(floor), g.floored(floor)) for u, g in pairs]
    log_score = None
    if all(u is not None and g is not None for u, g in floored):
        log_score = bootstrap_mean([math.log(g) - math.log(u) for u, g in floored], resamples, seed)
    return PairedDifference(pairs[0][0].model, pairs[0][1].config, len(pairs), correctness, log_score)


@dataclass(frozen=True)
class GapClosure:
    """Gap closure of one task, or why it is undefined: `no_gap` (the expert is not faster than the
    unguided run), `no_expert` (the expert was not timed), `untimed` (a correct run has no timings)."""

    task: str
    value: float | None
    status: str


def gap_closure(unguided: TaskOutcome, guided: TaskOutcome, expert_speedup: float | None,
                floor: float = DEFAULT_FLOOR) -> GapClosure:
    """ln(s_guided / s_unguided) / ln(s_expert / s_unguided) on floored speedups: 0 = no change,
    1 = the guided run reached the expert, > 1 = beyond it, < 0 = guidance made it slower."""
    s_u, s_g = unguided.floored(floor), guided.floored(floor)
    if s_u is None or s_g is None:
        return GapClosure(unguided.task, None, "untimed")
    if expert_speedup is None:
        return GapClosure(unguided.task, None, "no_expert")
    if expert_speedup <= s_u:
        return GapClosure(unguided.task, None, "no_gap")
    return GapClosure(unguided.task, math.log(s_g / s_u) / math.log(expert_speedup / s_u), "ok")


def gap_closures(unguided: Sequence[TaskOutcome], guided: Sequence[TaskOutcome], expert: Mapping[str, float],
                 floor: float = DEFAULT_FLOOR) -> list[GapClosure]:
    return [gap_closure(u, g, expert.get(u.task), floor) for u, g in _paired(unguided, guided)]


def median_gap_closure(closures: Sequence[GapClosure]) -> float | None:
    """The median over the tasks where gap closure is defined; None if it is defined on none."""
    values = [c.value for c in closures if c.value is not None]
    return median(values) if values else None
