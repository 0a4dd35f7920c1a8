"""The graph-replay times of latency-bound workloads are scored, so the replays' outputs are checked too: in the
checked round the candidate's worker moves the input sets one slot along after the timed replays and replays each
graph once more, its outputs poisoned (`Timer.replay_recheck`). The parent's side with the worker stood in for, and
the worker's side on CPU tensors with the graphs stood in for (a real capture needs a GPU: bench/gpu_owed.sh)."""

import contextlib
import dataclasses
import types

import pytest
import torch

from d2kbench.evaluate import channel, timing_guards
from d2kbench.evaluate.evaluator import EvalOptions, Evaluation
from d2kbench.evaluate.result import WorkloadResult
from tests.conftest import StandInCandidate, stand_in_timing


@pytest.fixture
def evaluation(toy_task, monkeypatch, tmp_path):
    ev = Evaluation(toy_task, toy_task.expert_path, EvalOptions(device="cpu"))
    monkeypatch.setattr(timing_guards, "gpu_lock", lambda device: contextlib.nullcontext())
    sets = toy_task.correctness_sets
    ev.expected["n200"] = {i: [torch.full((200,), float(i + 1))] for i in range(sets)}  # each set's own outputs
    ev.inputs["n200"] = {i: [torch.randn(200), torch.randn(200), 1.5] for i in range(sets + 1)}
    ev.expected_strides["n200"] = [[1]]
    ev.slot_set["n200"] = {i: i for i in range(sets)}
    ev.spool_dir = tmp_path
    yield ev
    ev.cand = None
    ev.close()


def graph_reply(ev: Evaluation, spool, set_in_slot) -> dict:
    """A graph batch's reply whose slot k carries the outputs of input set `set_in_slot(k)`."""
    slots = {str(ev.slot_id("n200", k)): [channel.pack_value(ev.expected["n200"][set_in_slot(k)][0], spool)]
             for k in range(ev.task.correctness_sets)}
    return {"times_ms": [0.01] * 3, "outputs": slots, "inputs": {key: [{"scalar": None}] * 3 for key in slots}}


def graph_batch(ev: Evaluation, tmp_path, set_in_slot) -> list[float] | None:
    """The checked round's graph batch of the candidate, its worker answering with `graph_reply`."""
    ev.cand = StandInCandidate(graph_reply(ev, tmp_path, set_in_slot))
    ev.cand.spool = tmp_path
    slots = [ev.slot_id("n200", k) for k in range(ev.task.correctness_sets)]
    return ev.timed_batch(ev.task.workload("n200"), WorkloadResult("n200", "scored"), "candidate", ev.cand, slots,
                          3, graph=True, validate=True)


@pytest.mark.parametrize("honest", [True, False])
def test_a_graph_batchs_outputs_are_checked_against_the_sets_moved_one_slot_along(evaluation, tmp_path, honest):
    """Slot k holds set k+1 after the move; a graph that replays results worked out while it was captured
    still answers with set k's and is wrong."""
    sets = evaluation.task.correctness_sets
    moved = (lambda k: (k + 1) % sets) if honest else (lambda k: k)
    assert graph_batch(evaluation, tmp_path, moved) == [0.01] * 3
    [sent] = evaluation.cand.sent
    assert sent["graph"] and sent["return_outputs"] and sent["move_sets"]  # the recheck, after the move
    assert evaluation.slot_set["n200"] == {k: (k + 1) % sets for k in range(sets)}  # the parent's record moved
    if honest:
        assert evaluation.result.verdict == "pass"
    else:
        assert (evaluation.result.verdict, evaluation.result.reason) == ("incorrect", "graph_replay_mismatch")
        assert "after its inputs changed in place" in evaluation.result.detail


def test_sets_whose_scalars_differ_are_not_moved_under_a_graph(evaluation, tmp_path):
    """A scalar is baked into the captured graph: with sets that differ in one, the recheck replays in place."""
    sets = evaluation.task.correctness_sets
    evaluation.inputs["n200"][1][2] = 2.5
    assert graph_batch(evaluation, tmp_path, lambda k: k) == [0.01] * 3
    assert evaluation.cand.sent[0]["return_outputs"] and not evaluation.cand.sent[0]["move_sets"]
    assert evaluation.slot_set["n200"] == {k: k for k in range(sets)} and evaluation.result.verdict == "pass"


def time_rounds(evaluation, monkeypatch, checked_graph_times: list[float]) -> tuple[list[tuple], WorkloadResult]:
    """`time_workload` on a latency-bound n200, the batches stood in for: every batch gives times, except the
    candidate's graph batch in the checked round, which gives `checked_graph_times`."""
    seen = []

    def timed_batch(workload, wr, fn, worker, slots, reps, graph, validate, warmup=3, unwarmed=None, fresh_write=None,
                    holds=None):
        seen.append((fn, graph, validate))
        return checked_graph_times if (fn, graph, validate) == ("candidate", True, True) else [0.1] * reps

    stand_in_timing(evaluation, monkeypatch, timed_batch)
    wr = WorkloadResult("n200", "scored")
    evaluation.time_workload(dataclasses.replace(evaluation.task.workload("n200"), latency_bound=True), wr)
    return seen, wr


