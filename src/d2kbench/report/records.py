"""Plain records the report is computed from: one finished cell of the matrix, one judge verdict.

They hold numbers only, so the metrics do not depend on how runs are stored. Constructors check
their input and raise `ValueError` with a message that names the cell.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

CONFIGS = ("none", "L1", "L1+L2", "L1+L2+L3")
UNGUIDED = "none"
LAYERS = ("L1", "L2", "L3")
SCORE_KEYS = (*LAYERS, "combined")


def _positive(value: float | None, what: str, where: str) -> None:
    if value is not None and not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"{where}: {what} must be a finite number > 0, got {value!r}")


def _scores(scores: Mapping[str, float] | None, what: str, where: str) -> None:
    for key, value in (scores or {}).items():
        if key not in SCORE_KEYS:
            raise ValueError(f"{where}: {what} key {key!r} is not one of {', '.join(SCORE_KEYS)}")
        if not (isinstance(value, int | float) and 0 <= value <= 100):
            raise ValueError(f"{where}: {what}[{key}] must be in 0..100, got {value!r}")


@dataclass(frozen=True)
class WorkloadScore:
    """One scored workload of a correct cell. Ratios of times, all > 0.

    `speedup` = t_reference / t_candidate; `expert_speedup` = t_reference / t_expert;
    `speedup_vs_comparator` = t_comparator / t_candidate; `fraction_of_expert` = t_expert / t_candidate
    (derived from the two speedups when not given); `sol_fraction` = speed-of-light time / t_candidate.
    """

    name: str
    speedup: float
    expert_speedup: float | None = None
    speedup_vs_comparator: float | None = None
    fraction_of_expert: float | None = None
    sol_fraction: float | None = None

    def check(self, where: str) -> None:
        for what in ("speedup", "expert_speedup", "speedup_vs_comparator", "fraction_of_expert", "sol_fraction"):
            _positive(getattr(self, what), what, f"{where}, workload {self.name!r}")

    @property
    def expert_fraction(self) -> float | None:
        if self.fraction_of_expert is not None:
            return self.fraction_of_expert
        return None if self.expert_speedup is None else self.speedup / self.expert_speedup


@dataclass(frozen=True)
class CellResult:
    """The final evaluation of one run: (model, task, config, seed).

    `workloads` holds the scored workloads' ratios; a correct cell evaluated without timings (on a
    CPU) has none, and then every speed metric it enters is reported as not measured. An incorrect
    cell's workloads are ignored, except for the expert's speedups (a property of the task).
    Judge scores (0-100, keys L1, L2, L3, combined) are optional.
    """

    model: str
    task: str
    config: str
    seed: int
    correct: bool
    workloads: tuple[WorkloadScore, ...] = ()
    design_scores: Mapping[str, float] | None = field(default=None, compare=False)
    implementation_scores: Mapping[str, float] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        where = f"cell {self.key}"
        if not self.model or not self.task:
            raise ValueError(f"{where}: model and task must be non-empty")
        if self.config not in CONFIGS:
            raise ValueError(f"{where}: config must be one of {', '.join(CONFIGS)}, got {self.config!r}")
        if not isinstance(self.correct, bool):
            raise ValueError(f"{where}: correct must be a bool, got {self.correct!r}")
        object.__setattr__(self, "workloads", tuple(self.workloads))
        names = [w.name for w in self.workloads]
        if len(set(names)) != len(names):
            raise ValueError(f"{where}: a workload appears twice in {names}")
        for w in self.workloads:
            w.check(where)
        _scores(self.design_scores, "design_scores", where)
        _scores(self.implementation_scores, "implementation_scores", where)

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.model, self.task, self.config, self.seed)

    @property
    def timed(self) -> bool:
        return bool(self.workloads)


@dataclass(frozen=True)
class PropertyVerdict:
    """A judge's verdict on one rubric property: met or not, in a design (`source="design"`) or in
    the final code of a run of config `source`."""

    model: str
    task: str
    property: str
    layer: str
    source: str
    met: bool
    seed: int = 0

    def __post_init__(self) -> None:
        where = f"verdict {(self.model, self.task, self.property, self.source, self.seed)}"
        if self.layer not in LAYERS:
            raise ValueError(f"{where}: layer must be one of {', '.join(LAYERS)}, got {self.layer!r}")
        if self.source != "design" and self.source not in CONFIGS:
            raise ValueError(f"{where}: source must be 'design' or a config, got {self.source!r}")
        if not isinstance(self.met, bool):
            raise ValueError(f"{where}: met must be a bool, got {self.met!r}")


def check_unique(cells: Iterable[CellResult]) -> list[CellResult]:
    """The cells as a list; raises if two share (model, task, config, seed)."""
    seen: set[tuple[str, str, str, int]] = set()
    out = []
    for cell in cells:
        if cell.key in seen:
            raise ValueError(f"cell {cell.key} appears twice: one result per (model, task, config, seed)")
        seen.add(cell.key)
        out.append(cell)
    return out
