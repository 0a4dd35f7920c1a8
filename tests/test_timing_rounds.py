"""The timing rounds as the parent runs them (`Evaluation.time_workload`), the workers stood in for: which round's
outputs are checked again must not be predictable from the candidate's side."""

from collections import Counter

import pytest

from d2kbench.evaluate.evaluator import EvalOptions, Evaluation
from d2kbench.evaluate.result import WorkloadResult
from d2kbench.evaluate.timing_guards import FRESH_SLOWDOWN
from d2kbench.evaluate.timing_phase import balanced_orders
from tests.conftest import stand_in_timing

ROUNDS = 5


@pytest.fixture
def evaluation(toy_task, monkeypatch):
    ev = Evaluation(toy_task, toy_task.expert_path, EvalOptions(device="cpu", rounds=ROUNDS))
    events: list[tuple] = []

    def timed_batch(workload, wr, fn, worker, slots, reps, graph, validate, warmup=3, unwarmed=None,
                    fresh_write=None, holds=None):
        events.append(("batch", fn, validate))
        if fresh_write is not None:
            ev.fresh_writes.append((events.count(("rotate",)), fn, graph, fresh_write))
        if holds is not None:  # as the real batch records it: the slot holds the set its worker wrote there
            ev.slot_set[workload.name][holds[0]] = holds[1]
        ev.slots_timed.append((events.count(("rotate",)), fn, graph, tuple(slots)))  # (round, function, graph, slots)
        ev.batch_sizes.append((reps, warmup))
        times = [ev.call_ms] * reps
        if unwarmed is not None:  # the first call on the fresh set
            ev.unwarmed.append((events.count(("rotate",)), fn, graph, unwarmed))
            times[slots.index(unwarmed)] *= ev.fresh_factor(fn)
        if graph and events.count(("rotate",)) > 0:  # the first replay, on the round's replay set where it has one
            times[0] *= ev.replay_factor(fn)
        return times

    sets = toy_task.correctness_sets
    def as_checked() -> None:  # the slots as check_workload leaves them, before each time_workload
        for name in ("n200", "n1m"):
            ev.slot_set[name] = {0: sets, **{i: i for i in range(1, sets)}}

    as_checked()
    ev.as_checked = as_checked
    ev.slots_timed, ev.batch_sizes, ev.call_ms = [], [], 0.1
    ev.unwarmed, ev.fresh_factor = [], lambda fn: 1.0  # how much slower `fn`'s first call on the fresh set is
    ev.replay_factor = lambda fn: 1.0  # ...and its first graph replay of a timed round
    ev.fresh_writes = []  # (round, function, graph, the fresh set's write) of each batch that carried one

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
        evaluation.as_checked()
        evaluation.time_workload(evaluation.task.workload("n200"), WorkloadResult("n200", "scored"))
        seen.update(i for i, r in enumerate(rounds_of(evaluation.events)) if ("batch", "candidate", True) in r)
    # 60 draws over 5 rounds: each round is missed with probability (4/5)**60, about 1.5e-6
    assert set(seen) == set(range(1, ROUNDS + 1))


def fresh_puts(evaluation) -> dict[int, dict]:
    """Per timed round, the write of its fresh set: carried by the candidate's events batch alone (its worker writes
    it after the warm-up), the replaced set given back by a put after the round."""
    writes = evaluation.fresh_writes
    assert [(rnd, fn, graph) for rnd, fn, graph, _ in writes] == [(r, "candidate", False) for r in range(1, ROUNDS + 1)]
    puts = [m for m in evaluation.cand.sent if m["op"] == "put_inputs"]
    assert all(m["in_place"] for m in puts) and len(puts) == ROUNDS
    return {rnd: write for rnd, _, _, write in writes}


