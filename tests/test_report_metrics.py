"""Metrics on hand-built result sets; every expected value is worked out by hand in the test."""

import math

import pytest

from d2kbench.report.crosstab import property_crosstab
from d2kbench.report.metrics import (
    correctness_rate,
    expert_speedups,
    fast_p,
    fully_correct_models,
    performance_score,
    select,
    summarize,
    task_outcomes,
)
from d2kbench.report.paired import gap_closure, gap_closures, median_gap_closure, paired_difference
from d2kbench.report.records import CellResult, PropertyVerdict, WorkloadScore
from d2kbench.report.stats import average_ranks, bootstrap_mean, geomean, spearman


def cell(task, speedups=None, model="m", config="none", seed=0, expert=None):
    """A correct cell when `speedups` (one per workload) is given, else an incorrect one."""
    if speedups is None:
        return CellResult(model, task, config, seed, False)
    experts = expert if isinstance(expert, list) else [expert] * len(speedups)
    workloads = tuple(WorkloadScore(f"w{i}", s, e) for i, (s, e) in enumerate(zip(speedups, experts, strict=True)))
    return CellResult(model, task, config, seed, True, workloads)


def outcomes_of(*cells, model="m", config="none"):
    return select(task_outcomes(cells), model, config)


def test_task_speedup_is_the_geomean_over_workloads():
    [o] = outcomes_of(cell("t", [2.0, 8.0]))
    assert o.speedup == pytest.approx(4.0)  # sqrt(2 * 8)


def test_seeds_geomean_and_spread():
    [o] = outcomes_of(cell("t", [2.0], seed=0), cell("t", [8.0], seed=1), cell("t", [4.0], seed=2))
    assert o.speedup == pytest.approx(4.0)  # (2 * 8 * 4) ** (1/3)
    assert o.spread == pytest.approx((2.0, 8.0))


def test_an_incorrect_seed_makes_the_task_incorrect_and_counts_as_the_floor():
    [o] = outcomes_of(cell("t", [2.0], seed=0), cell("t", None, seed=1))
    assert o.speedup is None and not o.all_correct
    assert o.correct_share == 0.5
    assert o.floored(0.1) == pytest.approx(math.sqrt(2.0 * 0.1))
    assert o.spread == pytest.approx((2.0, 2.0))


def test_performance_score_floors_slow_and_incorrect_tasks():
    group = outcomes_of(cell("a", [4.0]), cell("b", [0.05]), cell("c", None))
    assert performance_score(group, 0.1) == pytest.approx((4.0 * 0.1 * 0.1) ** (1 / 3))
    assert performance_score(group, 0.5) == pytest.approx((4.0 * 0.5 * 0.5) ** (1 / 3))
    assert correctness_rate(group) == pytest.approx(2 / 3)


def test_performance_score_of_a_single_task():
    assert performance_score(outcomes_of(cell("a", [3.0]))) == pytest.approx(3.0)
    assert performance_score(outcomes_of(cell("a", [0.02]))) == pytest.approx(0.1)


def test_all_incorrect():
    group = outcomes_of(cell("a"), cell("b"))
    [s] = summarize(group, floor=0.2)
    assert s.performance_score == pytest.approx(0.2) and s.floor == 0.2
    assert s.correctness_rate == 0.0
    assert all(v == 0.0 for v in s.fast.values())
    assert s.geomean_speedup is None and not s.fully_correct
    assert s.fraction_of_expert is None


def test_the_floor_must_be_positive():
    with pytest.raises(ValueError, match="floor"):
        performance_score(outcomes_of(cell("a", [1.0])), 0.0)


def test_missing_cells_count_as_incorrect():
    out = task_outcomes([cell("a", [2.0], model="x"), cell("b", [2.0], model="x"), cell("a", [2.0], model="y")])
    y = select(out, "y", "none")
    assert [o.task for o in y] == ["a", "b"]
    assert correctness_rate(y) == 0.5
    [summary] = [s for s in summarize(out) if s.model == "y"]
    assert summary.missing == 1


