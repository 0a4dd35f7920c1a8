"""attn_decode_paged_gqa's drawn lengths: random per seed, but the same total work in every input set, so that
two evaluations time the same work (the speedup's spread between runs)."""

import pytest
import torch

from d2kbench.evaluate.taskcode import reference_module
from d2kbench.suite import find_task

TASK = "attn_decode_paged_gqa"


@pytest.fixture(scope="module")
def task():
    return find_task(TASK)


def drawn(task, workload: str, seeds: range) -> list[list[int]]:
    """The lengths `make_inputs` draws first from each seed (the rest of its inputs is hundreds of MB)."""
    ref, w = reference_module(task), task.workload(workload)
    return [ref._lengths(w.params, torch.Generator().manual_seed(seed), "cpu").tolist() for seed in seeds]


def test_drawn_lengths_keep_the_total_and_both_extremes(task):
    w = task.workload("qwen3_8b_b256_lvar")
    lo, hi = w.params["L_min"], w.params["L_max"]
    sets = drawn(task, w.name, range(6))
    totals = [sum(lens) for lens in sets]
    assert max(totals) - min(totals) <= 0.001 * min(totals), totals  # independent draws: about 3% apart
    for lens in sets:
        assert min(lens) == lo and max(lens) == hi and len(lens) == w.params["B"]
        assert len(set(lens)) > len(lens) // 2  # spread over the range, not a few values
    assert len({tuple(lens) for lens in sets}) == len(sets)  # each seed its own lengths and order
    assert len({lens.index(hi) for lens in sets}) > 1  # the longest sequence is not always in the same place


@pytest.mark.parametrize("workload", ["hidden_g1_b3_odd", "cpu_g4_f16_ragged"])
def test_small_batches_still_draw_their_middle_lengths(task, workload):
    sets = drawn(task, workload, range(8))
    assert len({tuple(sorted(lens)) for lens in sets}) > 1