def test_the_baselines_time_the_input_sets_that_the_candidate_holds_in_its_order(evaluation):
    """The candidate's slot 0 holds the last set (written over set 0 by the stale check), and in each timed round
    one of its slots the round's fresh set; timing the baselines on set 0 instead biased the fraction of expert
    where sets differ in work (bench/results/2026-12-04-h200-owed-9). Each batch in the candidate's order of sets,
    turned so that the fresh set comes first: the same place for every function, and no timed call before it that
    could see the fresh contents."""
    evaluation.time_workload(evaluation.task.workload("n200"), WorkloadResult("n200", "scored"))
    sets = evaluation.task.correctness_sets
    slot = lambda i: evaluation.slot_id("n200", i)  # noqa: E731
    held = {0: sets, **{i: i for i in range(1, sets)}}
    puts = fresh_puts(evaluation)
    for rnd, put in puts.items():
        assert put["inputs"] == [f"set {sets + rnd}"]  # a set never seen before, every round
    for rnd, fn, _, slots in evaluation.slots_timed:
        holds = dict(held) if rnd == 0 else {**held, puts[rnd]["slot"] - slot(0): sets + rnd}
        order = list(range(sets))
        if rnd > 0:
            k = puts[rnd]["slot"] - slot(0)
            order = order[k:] + order[:k]
        expected = [slot(j) for j in order] if fn == "candidate" else [slot(holds[j]) for j in order]
        assert slots == tuple(expected), (rnd, fn)
        if rnd > 0:
            assert slots[0] == (puts[rnd]["slot"] if fn == "candidate" else slot(sets + rnd))
    assert evaluation.slot_set["n200"] == held  # every fresh set put back after its round


@pytest.mark.parametrize(("call_ms", "reps", "warmup"), [(0.1, 200, 3), (4.0, 12, 3), (9.0, 5, 2), (40.0, 3, 1)])
def test_long_kernels_take_fewer_calls_per_batch(evaluation, call_ms, reps, warmup):
    """The estimate round's three calls and three warm-ups, then `batch_ms` (50) of timed calls, at least three and
    at most 200, after warm-ups of at least 10 ms (at least one, at most three)."""
    evaluation.call_ms = call_ms
    evaluation.time_workload(evaluation.task.workload("n200"), WorkloadResult("n200", "scored"))
    functions = len({fn for _, fn, _, _ in evaluation.slots_timed})
    assert set(evaluation.batch_sizes[:functions]) == {(3, 3)}
    assert set(evaluation.batch_sizes[functions:]) == {(reps, warmup)}


@pytest.mark.parametrize("k", [3, 4])
def test_balanced_orders_give_every_function_every_place_equally_often(k):
    """Over 2k rounds each of k functions takes each place twice and follows each other function as often as it
    precedes it; for three functions the six rounds are the six orders."""
    names = [f"f{i}" for i in range(k)]
    orders = balanced_orders(names, 2 * k)
    assert all(sorted(order) == names for order in orders)
    places = Counter((place, fn) for order in orders for place, fn in enumerate(order))
    assert set(places.values()) == {2} and len(places) == k * k
    follows = Counter((a, b) for order in orders for a, b in zip(order, order[1:], strict=False))
    assert all(follows[(a, b)] == follows[(b, a)] for a, b in follows)
    if k == 3:
        assert len({tuple(order) for order in orders}) == 6
    longer = balanced_orders(names, 4 * k)
    assert longer[2 * k:] == longer[:2 * k]  # more rounds repeat the cycle


def test_each_timed_round_draws_its_own_order_of_functions(evaluation):
    """Every function takes every place in the rounds: a fixed order would give one of them the same neighbour
    (and the same probe before it) in every round."""
    places = Counter()
    for _ in range(12):
        evaluation.events.clear()
        evaluation.as_checked()
        evaluation.time_workload(evaluation.task.workload("n200"), WorkloadResult("n200", "scored"))
        rounds = rounds_of(evaluation.events)
        assert [fn for _, fn, _ in rounds[0]] == ["reference", "candidate", "expert"]  # the estimate: as listed
        for r in rounds[1:]:
            order = list(dict.fromkeys(fn for _, fn, _ in r))
            assert sorted(order) == ["candidate", "expert", "reference"]
            places.update(enumerate(order))
    # 60 rounds: some (place, function) pair never drawn has probability under 9 * (2/3)**60, about 3e-10
    assert len(places) == 9