def test_matrix_keys_without_results_widen_the_grid():
    out = task_outcomes([cell("a", [2.0])], matrix=[("m", "b", "none", 0), ("m", "a", "none", 1)])
    a, b = select(out, "m", "none")
    assert (a.task, b.task) == ("a", "b")
    assert [s.missing for s in a.seeds] == [False, True] and b.missing == 2
    assert correctness_rate([a, b]) == 0.25


def test_untimed_correct_cells_have_a_correctness_rate_but_no_speed_metrics():
    group = outcomes_of(CellResult("m", "a", "none", 0, True), cell("b"))
    assert correctness_rate(group) == 0.5
    assert performance_score(group) is None
    assert fast_p(group, 1.0) is None


def test_fully_correct_models_need_every_task_and_seed_in_every_config():
    cells = [cell(t, [2.0], model="good", config=c) for t in ("a", "b") for c in ("none", "L1")]
    cells += [cell(t, [2.0], model="flaky", config="none") for t in ("a", "b")]
    cells += [cell("a", [2.0], model="flaky", config="L1"), cell("b", None, model="flaky", config="L1")]
    cells += [cell(t, [2.0], model="unguided_only", config="none") for t in ("a", "b")]
    out = task_outcomes(cells)
    assert fully_correct_models(out, ["none", "L1"]) == ["good"]
    assert fully_correct_models(out, ["none"]) == ["flaky", "good", "unguided_only"]
    summaries = {(s.model, s.config): s for s in summarize(out)}
    assert summaries[("good", "L1")].geomean_speedup == pytest.approx(2.0)
    assert summaries[("flaky", "none")].geomean_speedup is None  # incorrect in L1, so not fully correct
    assert summaries[("unguided_only", "none")].geomean_speedup is None  # never ran L1


def test_fast_p_is_strict_at_the_thresholds():
    group = outcomes_of(cell("a", [0.5]), cell("b", [1.0]), cell("c", [1.5]), cell("d", [2.0]), cell("e"))
    assert fast_p(group, 0.0) == pytest.approx(4 / 5)  # every correct task
    assert fast_p(group, 0.5) == pytest.approx(3 / 5)  # 0.5 itself is not faster than 0.5x
    assert fast_p(group, 1.0) == pytest.approx(2 / 5)
    assert fast_p(group, 1.5) == pytest.approx(1 / 5)
    assert fast_p(group, 2.0) == 0.0


def test_fast_p_counts_seeds():
    group = outcomes_of(cell("a", [3.0], seed=0), cell("a", [0.9], seed=1))
    assert fast_p(group, 1.0) == 0.5


def test_fraction_of_expert_and_sol_fraction():
    workloads = (WorkloadScore("w0", 2.0, expert_speedup=4.0, sol_fraction=0.2),
                 WorkloadScore("w1", 3.0, expert_speedup=3.0, sol_fraction=0.8))
    group = outcomes_of(CellResult("m", "a", "none", 0, True, workloads), cell("b"))
    [s] = summarize(group)
    assert s.fraction_of_expert == pytest.approx(math.sqrt(0.5 * 1.0))  # over correct tasks only
    assert s.sol_fraction == pytest.approx(math.sqrt(0.2 * 0.8))
    given = WorkloadScore("w", 2.0, expert_speedup=4.0, fraction_of_expert=0.45)
    assert given.expert_fraction == 0.45


def test_expert_speedup_comes_from_every_cell_of_the_task():
    cells = [cell("a", [1.0, 1.0], expert=[2.0, 8.0]), cell("a", [1.0, 1.0], config="L1", expert=[4.0, 4.0]),
             cell("b", [1.0])]
    assert expert_speedups(cells) == {"a": pytest.approx(4.0)}


def _pair(unguided, guided):
    [u] = outcomes_of(unguided)
    [g] = outcomes_of(guided, config="L1")
    return u, g


def test_gap_closure_values():
    u, g = _pair(cell("t", [2.0]), cell("t", [4.0], config="L1"))
    assert gap_closure(u, g, 8.0).value == pytest.approx(0.5)  # ln 2 / ln 4
    assert gap_closure(u, g, 4.0).value == pytest.approx(1.0)
    assert gap_closure(u, g, 3.0).value == pytest.approx(math.log(2) / math.log(1.5))  # beyond the expert: > 1


