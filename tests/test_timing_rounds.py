"""The timing rounds as the parent runs them (`Evaluation.time_workload`), the workers stood in for: which round's
outputs are checked again must not be predictable from the candidate's side."""

from collections import Counter

import pytest

from d2kbench.evaluate.evaluator import EvalOptions, Evaluation
from d2kbench.evaluate.result import WorkloadResult
from tests.conftest import stand_in_timing

ROUNDS = 5


@pytest.fixture
def evaluation(toy_task, monkeypatch):
    ev = Evaluation(toy_task, toy_task.expert_path, EvalOptions(device="cpu", rounds=ROUNDS))
    events: list[tuple] = []

    def timed_batch(workload, wr, fn, worker, slots, reps, graph, validate, warmup=3):
        events.append(("batch", fn, validate))
        ev.slots_timed.append((events.count(("rotate",)), fn, tuple(slots)))  # (round, function, slots)
        ev.batch_sizes.append((reps, warmup))
        return [ev.time_of(fn, validate, graph)] * reps

    sets = toy_task.correctness_sets
    for name in ("n200", "n1m"):
        ev.slot_set[name] = {0: sets, **{i: i for i in range(1, sets)}}  # as check_workload leaves it
    ev.slots_timed, ev.batch_sizes, ev.call_ms = [], [], 0.1
    ev.time_of = lambda fn, checked_round, graph: ev.call_ms  # ms per call of `fn` in this batch

    stand_in_timing(ev, monkeypatch, timed_batch,
                    rotate=lambda workload, slots: events.append(("rotate",)) or True)
    ev.events = events
    yield ev
    ev.cand = None
    ev.close()


def rounds_of(events: list[tuple]) -> list[list[tuple]]:
    """The events split at each rotation: the estimate round first, then one list per timed round."""
    out: list[list[tuple]] = [[]]
    for e in events:
        if e == ("rotate",):
            out.append([])
        else:
            out[-1].append(e)
    return out


def test_every_timed_round_starts_with_a_rotation_and_one_round_is_checked(evaluation):
    evaluation.time_workload(evaluation.task.workload("n200"), WorkloadResult("n200", "scored"))
    rounds = rounds_of(evaluation.events)
    assert len(rounds) == ROUNDS + 1  # the estimate, then ROUNDS timed rounds, each after a rotation
    assert not any(validate for _, _, validate in rounds[0])
    checked = [i for i, r in enumerate(rounds) if ("batch", "candidate", True) in r]
    assert len(checked) == 1 and checked[0] >= 1
    assert all(len(r) == len(rounds[1]) for r in rounds[1:])  # the checked round looks like the others


def test_the_checked_round_is_drawn_afresh_each_time(evaluation):
    seen = Counter()
    for _ in range(60):
        evaluation.events.clear()
        evaluation.time_workload(evaluation.task.workload("n200"), WorkloadResult("n200", "scored"))
        seen.update(i for i, r in enumerate(rounds_of(evaluation.events)) if ("batch", "candidate", True) in r)
    # 60 draws over 5 rounds: each round is missed with probability (4/5)**60, about 1.5e-6
    assert set(seen) == set(range(1, ROUNDS + 1))


def test_the_baselines_time_the_input_sets_that_the_candidate_holds(evaluation):
    """The candidate's slot 0 holds the last set (written over set 0 by the stale check), and from the checked
    round on one of its slots holds the fresh set; timing the baselines on set 0 instead biased the fraction of
    expert where sets differ in work (bench/results/2026-12-04-h200-owed-9)."""
    evaluation.time_workload(evaluation.task.workload("n200"), WorkloadResult("n200", "scored"))
    sets = evaluation.task.correctness_sets
    slot = lambda i: evaluation.slot_id("n200", i)  # noqa: E731
    (put,) = [m for m in evaluation.cand.sent if m["op"] == "put_inputs"]
    assert put["in_place"] and put["inputs"] == [f"set {sets + 1}"]
    held = {0: sets, **{i: i for i in range(1, sets)}}
    after = {**held, put["slot"] - slot(0): sets + 1}
    checked = next(r for r, fn, _ in evaluation.slots_timed if ("batch", "candidate", True) in
                   rounds_of(evaluation.events)[r])
    for rnd, fn, slots in evaluation.slots_timed:
        if fn == "candidate":
            assert slots == tuple(slot(i) for i in range(sets))
        else:
            assert slots == tuple(sorted(slot(i) for i in (after if rnd >= checked else held).values())), (rnd, fn)