def test_each_rounds_fresh_set_is_left_out_of_the_warm_up_of_its_events_batches(evaluation):
    """In every timed round each function's events batch, and only that, has an unwarmed slot: the candidate's
    holds the round's fresh set, the baselines' is their own slot of it. (A fresh set in the checked round alone
    would tell a candidate that fingerprints its inputs which round is checked.)"""
    evaluation.time_workload(evaluation.task.workload("n1m"), WorkloadResult("n1m", "scored"))
    puts = fresh_puts(evaluation)
    sets = evaluation.task.correctness_sets
    fresh_slot = lambda rnd, fn: (  # noqa: E731
        puts[rnd]["slot"] if fn == "candidate" else evaluation.slot_id("n1m", sets + rnd))
    expected = sorted((rnd, fn, False, fresh_slot(rnd, fn))
                      for rnd in range(1, ROUNDS + 1) for fn in ("candidate", "expert", "reference"))
    assert sorted(evaluation.unwarmed) == expected


@pytest.mark.parametrize(("factor", "caught"), [(20.0, True), (1.6, True), (1.3, False), (1.0, False)])
def test_first_calls_on_unseen_inputs_much_slower_than_the_rest_are_an_input_cache(evaluation, factor, caught):
    """A cache keyed by the inputs' contents serves the sets it has seen and works out each fresh one: its first
    call there is slow. A kernel whose first call on new inputs is somewhat slower (its data drawn otherwise) is
    not flagged under 1.5x."""
    evaluation.fresh_factor = lambda fn: factor if fn == "candidate" else 1.0
    wr = WorkloadResult("n200", "scored")
    evaluation.time_workload(evaluation.task.workload("n200"), wr)
    failures = [(f.verdict, f.reason) for f in evaluation.result.failures]
    assert failures == ([("integrity", "input_cache")] if caught else [])
    assert wr.fresh_slowdown == [factor] * ROUNDS
    assert [c["fresh_ms"] / c["rest_ms"] for c in wr.fresh_calls["candidate"]] == pytest.approx([factor] * ROUNDS)
    assert {c["fresh_ms"] for c in wr.fresh_calls["reference"]} == {evaluation.call_ms}


@pytest.mark.parametrize("graphs", [True, False])
def test_the_fresh_sets_judge_only_the_times_that_are_scored(evaluation, graphs):
    """A latency-bound workload is scored on its graph replays, which the fresh sets do not test (its replay sets
    do): its events batches' first calls are kept, not judged. Without graph times its events times are scored,
    and judged."""
    evaluation.fresh_factor = lambda fn: 20.0 if fn == "candidate" else 1.0
    if not graphs:
        events_only = evaluation.timed_batch
        evaluation.timed_batch = lambda *args, graph, **kwargs: [] if graph else events_only(
            *args, graph=graph, **kwargs)
    wr = WorkloadResult("n1m", "scored")
    evaluation.time_workload(evaluation.task.workload("n1m"), wr)
    assert evaluation.task.workload("n1m").latency_bound
    assert wr.fresh_slowdown == [20.0] * ROUNDS
    failures = [(f.verdict, f.reason) for f in evaluation.result.failures]
    assert failures == ([] if graphs else [("integrity", "input_cache")])


def test_a_slow_first_call_of_the_reference_too_is_not_the_candidates_fault(evaluation):
    evaluation.fresh_factor = lambda fn: 3.0 if fn in ("candidate", "reference") else 1.0
    evaluation.time_workload(evaluation.task.workload("n200"), WorkloadResult("n200", "scored"))
    assert evaluation.result.failures == []


def test_one_slow_first_call_is_a_hiccup_not_a_verdict(evaluation):
    """One slow call can be the GPU's: the verdict goes by the median over the rounds."""
    seen = []

    def hiccup_once(fn):
        if fn != "candidate":
            return 1.0
        seen.append(fn)
        return 4.0 if len(seen) == 1 else 1.0

    evaluation.fresh_factor = hiccup_once
    wr = WorkloadResult("n200", "scored")
    evaluation.time_workload(evaluation.task.workload("n200"), wr)
    assert evaluation.result.failures == [] and sorted(wr.fresh_slowdown) == [1.0] * (ROUNDS - 1) + [4.0]


def test_the_roofline_averages_the_sets_the_timing_ran_on(evaluation):
    """A workload whose sets differ in work (attention's drawn lengths) has the bytes of the sets it was timed
    on, averaged: the candidate's slots at the end, not the last set made."""
    sets = evaluation.task.correctness_sets
    evaluation.derived["n200"] = {i: {"sum_L": 100.0 * (i + 1)} for i in range(sets + 2)}
    evaluation.slot_set["n200"] = {0: sets, 1: 1, 2: sets + 1}
    assert evaluation.timed_derived("n200") == {"sum_L": 100.0 * ((sets + 1) + 2 + (sets + 2)) / 3}
    assert evaluation.timed_derived("n1m") is None  # a task without derived quantities


