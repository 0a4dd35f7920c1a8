"""The per-property cross-table: proposed in design-only mode x implemented unguided x implemented when given.

It shows which design properties stay unimplemented even when the guidance spells them out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import product

from d2kbench.report.records import LAYERS, UNGUIDED, PropertyVerdict


@dataclass(frozen=True)
class CrossCell:
    """How many (model, task, property) triples fall in one combination of the three verdicts."""

    layer: str  # L1, L2, L3 or "all"
    proposed: bool
    implemented_unguided: bool
    implemented_given: bool
    count: int


def _majority(verdicts: list[bool]) -> bool:
    """Met when more than half of the samples or seeds say so."""
    return sum(verdicts) * 2 > len(verdicts)


def property_crosstab(verdicts: Iterable[PropertyVerdict], guided_config: str = "L1+L2+L3") -> list[CrossCell]:
    """Counts for each layer and for all layers, over the (model, task, property) triples that have a
    design verdict, an unguided verdict and a verdict in `guided_config` whose guidance includes the
    property's layer. Several seeds of one source are combined by strict majority."""
    given_layers = set(guided_config.split("+")) if guided_config != UNGUIDED else set()
    if not given_layers <= set(LAYERS) or not given_layers:
        raise ValueError(f"guided_config must be a guided config (L1, L1+L2, L1+L2+L3), got {guided_config!r}")
    sources = {"design": "proposed", UNGUIDED: "unguided", guided_config: "given"}
    seen: dict[tuple[str, str, str], dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    layer_of: dict[tuple[str, str, str], str] = {}
    for v in verdicts:
        key = (v.model, v.task, v.property)
        if layer_of.setdefault(key, v.layer) != v.layer:
            raise ValueError(f"property {key} is tagged with two layers, {layer_of[key]} and {v.layer}")
        if v.source in sources and (v.source != guided_config or v.layer in given_layers):
            seen[key][sources[v.source]].append(v.met)
    counts: dict[tuple[str, bool, bool, bool], int] = defaultdict(int)
    for key, by_source in seen.items():
        if len(by_source) < 3:
            continue
        combo = tuple(_majority(by_source[s]) for s in ("proposed", "unguided", "given"))
        counts[(layer_of[key], *combo)] += 1
        counts[("all", *combo)] += 1
    return [CrossCell(layer, *combo, counts[(layer, *combo)])
            for layer in (*LAYERS, "all") for combo in product((True, False), repeat=3)]