def test_the_checked_rounds_graph_batch_is_validated_like_its_event_batch(evaluation, monkeypatch):
    seen, wr = time_rounds(evaluation, monkeypatch, [0.1] * 5)
    checked = [graph for fn, graph, validate in seen if fn == "candidate" and validate]
    assert checked == [False, True]  # one round: its event batch, then its graph batch
    assert wr.timings["candidate"].graph_median_ms == pytest.approx(0.1)


def test_no_graph_in_the_checked_round_means_no_graph_time_for_the_candidate(evaluation, monkeypatch):
    """A capture that fails only where it would be checked must not leave the other rounds' graphs scored."""
    _, wr = time_rounds(evaluation, monkeypatch, [])
    assert wr.timings["candidate"].graph_median_ms is None  # its events time is scored (`score_workload`)
    assert wr.timings["expert"].graph_median_ms == pytest.approx(0.1)
    assert any("graph times not scored" in e for e in wr.errors)


@pytest.mark.parametrize("graph_kind", ["computes", "copies_its_capture", "captured_nothing"])
def test_the_recheck_leaves_right_outputs_only_to_a_graph_that_computes(monkeypatch, tmp_path, graph_kind):
    """The worker's side on CPU tensors: `Worker.rotate` moves the sets, then `Timer.replay_recheck` poisons and
    replays. Stand-in graphs (a replay is a Python function writing the captured output) show what each kind
    leaves: the moved sets' answers, the sets' answers from before the move, or the poison."""
    from d2kbench.evaluate.timing import Timer
    from d2kbench.evaluate.worker import Worker

    worker = Worker("candidate", tmp_path, "cpu")
    sets = [[torch.randn(8), torch.randn(8), 1.5] for _ in range(3)]
    for slot, values in enumerate(sets):
        worker._store(slot, [v.clone() if isinstance(v, torch.Tensor) else v for v in values])
    answer = [s[2] * s[0] + s[1] for s in sets]  # what the call worked out for each slot when it was captured
    outputs = {slot: answer[slot].clone() for slot in range(3)}  # as the timed replays left them

    def replay(slot):
        x, y, alpha = worker.slots[slot]
        if graph_kind == "computes":
            outputs[slot].copy_(alpha * x + y)
        elif graph_kind == "copies_its_capture":
            outputs[slot].copy_(answer[slot])

    graphs = {slot: types.SimpleNamespace(replay=lambda slot=slot: replay(slot)) for slot in range(3)}
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    timer = object.__new__(Timer)  # no flush buffer or clock: the recheck needs neither
    timer.device = torch.device("cpu")
    worker.rotate({"slots": [0, 1, 2]})
    timer.replay_recheck(graphs, outputs, worker._restore)
    for k in range(3):
        if graph_kind == "computes":
            assert torch.allclose(outputs[k], answer[(k + 1) % 3])  # slot k holds set k+1 now
        elif graph_kind == "copies_its_capture":
            assert torch.equal(outputs[k], answer[k]) and not torch.allclose(outputs[k], answer[(k + 1) % 3])
        else:
            assert outputs[k].isnan().all()


class FakeGraphs:
    """Just enough of torch.cuda for `Timer.time_graphs` on a CPU: a capture records which slot's call it holds,
    a replay logs that slot; every step goes to `log`."""

    def __init__(self, monkeypatch):
        self.log, self.capturing = [], None
        fake = self

        class Graph:
            def replay(self):
                fake.log.append(("replay", self.slot))

        class Capture:
            def __init__(self, graph):
                self.graph = graph

            def __enter__(self):
                fake.capturing = self.graph

            def __exit__(self, *exc):
                fake.capturing = None

        class Event:
            def __init__(self, **kwargs):
                pass

            def record(self):
                pass

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return 0.01

        stream = types.SimpleNamespace(wait_stream=lambda other: None)
        for attr, value in {"Stream": lambda device: stream, "current_stream": lambda device=None: stream,
                            "stream": lambda s: contextlib.nullcontext(), "CUDAGraph": Graph, "graph": Capture,
                            "Event": Event, "synchronize": lambda device=None: self.log.append(("sync",))}.items():
            monkeypatch.setattr(torch.cuda, attr, value)

    def call(self, slot):
        if self.capturing is not None:
            self.capturing.slot = slot
            self.log.append(("capture", slot))
        else:
            self.log.append(("call", slot))
        return torch.zeros(1)


def test_the_replay_set_is_written_after_the_captures_and_replayed_first(monkeypatch):
    """The worker's side of the replay sets: `Timer.time_graphs` writes the set over its slot's captured inputs only
    once every slot is captured, synchronizes, and the first timed replay is that slot's (the parent puts it first).
    A capture or an uncaptured call after the write would let a device-side cache see the set untimed."""
    from d2kbench.evaluate.timing import Timer

    fake = FakeGraphs(monkeypatch)
    timer = object.__new__(Timer)  # no flush buffer or clock: the fakes need neither
    timer.device, timer.flush = torch.device("cpu"), lambda: None
    slots = [12, 10, 11]  # the replay set's slot first
    times, _ = timer.time_graphs(fake.call, lambda slot: None, slots, 6, None,
                                 write_fresh=lambda: fake.log.append(("write", 12)))
    assert times == [0.01] * 6
    write = fake.log.index(("write", 12))
    before, after = fake.log[:write], fake.log[write + 1:]
    assert sorted(e for e in before if e[0] == "capture") == [("capture", s) for s in sorted(slots)]
    assert after[0] == ("sync",)
    assert [e for e in after if e[0] != "sync"] == [("replay", s) for s in slots * 2]