@pytest.mark.parametrize(("call_ms", "reps", "warmup"), [(0.1, 200, 3), (4.0, 25, 3), (9.0, 11, 2), (40.0, 3, 1)])
def test_long_kernels_take_fewer_calls_per_batch(evaluation, call_ms, reps, warmup):
    """The estimate round's three calls and three warm-ups, then `batch_ms` (100) of timed calls, at least three and
    at most 200, after warm-ups of at least 10 ms (at least one, at most three)."""
    evaluation.call_ms = call_ms
    evaluation.time_workload(evaluation.task.workload("n200"), WorkloadResult("n200", "scored"))
    functions = len({fn for _, fn, _ in evaluation.slots_timed})
    assert set(evaluation.batch_sizes[:functions]) == {(3, 3)}
    assert set(evaluation.batch_sizes[functions:]) == {(reps, warmup)}


def test_each_timed_round_draws_its_own_order_of_functions(evaluation):
    """Every function takes every place in the rounds: a fixed order would give one of them the same neighbour
    (and the same probe before it) in every round."""
    places = Counter()
    for _ in range(12):
        evaluation.events.clear()
        evaluation.time_workload(evaluation.task.workload("n200"), WorkloadResult("n200", "scored"))
        rounds = rounds_of(evaluation.events)
        assert [fn for _, fn, _ in rounds[0]] == ["reference", "candidate", "expert"]  # the estimate: as listed
        for r in rounds[1:]:
            order = list(dict.fromkeys(fn for _, fn, _ in r))
            assert sorted(order) == ["candidate", "expert", "reference"]
            places.update(enumerate(order))
    # 60 rounds: some (place, function) pair never drawn has probability under 9 * (2/3)**60, about 3e-10
    assert len(places) == 9


def cache_keyed_by_contents(fn, checked_round, graph, cached_graphs_only=False):
    """Times of a candidate that serves outputs it saw before (every round but the checked one, whose set is
    fresh) 20x faster than it computes them; the baselines take 1 ms."""
    if fn != "candidate" or checked_round or (cached_graphs_only and not graph):
        return 1.0
    return 0.05


@pytest.mark.parametrize("graphs_only", [False, True])
def test_a_candidate_faster_on_inputs_it_has_seen_is_an_input_cache(evaluation, graphs_only):
    evaluation.time_of = lambda fn, checked_round, graph: cache_keyed_by_contents(fn, checked_round, graph,
                                                                                 graphs_only)
    workload = evaluation.task.workload("n1m" if graphs_only else "n200")
    assert workload.latency_bound or not graphs_only  # graph replays are timed on latency-bound workloads
    evaluation.time_workload(workload, WorkloadResult(workload.name, "scored"))
    (failure,) = evaluation.result.failures
    assert (failure.verdict, failure.reason) == ("integrity", "input_cache")
    assert ("graph replays" if graphs_only else "calls") in failure.detail and "20.0x" in failure.detail


@pytest.mark.parametrize("checked_round_slower", [1.0, 1.3])
def test_an_honest_candidate_is_not_an_input_cache(evaluation, checked_round_slower):
    """The fresh set may cost a little more or less work than the others (drawn lengths): within 1.5x it passes."""
    evaluation.time_of = lambda fn, checked_round, graph: 1.0 * (checked_round_slower if checked_round and
                                                                 fn == "candidate" else 1.0)
    evaluation.time_workload(evaluation.task.workload("n1m"), WorkloadResult("n1m", "scored"))
    assert evaluation.result.failures == []


def test_the_roofline_averages_the_sets_the_timing_ran_on(evaluation):
    """A workload whose sets differ in work (attention's drawn lengths) has the bytes of the sets it was timed
    on, averaged: the candidate's slots at the end, not the last set made."""
    sets = evaluation.task.correctness_sets
    evaluation.derived["n200"] = {i: {"sum_L": 100.0 * (i + 1)} for i in range(sets + 2)}
    evaluation.slot_set["n200"] = {0: sets, 1: 1, 2: sets + 1}
    assert evaluation.timed_derived("n200") == {"sum_L": 100.0 * ((sets + 1) + 2 + (sets + 2)) / 3}
    assert evaluation.timed_derived("n1m") is None  # a task without derived quantities
