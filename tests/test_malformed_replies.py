"""Replies of the candidate's worker that its code changed (the worker runs in the candidate's process): the parent
reads nothing it cannot read as the worker sends it, and says so as `integrity/malformed_result`, never as an
exception out of the evaluation."""

import contextlib

import pytest

from d2kbench.evaluate import timing_guards
from d2kbench.evaluate.evaluator import EvalOptions, Evaluation
from d2kbench.evaluate.result import WorkloadResult
from d2kbench.evaluate.workers import WorkerFault
from tests.conftest import StandInCandidate


@pytest.fixture
def evaluation(toy_task, monkeypatch):
    ev = Evaluation(toy_task, toy_task.expert_path, EvalOptions(device="cpu"))
    monkeypatch.setattr(timing_guards, "gpu_lock", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(ev, "start_candidate", lambda spawned=None: True)  # the replacement: not under test
    yield ev
    ev.cand = None
    ev.close()


@pytest.mark.parametrize("reply", [
    {"outputs": "z.bin", "inputs": [], "findings": {}},
    {"outputs": [], "inputs": [], "findings": None},
    {"outputs": [], "findings": {}},
    {"outputs": [], "inputs": [], "findings": {"out_of_bounds": 3}},  # the interpreter's record, not a list
])
def test_a_checked_call_whose_reply_is_not_as_sent_is_malformed(evaluation, reply):
    evaluation.cand = StandInCandidate(reply)
    with pytest.raises(WorkerFault) as caught:
        evaluation.checked_call(evaluation.task.workload("n200"), WorkloadResult("n200", "scored"), 0, 0)
    assert caught.value.stopped_by == "malformed_result" and evaluation.cand.killed


@pytest.mark.parametrize("reply,validate", [
    ({"times_ms": "fast"}, False),
    ({"times_ms": [0.1, "0.1"]}, False),
    ({"times_ms": [0.1], "outputs": [], "inputs": {}}, True),
    ({"times_ms": [0.1], "outputs": {"999999": []}, "inputs": {"999999": []}}, True),  # a slot never sent
])
def test_a_timed_batch_whose_reply_is_not_as_sent_is_malformed(evaluation, reply, validate):
    evaluation.cand = StandInCandidate(reply)
    wr = WorkloadResult("n200", "scored")
    assert evaluation.timed_batch(evaluation.task.workload("n200"), wr, "candidate", evaluation.cand,
                                  [evaluation.slot_id("n200", 0)], 1, graph=False, validate=validate) is None
    assert (evaluation.result.verdict, evaluation.result.reason) == ("integrity", "malformed_result")
    assert "not as the worker sends them" in evaluation.result.detail


def test_a_result_file_outside_the_spool_is_malformed_not_an_exception(evaluation, tmp_path):
    evaluation.cand = StandInCandidate({})
    evaluation.cand.spool = tmp_path
    desc = {"tensor": "../x.bin", "dtype": "float32", "shape": [1], "strides": [1], "type": "Tensor"}
    with pytest.raises(WorkerFault) as caught:
        evaluation.unpack([desc], evaluation.cand)
    assert caught.value.stopped_by == "malformed_result" and "bad tensor file name" in caught.value.detail
