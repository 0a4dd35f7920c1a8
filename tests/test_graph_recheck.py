"""The graph-replay times of latency-bound workloads are scored, so the replays' outputs are checked too: in the
checked round the candidate's worker moves the input sets one slot along after the timed replays and replays each
graph once more, its outputs poisoned (`Timer.replay_recheck`). The parent's side, the worker stood in for."""

import contextlib
import dataclasses

import pytest
import torch

from d2kbench.evaluate import channel, evaluator
from d2kbench.evaluate.evaluator import EvalOptions, Evaluation
from d2kbench.evaluate.result import WorkloadResult
from tests.conftest import StandInCandidate


@pytest.fixture
def evaluation(toy_task, monkeypatch, tmp_path):
    ev = Evaluation(toy_task, toy_task.expert_path, EvalOptions(device="cpu"))
    monkeypatch.setattr(evaluator, "gpu_lock", lambda device: contextlib.nullcontext())
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


def test_the_checked_rounds_graph_batch_is_validated_like_its_event_batch(evaluation, monkeypatch):
    evaluation.cand = object()
    seen = []
    monkeypatch.setattr(evaluation, "gpu_uncontended", lambda workload, wr: True)
    monkeypatch.setattr(evaluation, "check_unaccounted_time", lambda workload, wr: None)
    monkeypatch.setattr(evaluation, "score_workload", lambda workload, wr: None)
    monkeypatch.setattr(evaluation, "rotate_candidate_slots", lambda workload, slots: True)
    monkeypatch.setattr(evaluation, "timed_batch", lambda workload, wr, fn, worker, slots, reps, graph, validate:
                        seen.append((fn, graph, validate)) or [0.1] * reps)
    workload = dataclasses.replace(evaluation.task.workload("n200"), latency_bound=True)
    evaluation.time_workload(workload, WorkloadResult("n200", "scored"))
    checked = [graph for fn, graph, validate in seen if fn == "candidate" and validate]
    assert checked == [False, True]  # one round: its event batch, then its graph batch