def test_gap_closure_with_incorrect_runs_uses_the_floor():
    u, g = _pair(cell("t"), cell("t", [1.0], config="L1"))
    assert gap_closure(u, g, 10.0, floor=0.1).value == pytest.approx(0.5)  # ln 10 / ln 100
    u, g = _pair(cell("t", [1.0]), cell("t", config="L1"))
    assert gap_closure(u, g, 10.0, floor=0.1).value == pytest.approx(-1.0)  # ln 0.1 / ln 10
    u, g = _pair(cell("t"), cell("t", config="L1"))
    assert gap_closure(u, g, 10.0).value == 0.0


def test_gap_closure_degenerate_cases():
    u, g = _pair(cell("t", [4.0]), cell("t", [5.0], config="L1"))
    assert gap_closure(u, g, 4.0).status == "no_gap" and gap_closure(u, g, 4.0).value is None
    assert gap_closure(u, g, 2.0).status == "no_gap"
    assert gap_closure(u, g, None).status == "no_expert"
    u, g = _pair(CellResult("m", "t", "none", 0, True), cell("t", [5.0], config="L1"))
    assert gap_closure(u, g, 8.0).status == "untimed"


def test_median_gap_closure_skips_undefined_tasks():
    unguided = outcomes_of(*(cell(t, [1.0]) for t in "abcd"))
    guided = outcomes_of(cell("a", [4.0], config="L1"), cell("b", [16.0], config="L1"),
                         cell("c", [0.25], config="L1"), cell("d", [2.0], config="L1"), config="L1")
    closures = gap_closures(unguided, guided, {"a": 16.0, "b": 16.0, "c": 16.0, "d": 0.5})
    assert [c.status for c in closures] == ["ok", "ok", "ok", "no_gap"]
    assert [c.value for c in closures[:3]] == pytest.approx([0.5, 1.0, -0.5])
    assert median_gap_closure(closures) == pytest.approx(0.5)
    assert median_gap_closure(closures[3:]) is None


def test_paired_difference_on_log_floored_speedup_and_correctness():
    unguided = outcomes_of(cell("a", [1.0]), cell("b", [2.0]), cell("c", [0.5]), cell("d"))
    guided = outcomes_of(cell("a", [2.0], config="L1"), cell("b", [4.0], config="L1"),
                         cell("c", [1.0], config="L1"), cell("d", [0.2], config="L1"), config="L1")
    diff = paired_difference(unguided, guided, floor=0.1, resamples=500, seed=3)
    # every task doubles (d: floor 0.1 -> 0.2), so every resample has the same mean: a zero-width interval
    assert diff.log_score.estimate == pytest.approx(math.log(2))
    assert (diff.log_score.low, diff.log_score.high) == pytest.approx((math.log(2), math.log(2)))
    assert diff.score_ratio == pytest.approx((2.0, 2.0, 2.0))
    assert diff.correctness.estimate == pytest.approx(0.25)  # d went from incorrect to correct
    assert diff.tasks == 4 and diff.guided_config == "L1"


def test_paired_difference_needs_the_same_tasks():
    with pytest.raises(ValueError, match="same tasks"):
        paired_difference(outcomes_of(cell("a", [1.0])), outcomes_of(cell("b", [1.0], config="L1"), config="L1"))


def test_bootstrap_contains_the_estimate_and_is_reproducible():
    values = [0.3, -0.1, 0.8, 0.05, 0.4, -0.6, 1.2, 0.2]
    first = bootstrap_mean(values, resamples=2000, seed=7)
    assert first.estimate == pytest.approx(sum(values) / len(values))
    assert first.low < first.estimate < first.high
    assert bootstrap_mean(values, resamples=2000, seed=7) == first
    assert bootstrap_mean(values, resamples=2000, seed=8) != first
    single = bootstrap_mean([0.7], resamples=100)
    assert (single.low, single.estimate, single.high) == (0.7, 0.7, 0.7)


def test_geomean():
    assert geomean([1.0, 4.0, 16.0]) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        geomean([])


