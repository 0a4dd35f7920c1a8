"""Small statistics: geometric mean, median, percentile bootstrap of a mean, Spearman's rank correlation."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_RESAMPLES = 10_000
DEFAULT_SEED = 0


def geomean(values: Sequence[float]) -> float:
    """exp(mean(log x)) of positive values; raises on an empty sequence."""
    if not values:
        raise ValueError("geometric mean of no values")
    return math.exp(math.fsum(math.log(v) for v in values) / len(values))


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        raise ValueError("median of no values")
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided percentile-bootstrap confidence interval."""

    estimate: float
    low: float
    high: float
    n: int
    resamples: int
    level: float = 0.95


def bootstrap_mean(values: Sequence[float], resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                   level: float = 0.95) -> Interval:
    """The mean of `values` and its percentile-bootstrap interval: `resamples` resamples of the values
    with replacement (numpy's PCG64 generator seeded with `seed`), the interval's ends are the
    (1 - level) / 2 and (1 + level) / 2 quantiles of the resampled means."""
    if not values:
        raise ValueError("bootstrap of no values")
    if resamples < 1 or not 0 < level < 1:
        raise ValueError(f"need resamples >= 1 and 0 < level < 1, got {resamples} and {level}")
    data = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return Interval(float(data.mean()), float(low), float(high), len(data), resamples, level)


def average_ranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n; tied values share the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start:end + 1]:
            ranks[i] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rho: Pearson's correlation of the average ranks (correct with ties).
    None when it is undefined: fewer than two pairs, or one side constant."""
    if len(xs) != len(ys):
        raise ValueError(f"spearman needs two lists of one length, got {len(xs)} and {len(ys)}")
    if len(xs) < 2:
        return None
    rx, ry = average_ranks(xs), average_ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = math.fsum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = math.fsum((a - mx) ** 2 for a in rx)
    vy = math.fsum((b - my) ** 2 for b in ry)
    if vx == 0 or vy == 0:
        return None
    return cov / math.sqrt(vx * vy)
