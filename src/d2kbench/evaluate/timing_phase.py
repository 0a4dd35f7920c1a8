"""The timing phase: rounds of timed batches of every function on the same input sets, then the scores.

Round 0 estimates each function's time and sizes the later batches; each later round moves the candidate's
input sets between its slots, puts a fresh set in one of them, and times every function in a balanced order.
A mixin of `evaluator.Evaluation`, whose state it reads.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from d2kbench.evaluate import hardware
from d2kbench.evaluate.result import EvalResult, Failure, Timing, WorkloadResult
from d2kbench.evaluate.timing import batch_reps
from d2kbench.evaluate.timing_guards import CONTENDED_SHARE, SETTLE_S, note_first_call, scored_on_graphs
from d2kbench.evaluate.transfer import Held
from d2kbench.evaluate.workers import RequestFailed, WorkerFault, WorkerProcess
from d2kbench.suite import Task, Workload, roofline

if TYPE_CHECKING:  # the evaluation that mixes this in, and imports this module
    from d2kbench.evaluate.evaluator import EvalOptions

# what a latency-bound workload's graph recheck (`Timer.replay_recheck`) says when its outputs are wrong
GRAPH_REPLAY_WRONG = (
    "the CUDA graph captured from your call, replayed once more{moved} with its outputs poisoned, gave wrong "
    "outputs: {detail}. Latency-bound workloads are scored on graph replays, as a serving engine runs them, so "
    "the captured work must read its inputs on the GPU when replayed (no launch decisions from input values on "
    "the host, no results worked out before the capture)")

WARMUP_CALLS = 3  # untimed calls at the start of each timed batch...
WARMUP_MS = 10.0  # ...once a function's time is estimated, as few as take this long (at least one)
MIN_REPS, MAX_REPS = 3, 200  # timed calls per batch, `batch_ms` long between these bounds
UNTUNED_COMPARATOR = ("comparator: timed in a trusted worker started after its tuning, in Inductor's own "
                      "configurations")
SHUFFLE = secrets.SystemRandom()  # the order of the functions in each timed round (`balanced_orders`)


def fresh_first(slots: list[int], fresh_slot: int) -> list[int]:
    """`slots` rotated so that `fresh_slot` comes first: its call is the batch's first timed call, right after the
    fresh set is written (the candidate's worker writes it after the warm-up), the same place in every function's
    batch."""
    k = slots.index(fresh_slot)
    return slots[k:] + slots[:k]


@dataclass
class ReplayFresh:
    """One function's graph batch in a round with a replay set (`Evaluation.time_workload`): the slots it replays,
    the replay set's slot first; for the candidate, the set written over that slot after the captures and where
    the parent's record then has it."""

    slots: list[int]
    slot: int
    write: dict[str, Any] | None = None  # the candidate's only: `{"slot", "inputs"}`, as the worker's `fresh`
    holds: tuple[int, int] | None = None  # the candidate's only: (position k in its slots, input set index)


@dataclass
class TimingRun:
    """What a workload's timing rounds gather, per function."""

    fns: list[tuple[str, WorkerProcess | None]]
    checked: int  # the round whose outputs are checked again
    samples: dict[str, list[float]]  # events times, rounds 1 on (ms)
    graph_samples: dict[str, list[float]]  # graph replay times (latency-bound workloads)
    reps: dict[str, int]  # timed calls per batch (3 in the estimate round, then sized by it)
    warmups: dict[str, int]
    # per round: function -> its first call on the round's fresh set / its other calls in the batch
    fresh_ratio: dict[int, dict[str, float | None]] = dataclasses.field(default_factory=dict)
    # ...and its first graph replay on the round's replay set / its other replays (latency-bound workloads)
    replay_fresh_ratio: dict[int, dict[str, float | None]] = dataclasses.field(default_factory=dict)
    unchecked_graphs: bool = False  # the checked round's graph batch of the candidate gave no times

    orders: list[list[tuple[str, WorkerProcess | None]]] = dataclasses.field(default_factory=list)  # rounds 1 on

    @classmethod
    def of(cls, fns: list[tuple[str, WorkerProcess | None]], checked: int, rounds: int) -> TimingRun:
        names = [f for f, _ in fns]
        return cls(fns, checked, {f: [] for f in names}, {f: [] for f in names}, {f: 3 for f in names},
                   {f: WARMUP_CALLS for f in names}, orders=balanced_orders(fns, rounds))


def balanced_orders(items: list, rounds: int) -> list[list]:
    """The order of the functions in each of `rounds` timed rounds: the cyclic shifts of a random order and of its
    reverse (2k orders for k functions), shuffled, repeated as needed. Over 2k rounds every function takes every
    place twice and follows each of its two neighbours in the cycle equally often (for three functions: all six
    orders, each once). The H200 caps its power at 700 W: a GEMM-bound kernel runs at 1980 MHz after the GPU
    idled and at 1605-1695 MHz once it has been busy for some 50 ms, 8-10% slower (bench/results/
    2026-12-04-h200-owed-15, `gap_*.log`), so what ran before a batch moves its time; orders drawn independently
    gave one function the favoured places more often in some evaluations (muon's fraction of expert 0.967-1.018)."""
    first = SHUFFLE.sample(items, len(items))
    cycle = [first[i:] + first[:i] for i in range(len(first))]
    cycle += [list(reversed(order)) for order in cycle]
    SHUFFLE.shuffle(cycle)
    return [cycle[i % len(cycle)] for i in range(rounds)]


class TimingPhase:
    """Timing every function of a workload and scoring the candidate (`Evaluation` mixes it in; it calls the
    evaluation's `trusted_request`, `candidate_fault`, `candidate_slots`, `slot_id`, `check_candidate_reply`,
    `malformed_reply`, the correctness phase's `make_set` and `compare`, the guards' checks and the value
    transfer's `hand_over`, `lend_sets`, `return_lends`, `unpack` and `export_flag`)."""

    # the evaluation's state it reads and sets (`Evaluation.__init__`)
    task: Task
    options: EvalOptions
    trusted: WorkerProcess | None
    cand: WorkerProcess | None
    inputs: dict[str, dict[int, list[Any]]]
    derived: dict[str, dict[int, dict[str, float]]]
    slot_set: dict[str, dict[int, int]]
    resident: set[str]
    batch_walls: dict[str, list[tuple[float, list[float], int]]]
    result: EvalResult

    def time_workload(self, workload: Workload, wr: WorkloadResult) -> None:
        name = workload.name
        slots = self.candidate_slots(name)
        if name not in self.resident and not self.make_sets_again(workload, slots):
            return
        fns = [("reference", self.trusted), ("candidate", self.cand)]
        if self.options.expert:
            fns.append(("expert", self.trusted))
        if self.options.comparator:
            fns.append(("comparator", self.trusted))
        # The round whose outputs are checked again, drawn here and told to no one: every round starts the same
        # way (the candidate's input sets moved between its slots, a fresh set in one of them), so a candidate that
        # counts calls, watches for the rotation or fingerprints its inputs cannot tell it from the rest and cheat
        # around it. Only the checked round's fresh set needs the oracle's outputs.
        run = TimingRun.of(fns, checked=1 + secrets.randbelow(self.options.rounds), rounds=self.options.rounds)
        fresh = {rnd: self.task.correctness_sets + rnd for rnd in range(1, self.options.rounds + 1)}
        for rnd, index in fresh.items():
            self.make_set(workload, index, oracle=(rnd == run.checked))
        replay_sets = self.make_replay_sets(workload, run)
        self.batch_walls = {}
        if not self.gpu_uncontended(workload, wr):
            return
        if self.options.comparator:
            self.tune_comparator(workload, wr, slots)
        for rnd in range(self.options.rounds + 1):  # round 0 estimates each function's time
            if not self.timed_round(workload, wr, run, slots, rnd, fresh.get(rnd), replay_sets.get(rnd)):
                return
        if run.unchecked_graphs:  # its other rounds' graphs cannot count unchecked: its events time is scored
            run.graph_samples["candidate"] = []
            wr.errors.append("candidate: no CUDA graph in the round whose graph outputs were checked; graph "
                             "times not scored")
        if not self.gpu_uncontended(workload, wr):
            return
        for fn, values in run.samples.items():
            g = run.graph_samples[fn]
            wr.timings[fn] = Timing(
                median_ms=statistics.median(values), min_ms=min(values), max_ms=max(values), samples=len(values),
                graph_median_ms=statistics.median(g) if g else None,
            )
        self.check_unaccounted_time(workload, wr)  # first: times it cannot vouch for make the ratios below moot
        self.check_fresh_sets(workload, wr, run)
        self.score_workload(workload, wr)

    def tune_comparator(self, workload: Workload, wr: WorkloadResult, slots: list[int]) -> None:
        """The comparator's Inductor kernels each in the configuration the trusted worker's timing of the whole
        comparator finds clearly fastest, on the sets the baselines time and as its batches will be timed, before its
        first timed batch: not Inductor's own pick, a draw on kernels of a few microseconds
        (`inductor_picks`)."""
        trusted_slots = [self.slot_id(workload.name, self.slot_set[workload.name][j]) for j in range(len(slots))]
        reply = self.trusted_request_alone({
            "op": "tune_comparator", "slots": trusted_slots, "graph": workload.latency_bound,
            "batch_ms": self.options.batch_ms, "reps": [MIN_REPS, MAX_REPS], "warmup": WARMUP_CALLS})
        wr.comparator_picks = reply["picks"]
        wr.comparator_tuning_s = reply.get("seconds", {})
        if reply.get("untuned"):
            wr.errors.append(f"comparator: Inductor's own configurations kept ({reply['untuned']})")

    def make_sets_again(self, workload: Workload, slots: list[int]) -> bool:
        """The workload's correctness sets made again from their seeds (dropped after its correctness, so that the
        workers hold one workload's sets at a time), and the candidate's slots given the sets they held (False on
        a fault of the candidate's). The oracle's outputs for them are kept from the correctness phase."""
        name = workload.name
        held = set(self.slot_set[name].values())
        for i in range(self.task.correctness_sets + 1):
            self.make_set(workload, i, oracle=False, lend=i in held)
        self.resident.add(name)
        for k, index in self.slot_set[name].items():
            if not self.ask_candidate(workload, {"op": "put_inputs", "slot": slots[k],
                                                 "inputs": self.hand_over(name, index)}):
                return False
        return True

    def make_replay_sets(self, workload: Workload, run: TimingRun) -> dict[int, int]:
        """Round -> the input set of its graph batches (latency-bound workloads whose sets differ only in tensors),
        made here (the oracle's outputs for the checked round's): the candidate's worker writes it over the slot of
        the round's fresh set after the captures and replays that slot first (`Timer.time_graphs`). The round's
        fresh set cannot serve: the events batch has called it, and the capture calls every slot."""
        if not workload.latency_bound or not self.sets_can_move(workload):
            return {}
        first = self.task.correctness_sets + self.options.rounds
        replay = {rnd: first + rnd for rnd in range(1, self.options.rounds + 1)}
        for rnd, index in replay.items():
            self.make_set(workload, index, oracle=(rnd == run.checked))
        return replay if self.sets_can_move(workload) else {}

    def timed_round(self, workload: Workload, wr: WorkloadResult, run: TimingRun, slots: list[int], rnd: int,
                    fresh_index: int | None, replay_index: int | None = None) -> bool:
        """Round `rnd` of a workload's timing: the candidate's sets moved between its slots and input set
        `fresh_index` put over one of them (rounds 1 on; its graph batch writes `replay_index` there after its
        captures), each function's batches, the replaced set put back. False where a request failed (its failure
        recorded)."""
        name = workload.name
        fresh_in = None  # the candidate's slot that holds this round's fresh set
        fresh_write = None  # ...written there by its worker inside its events batch, after the warm-up
        replay_write = None  # ...and the replay set, written there inside its graph batch, after the captures
        if rnd > 0:
            if not self.rotate_candidate_slots(workload, slots):
                return False
            k = secrets.randbelow(len(slots))
            fresh_in, replaced = slots[k], self.slot_set[name][k]
            # the sets the candidate's worker may take this round, lent in one request (the last round's taken
            # back): the fresh one, the replay one, the one put back after the round
            self.return_lends(name)
            self.lend_sets(name, [s for s in (fresh_index, replay_index, replaced) if s is not None])
            fresh_write = {"slot": fresh_in, "inputs": self.hand_over(name, fresh_index)}
            self.slot_set[name][k] = fresh_index
            if replay_index is not None:
                replay_write = {"slot": fresh_in, "inputs": self.hand_over(name, replay_index)}
        # The baselines time the input sets that the candidate holds: its slot 0 was rewritten with the last set
        # (the stale check), one slot holds this round's fresh set, and a workload whose sets differ in work (drawn
        # lengths) must not be timed on others. In the candidate's order, so that the fresh set takes the same
        # place in every function's batch.
        trusted_slots = [self.slot_id(name, self.slot_set[name][j]) for j in range(len(slots))]
        # Each timed round in an order of its own, the orders balanced over the rounds (`balanced_orders`): a
        # batch's place in the round (after which other batch, which probe) must not favour one function. In a
        # fixed order the expert's graph replays came out 0.13 us faster than the candidate's on average (35 pairs,
        # bench/results/2026-12-04-h200-owed-9 to -12) while their events times agreed.
        for fn, worker in run.fns if rnd == 0 else run.orders[rnd - 1]:
            fn_slots = slots if fn == "candidate" else trusted_slots
            fresh_slot = None  # its slot of the fresh set, left out of the warm-up
            replay = None
            if fresh_in is not None:
                fresh_slot = fresh_in if fn == "candidate" else self.slot_id(name, fresh_index)
                fn_slots = fresh_first(fn_slots, fresh_slot)
                if replay_write is not None and fn == "candidate":
                    replay = ReplayFresh(fn_slots, fresh_in, replay_write, (k, replay_index))
                elif replay_write is not None:  # the baselines replay the replay set's own slot first
                    own = self.slot_id(name, replay_index)
                    replay = ReplayFresh([own if s == fresh_slot else s for s in fn_slots], own)
            if not self.time_function(workload, wr, run, rnd, fn, worker, fn_slots, fresh_slot,
                                      fresh_write if fn == "candidate" else None, replay):
                return False
        if rnd == 0:
            return True
        # the set the fresh one replaced goes back where the round's set is now (a recheck moves sets)
        now = next(j for j, held in self.slot_set[name].items() if held in (fresh_index, replay_index))
        return self.put_set(workload, slots, now, replaced) is not None

    def time_function(self, workload: Workload, wr: WorkloadResult, run: TimingRun, rnd: int, fn: str,
                      worker: WorkerProcess, fn_slots: list[int], fresh_slot: int | None,
                      fresh_write: dict[str, Any] | None = None, replay: ReplayFresh | None = None) -> bool:
        """One function's batches of round `rnd`: events (round 0: the estimate that sizes the later batches; the
        candidate's carries the round's fresh set, `fresh_write`) and, for a latency-bound workload, graph replays
        (with `replay`: the round's replay set replayed first). False where a request failed."""
        validate = rnd == run.checked
        times = self.timed_batch(workload, wr, fn, worker, fn_slots, run.reps[fn], graph=False,
                                 validate=validate, warmup=run.warmups[fn], unwarmed=fresh_slot,
                                 fresh_write=fresh_write)
        if times is None:
            return False
        if fresh_slot is not None:
            note_first_call(run.fresh_ratio, wr.fresh_calls, rnd, fn, times, fn_slots, fresh_slot)
        if rnd == 0:
            # A kernel of tens of ms needs few calls for a stable median: muon's 40-70 ms ones, three calls a
            # batch, spread 0.2-1.3% between evaluations (bench/results/2026-12-04-h200-owed-10)
            estimate = max(statistics.median(times), 1e-3)
            run.reps[fn] = batch_reps(estimate, self.options.batch_ms, len(fn_slots), (MIN_REPS, MAX_REPS))
            run.warmups[fn] = max(1, min(WARMUP_CALLS, math.ceil(WARMUP_MS / estimate)))
            self.batch_walls.pop(fn, None)  # an estimate: three calls, where request overhead dominates
            return True
        run.samples[fn] += times
        if workload.latency_bound:
            gslots = replay.slots if replay else fn_slots
            gtimes = self.timed_batch(workload, wr, fn, worker, gslots, run.reps[fn], graph=True,
                                      validate=validate, warmup=run.warmups[fn],
                                      fresh_write=replay and replay.write, holds=replay and replay.holds)
            if gtimes is None:
                return False
            if gtimes:
                run.graph_samples[fn] += gtimes
                if replay:
                    note_first_call(run.replay_fresh_ratio, wr.fresh_replays, rnd, fn, gtimes, gslots, replay.slot)
            else:
                if validate and fn == "candidate":
                    run.unchecked_graphs = True
                if replay and replay.holds:  # a failed capture may or may not have written the replay set: again
                    k, index = replay.holds
                    return self.put_set(workload, self.candidate_slots(workload.name), k, index) is not None
        return True

    def rotate_candidate_slots(self, workload: Workload, slots: list[int]) -> bool:
        """Before each timed round, move the input sets between the candidate's slots in place, so outputs
        cached by pointer or call count in the timed runs no longer match (False on a fault)."""
        if not self.ask_candidate(workload, {"op": "rotate", "slots": slots}):
            return False
        self.sets_moved_along(workload)
        return True

    def ask_candidate(self, workload: Workload, message: dict[str, Any]) -> bool:
        """One request to the candidate's worker between timed batches; False, its fault recorded, where it fails."""
        try:
            self.cand.request(message, self.options.call_timeout_s)
        except (RequestFailed, WorkerFault) as exc:
            self.result.add(self.candidate_fault(exc, workload))
            return False
        return True

    def put_set(self, workload: Workload, slots: list[int], k: int, index: int) -> int | None:
        """Write input set `index` in place over the candidate's slot `k`; the set the slot held, or None on a
        fault."""
        if not self.ask_candidate(workload, {"op": "put_inputs", "slot": slots[k], "in_place": True,
                                             "inputs": self.hand_over(workload.name, index)}):
            return None
        replaced = self.slot_set[workload.name][k]
        self.slot_set[workload.name][k] = index
        return replaced

    def sets_can_move(self, workload: Workload) -> bool:
        """Whether the graph recheck may move the input sets between the slots: only tensors change under a
        captured graph, so every other input must be the same in every set."""
        sets = list(self.inputs[workload.name].values())  # the last one too: it was written over slot 0
        return all(isinstance(v, torch.Tensor | Held) or all(s[k] == v for s in sets)
                   for k, v in enumerate(sets[0]))

    def sets_moved_along(self, workload: Workload) -> None:
        """Record that the candidate's worker moved the input sets one slot along (slot k holds slot k+1's)."""
        held = self.slot_set[workload.name]
        self.slot_set[workload.name] = {k: held[(k + 1) % len(held)] for k in range(len(held))}

    def timed_batch(self, workload: Workload, wr: WorkloadResult, fn: str, worker: WorkerProcess,
                    slots: list[int], reps: int, graph: bool, validate: bool,
                    warmup: int = WARMUP_CALLS, unwarmed: int | None = None,
                    fresh_write: dict[str, Any] | None = None,
                    holds: tuple[int, int] | None = None) -> list[float] | None:
        """One timed batch of `fn` on `slots` (graph replays with `graph`): its times (ms), or None where it failed
        ([] for a graph capture that failed). `validate`: the candidate's outputs come back and are compared with
        the oracle's for the sets its slots hold; `holds` = (k, index): once the batch has run, its slot k holds set
        `index` (its worker wrote `fresh_write` there)."""
        returned = validate and fn == "candidate"
        move_sets = returned and graph and self.sets_can_move(workload)
        message = {"op": "time", "fn": "run" if fn == "candidate" else fn, "slots": slots, "reps": reps,
                   "warmup": warmup, "unwarmed": unwarmed, "graph": graph, "return_outputs": returned,
                   "move_sets": move_sets, "fresh": fresh_write, **self.export_flag()}
        ceiling = self.gpu_ceilings()["copy_bytes_per_s"] if worker is self.trusted else 0.0
        with self.gpu_locked():
            start = time.perf_counter()
            try:
                if worker is self.trusted:
                    with self.cand.paused():  # nothing of the candidate's runs beside the baselines...
                        # ...once what it queued on the GPU before the stop has drained (a stopped thread's
                        # copies still ran and slowed the reference 2.6x: bench/results/2026-12-03-h200-owed-2)
                        before = self.quiet(workload, wr, ceiling, self.options.quiet_wait_s,
                                            f"before the {fn}'s timed batch")
                        if before < CONTENDED_SHARE:
                            return None
                        sent = time.perf_counter()
                        reply = self.trusted_request(message)
                        request_ms = (time.perf_counter() - sent) * 1e3
                        after = self.quiet(workload, wr, ceiling, SETTLE_S, f"right after the {fn}'s timed batch")
                        if after < CONTENDED_SHARE:
                            return None
                else:
                    sent = time.perf_counter()
                    reply = worker.request(message, self.options.call_timeout_s)
                    request_ms = (time.perf_counter() - sent) * 1e3
            except RequestFailed as exc:
                if graph:
                    wr.errors.append(f"{fn}: CUDA graph capture failed ({exc.error}); graph time not reported")
                    return []
                self.result.add(self.candidate_fault(exc, workload))
                return None
            except WorkerFault as exc:
                self.result.add(self.candidate_fault(exc, workload))
                return None
            wall_ms = (time.perf_counter() - start) * 1e3
        if worker is self.cand:
            try:
                self.check_candidate_reply(reply, {"times_ms": list, **({"outputs": dict, "inputs": dict}
                                                                        if returned else {})})
                keys = {str(s) for s in slots}
                if not all(type(t) in (int, float) for t in reply["times_ms"]) or returned and not (
                        set(reply["outputs"]) <= keys and set(reply["inputs"]) == set(reply["outputs"])):
                    raise self.malformed_reply("times or result slots")
            except WorkerFault as exc:
                self.result.add(self.candidate_fault(exc, workload))
                return None
        times = [float(t) for t in reply["times_ms"]]
        if fn == "comparator" and reply.get("comparator_untuned") and UNTUNED_COMPARATOR not in wr.errors:
            wr.errors.append(UNTUNED_COMPARATOR)  # a trusted worker started again after `tune_comparator`
        if holds is not None:
            self.slot_set[workload.name][holds[0]] = holds[1]
        if fn == "candidate" and reply.get("persisting_l2_bytes"):
            self.result.add(Failure("integrity", "persisting_l2",
                                    f"the candidate's process reserved {reply['persisting_l2_bytes']} bytes of L2 for "
                                    "persisting lines while timed: its data would survive the flush", workload.name))
            return None
        if fn == "candidate" and sum(times) > wall_ms * 1.05 + 1.0:
            self.result.add(Failure("integrity", "patched_timer",
                                    f"reported {sum(times):.2f} ms of kernel time in {wall_ms:.2f} ms of wall time",
                                    workload.name))
        if not graph and not validate and times:  # a validated batch also writes its outputs out
            self.batch_walls.setdefault(fn, []).append((request_ms, times, warmup))
        if returned:
            if move_sets:  # its outputs come from a replay after the worker moved the sets along (`replay_recheck`)
                self.sets_moved_along(workload)
            for slot_key, descs in reply["outputs"].items():
                index = int(slot_key) - self.slot_id(workload.name, 0)
                try:
                    outs = self.unpack(descs, self.cand)
                    after = self.unpack(reply["inputs"][slot_key], self.cand)
                except WorkerFault as exc:
                    self.result.add(self.candidate_fault(exc, workload))
                    return None
                expected_set = self.slot_set[workload.name][index]
                mismatch = self.compare(workload, expected_set, outs, after, [d.get("strides") for d in descs])
                if mismatch and graph:
                    self.result.add(Failure("incorrect", "graph_replay_mismatch", GRAPH_REPLAY_WRONG.format(
                        moved=" after its inputs changed in place" if move_sets else "", detail=mismatch[1]),
                        workload.name))
                elif mismatch:
                    self.result.add(Failure("incorrect", "timed_output_mismatch",
                                            f"an output of the timed runs is wrong: {mismatch[1]}", workload.name))
        return times

    def timed_derived(self, name: str) -> dict[str, float] | None:
        """The roofline's quantities averaged over the input sets the timing ran on (the candidate's slots at the
        end: the sets a workload with drawn lengths was timed on; each round's fresh set, timed once, left out)."""
        per_set = [self.derived.get(name, {}).get(i) for i in self.slot_set.get(name, {}).values()]
        per_set = [d for d in per_set if d]
        if not per_set:
            return None
        return {k: statistics.fmean(d[k] for d in per_set) for k in per_set[0]}

    def score_workload(self, workload: Workload, wr: WorkloadResult) -> None:
        graph = scored_on_graphs(workload, wr)
        t = {fn: tm.graph_median_ms if graph else tm.median_ms for fn, tm in wr.timings.items()}
        cand = t["candidate"]
        wr.bytes, wr.flops = roofline(self.task, workload, self.timed_derived(workload.name))
        wr.speedup = t["reference"] / cand
        if "expert" in t:
            wr.fraction_of_expert = t["expert"] / cand
        if "comparator" in t:
            wr.speedup_vs_comparator = t["comparator"] / cand
        wr.achieved_tbps = wr.bytes / (cand * 1e-3) / 1e12
        wr.achieved_tflops = wr.flops / (cand * 1e-3) / 1e12
        ceilings = self.gpu_ceilings()
        floor_s = max(wr.bytes / ceilings["copy_bytes_per_s"], wr.flops / ceilings["bf16_flops_per_s"])
        wr.sol_fraction = floor_s / (cand * 1e-3)
        nameplate = hardware.nameplate_floor_s(self.result.environment.get("gpu", ""), wr.bytes, wr.flops)
        if nameplate is not None and cand * 1e-3 < 0.9 * nameplate:
            self.result.add(Failure(
                "integrity", "below_physical_floor",
                f"{cand * 1e3:.1f} us is more than 10% below the nameplate floor of {nameplate * 1e6:.1f} us",
                workload.name))