def replay_rounds(evaluation, monkeypatch) -> WorkloadResult:
    """`time_workload` on the latency-bound n1m whose sets differ only in tensors (the placeholders stand for such
    sets), the replay sets' oracle requests recorded in `evaluation.oracle_sets`."""
    monkeypatch.setattr(evaluation, "sets_can_move", lambda workload: True)
    made = evaluation.make_set
    evaluation.oracle_sets = []

    def make_set(workload, i, oracle=True):
        made(workload, i, oracle)
        if oracle:
            evaluation.oracle_sets.append(i)

    monkeypatch.setattr(evaluation, "make_set", make_set)
    wr = WorkloadResult("n1m", "scored")
    evaluation.time_workload(evaluation.task.workload("n1m"), wr)
    return wr


def test_graph_batches_replay_a_set_that_no_call_has_seen_first(evaluation, monkeypatch):
    """A latency-bound workload is scored on its graph replays, whose captures call every slot: each timed round's
    candidate graph batch carries a set of its own (made for it, never called), written by its worker over the slot
    of the round's fresh set after the captures, and that slot is replayed first; the baselines replay their own
    slot of that set first. Only the checked round's replay set gets the oracle's outputs, as for the fresh sets,
    and the set it replaced is put back after each round."""
    replay_rounds(evaluation, monkeypatch)
    sets, name = evaluation.task.correctness_sets, "n1m"
    replay_set = lambda rnd: sets + ROUNDS + rnd  # noqa: E731
    writes = {(rnd, graph): w for rnd, fn, graph, w in evaluation.fresh_writes if fn == "candidate"}
    assert sorted(writes) == [(r, g) for r in range(1, ROUNDS + 1) for g in (False, True)]
    assert all(fn == "candidate" for _, fn, _, _ in evaluation.fresh_writes)
    timed = {(rnd, fn, graph): slots for rnd, fn, graph, slots in evaluation.slots_timed}
    for rnd in range(1, ROUNDS + 1):
        events_write, graph_write = writes[(rnd, False)], writes[(rnd, True)]
        assert graph_write["inputs"] == [f"set {replay_set(rnd)}"] and graph_write["slot"] == events_write["slot"]
        assert timed[(rnd, "candidate", True)] == timed[(rnd, "candidate", False)]
        assert timed[(rnd, "candidate", True)][0] == graph_write["slot"]
        for fn in ("reference", "expert"):
            events_slots, graph_slots = timed[(rnd, fn, False)], timed[(rnd, fn, True)]
            assert graph_slots[0] == evaluation.slot_id(name, replay_set(rnd))
            assert graph_slots[1:] == events_slots[1:]
    checked = next(rnd for rnd in range(1, ROUNDS + 1) if ("batch", "candidate", True) in rounds_of(
        evaluation.events)[rnd])
    assert sorted(evaluation.oracle_sets) == [sets + checked, replay_set(checked)]
    assert evaluation.slot_set[name] == {0: sets, **{i: i for i in range(1, sets)}}  # every round's set put back


@pytest.mark.parametrize("factor", [1.0, 1.4, 1.5, 20.0])
def test_first_replays_on_the_replay_sets_judge_a_graph_scored_workload(evaluation, monkeypatch, factor):
    """The candidate's first replay on each round's replay set against its other replays, over the reference's same
    ratio, is kept for every round; its median `FRESH_SLOWDOWN` or more is `integrity/input_cache` (a cache kept on
    the device inside the graph), judged in place of the events batches' first calls, whose times are not scored."""
    evaluation.replay_factor = lambda fn: factor if fn == "candidate" else 1.0
    wr = replay_rounds(evaluation, monkeypatch)
    assert wr.replay_fresh_slowdown == [factor] * ROUNDS and wr.fresh_slowdown == [1.0] * ROUNDS
    replays = wr.fresh_replays["candidate"]
    assert [r["fresh_ms"] / r["rest_ms"] for r in replays] == pytest.approx([factor] * ROUNDS)
    failures = [(f.verdict, f.reason) for f in evaluation.result.failures]
    assert failures == ([("integrity", "input_cache")] if factor >= FRESH_SLOWDOWN else [])
    if failures:
        assert "first graph replays" in evaluation.result.failures[0].detail


