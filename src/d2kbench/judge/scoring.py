"""Scores from verdicts, and the mean and spread over several judge samples.

A layer's score is the weighted share of its properties that are met, times 100:
`100 * sum(weight of met properties of the layer) / sum(weight of all properties of the layer)`;
the combined score is the same share over the whole rubric. Over n samples a property's mean is the
fraction of samples that found it met and each score's mean is the mean of the samples' scores; the
spread is the population standard deviation over the samples (0 for one sample).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from d2kbench.suite.schema import LAYERS, RubricProperty

SCORE_KEYS = (*LAYERS, "combined")


def scores(rubric: Sequence[RubricProperty], met: Mapping[str, bool]) -> dict[str, float]:
    """Scores 0-100 per layer (layers with properties only) and combined, from one verdict per property."""
    missing = [p.id for p in rubric if p.id not in met]
    if missing:
        raise ValueError(f"no verdict for {', '.join(missing)}")
    out = {}
    for key in SCORE_KEYS:
        props = [p for p in rubric if key == "combined" or p.layer == key]
        total = sum(p.weight for p in props)
        if total > 0:
            out[key] = 100.0 * sum(p.weight for p in props if met[p.id]) / total
    return out


def mean_and_spread(values: Sequence[float]) -> dict[str, float]:
    """{"mean", "spread"} of the samples' values (spread: population standard deviation)."""
    if not values:
        raise ValueError("no samples to summarise")
    return {"mean": statistics.fmean(values), "spread": statistics.pstdev(values)}


def summarise(rubric: Sequence[RubricProperty], samples: Sequence[Mapping[str, bool]]) -> dict:
    """Per property and per score, the mean and spread over the valid samples (each a verdict per property)."""
    if not samples:
        raise ValueError("no valid judge sample to summarise")
    sample_scores = [scores(rubric, s) for s in samples]
    return {
        "properties": {p.id: mean_and_spread([float(s[p.id]) for s in samples]) for p in rubric},
        "scores": {key: mean_and_spread([s[key] for s in sample_scores]) for key in sample_scores[0]},
    }