def test_spearman_with_ties():
    assert average_ranks([10, 20, 20, 30]) == [1.0, 2.5, 2.5, 4.0]
    # ranks (1, 2.5, 2.5, 4) and (1, 3, 2, 4): cov 4.5, variances 4.5 and 5 -> 4.5 / sqrt(22.5) = 3 / sqrt(10)
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(3 / math.sqrt(10))
    assert spearman([1, 2, 3], [10, 200, 3000]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    assert spearman([1], [2]) is None
    with pytest.raises(ValueError, match="one length"):
        spearman([1, 2], [1])


def verdict(prop, layer, source, met, model="m", task="t", seed=0):
    return PropertyVerdict(model, task, prop, layer, source, met, seed)


def test_property_crosstab_counts_combinations():
    verdicts = [
        # p1 (L1): proposed, not implemented unguided, implemented when given
        verdict("p1", "L1", "design", True), verdict("p1", "L1", "none", False), verdict("p1", "L1", "L1+L2+L3", True),
        # p2 (L2): proposed, never implemented
        verdict("p2", "L2", "design", True), verdict("p2", "L2", "none", False), verdict("p2", "L2", "L1+L2+L3", False),
        # p3 (L2): no design verdict: skipped
        verdict("p3", "L2", "none", True), verdict("p3", "L2", "L1+L2+L3", True),
        # p4 (L3) in L1+L2 (crosstab config below): L3 is not given there, so skipped
        verdict("p4", "L3", "design", False), verdict("p4", "L3", "none", False), verdict("p4", "L3", "L1+L2", True),
        # p5 (L1): seeds combined by strict majority: given 2 of 3 -> met; unguided 1 of 2 -> not met
        verdict("p5", "L1", "design", False), verdict("p5", "L1", "none", True, seed=0),
        verdict("p5", "L1", "none", False, seed=1), verdict("p5", "L1", "L1+L2", True, seed=0),
        verdict("p5", "L1", "L1+L2", True, seed=1), verdict("p5", "L1", "L1+L2", False, seed=2),
        verdict("p2", "L2", "L1+L2", False),
    ]
    counts = {(c.layer, c.proposed, c.implemented_unguided, c.implemented_given): c.count
              for c in property_crosstab(verdicts, "L1+L2")}
    assert counts[("L1", False, False, True)] == 1  # p5
    assert counts[("L2", True, False, False)] == 1  # p2
    assert sum(v for k, v in counts.items() if k[0] == "all") == 2
    assert sum(v for k, v in counts.items() if k[0] == "L3") == 0
    full = {(c.layer, c.proposed, c.implemented_unguided, c.implemented_given): c.count
            for c in property_crosstab(verdicts)}
    assert full[("L1", True, False, True)] == 1 and full[("L2", True, False, False)] == 1
    assert sum(v for k, v in full.items() if k[0] == "all") == 2  # p1, p2 (p5 has no L1+L2+L3 verdict)


def test_property_crosstab_rejects_two_layers_for_one_property():
    with pytest.raises(ValueError, match="two layers"):
        property_crosstab([verdict("p", "L1", "design", True), verdict("p", "L2", "none", True)])


@pytest.mark.parametrize("make, message", [
    (lambda: CellResult("m", "t", "L2", 0, True), "config"),
    (lambda: CellResult("m", "t", "none", 0, True, (WorkloadScore("w", -1.0),)), "speedup"),
    (lambda: CellResult("m", "t", "none", 0, True, (WorkloadScore("w", float("nan")),)), "speedup"),
    (lambda: CellResult("m", "t", "none", 0, True, (WorkloadScore("w", 1.0), WorkloadScore("w", 2.0))), "twice"),
    (lambda: CellResult("m", "t", "none", 0, "yes"), "bool"),
    (lambda: CellResult("m", "t", "none", 0, True, implementation_scores={"L4": 3}), "L4"),
    (lambda: CellResult("m", "t", "none", 0, True, design_scores={"L1": 130}), "0..100"),
    (lambda: task_outcomes([cell("a", [1.0]), cell("a", [2.0])]), "appears twice"),
])
def test_bad_input_is_rejected_with_a_clear_message(make, message):
    with pytest.raises(ValueError, match=message):
        make()