def test_one_slow_first_replay_is_a_hiccup_not_a_cache(evaluation, monkeypatch):
    """The median over the rounds: one first replay many times slower (honest kernels' single rounds reached 2.1x
    on the H200) draws no verdict."""
    seen = []

    def slow_once(fn):
        seen.append(fn)
        return 4.0 if fn == "candidate" and seen.count("candidate") == 1 else 1.0

    evaluation.replay_factor = slow_once
    wr = replay_rounds(evaluation, monkeypatch)
    assert sorted(wr.replay_fresh_slowdown) == [1.0] * (ROUNDS - 1) + [4.0]
    assert evaluation.result.failures == []


def test_sets_that_differ_in_a_scalar_get_no_replay_set(evaluation):
    """A scalar is baked into a captured graph: a set written over a slot after the captures would not be the one
    replayed. (The placeholder sets differ in a non-tensor value.)"""
    wr = WorkloadResult("n1m", "scored")
    evaluation.time_workload(evaluation.task.workload("n1m"), wr)
    assert not any(graph for _, _, graph, _ in evaluation.fresh_writes)
    assert wr.replay_fresh_slowdown == [] and wr.fresh_replays == {}


def test_a_failed_capture_puts_the_replay_set_in_place_again(evaluation, monkeypatch):
    """Whether the worker wrote the replay set before its capture failed is unknown: it is put over the slot again,
    so that the parent's record of what each slot holds stays true."""
    timed = evaluation.timed_batch
    evaluation.timed_batch = lambda *args, graph, **kwargs: [] if graph and args[2] == "candidate" else timed(
        *args, graph=graph, **kwargs)
    wr = replay_rounds(evaluation, monkeypatch)
    sets = evaluation.task.correctness_sets
    puts = [m for m in evaluation.cand.sent if m["op"] == "put_inputs"]
    assert [m["inputs"] for m in puts[0::2]] == [[f"set {sets + ROUNDS + rnd}"] for rnd in range(1, ROUNDS + 1)]
    assert wr.timings["candidate"].graph_median_ms is None
    assert evaluation.slot_set["n1m"] == {0: sets, **{i: i for i in range(1, sets)}}


@pytest.mark.parametrize("untuned", [None, "no autotuner in this torch"])
def test_the_comparator_is_tuned_on_the_baselines_sets_before_its_first_timed_batch(evaluation, monkeypatch,
                                                                                     untuned):
    """`TimingPhase.tune_comparator`: the trusted worker asked once per workload, before any timed batch, on the
    slots the baselines time and as the workload's batches are scored (graph replays where latency-bound)."""
    evaluation.options.comparator = True
    asked = []
    pick = {"kernel": "triton_per_fused_0", "inductor_pick": "XBLOCK=32", "kept": "XBLOCK=8"}

    def trusted_request_alone(message):
        asked.append((len(evaluation.events), message))
        return {"picks": [pick], "seconds": {"first_call": 4.0, "batches": 2.0},
                **({"untuned": untuned} if untuned else {})}

    monkeypatch.setattr(evaluation, "trusted_request_alone", trusted_request_alone)
    workload = evaluation.task.workload("n200")
    wr = WorkloadResult("n200", "scored")
    held = evaluation.slot_set[workload.name]
    baselines_slots = [evaluation.slot_id(workload.name, held[j]) for j in range(len(held))]
    evaluation.time_workload(workload, wr)
    (before, message), = asked
    assert before == 0 and message["op"] == "tune_comparator"  # ahead of every batch
    assert message["graph"] == workload.latency_bound and message["batch_ms"] == evaluation.options.batch_ms
    assert message["slots"] == baselines_slots
    assert wr.comparator_picks == [pick] and wr.comparator_tuning_s == {"first_call": 4.0, "batches": 2.0}
    assert ("batch", "comparator", False) in evaluation.events
    assert [e for e in wr.errors if "comparator" in e] == (
        [f"comparator: Inductor's own configurations kept ({untuned})"] if untuned else [])
