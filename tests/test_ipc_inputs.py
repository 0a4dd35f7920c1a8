"""Input sets device to device (CUDA IPC): what the parent does with them, on the CPU. The transfer itself
needs a GPU: bench/diag/ipc_inputs.py and bench/diag/cuda_ipc_probe.py run it on the H200."""

import types

import pytest

from d2kbench.evaluate import ipc
from d2kbench.evaluate.channel import ProtocolError
from d2kbench.evaluate.evaluator import EvalOptions, Evaluation, derive_seed
from d2kbench.evaluate.transfer import Exported, shape_of

DESC = {"dtype": "float16", "shape": [4, 8], "strides": [8, 1], "type": "Tensor", "ipc": "ab" * 64, "nbytes": 64}


def test_an_exported_description_that_does_not_add_up_is_refused_before_the_driver():
    with pytest.raises(ProtocolError, match="cannot have shape"):
        ipc.import_clone({**DESC, "nbytes": 65}, "cuda:0")
    with pytest.raises(ProtocolError, match="bad IPC handle"):
        ipc.import_clone({**DESC, "ipc": "not hex"}, "cuda:0")
    assert ipc.is_exported(DESC) and not ipc.is_exported({"tensor": "x.bin"})


@pytest.fixture
def evaluation(toy_task, tmp_path):
    ev = Evaluation(toy_task, toy_task.expert_path, EvalOptions(device="cpu", seed=7))
    ev.trusted = types.SimpleNamespace(spool=tmp_path, requests=[])
    ev.cand = types.SimpleNamespace(spool=tmp_path, sandbox=None)
    yield ev
    ev.trusted = ev.cand = None
    ev.close()


def test_exported_inputs_reach_the_candidate_as_their_description(evaluation):
    """The parent never holds the bytes: it passes the trusted worker's description on, unchanged."""
    values = evaluation.unpack([DESC, {"scalar": 2.5}], evaluation.trusted, inputs=True)
    assert values == [Exported(DESC), 2.5] and shape_of(values[0]) == (4, 8) and shape_of(2.5) is None
    assert evaluation.pack(values, evaluation.cand) == [DESC, {"scalar": 2.5}]
    assert not evaluation.input_files  # nothing to link


def test_a_replaced_trusted_worker_makes_exported_sets_again_from_their_seeds(evaluation, toy_task):
    """The exported blocks die with the worker: the new one makes the same inputs (same seed) and exports them."""
    fresh = {**DESC, "ipc": "cd" * 64}

    def request(message, timeout=None):
        evaluation.trusted.requests.append(message)
        return {"inputs": [fresh]}

    evaluation.trusted.request = request
    evaluation.export_inputs = True
    evaluation.slot_bases["n200"] = 0
    evaluation.inputs = {"n200": {0: [Exported(DESC)], 1: [Exported(DESC)]}}
    evaluation.restore_trusted_slots()
    sent = evaluation.trusted.requests
    assert [m["op"] for m in sent] == ["make_inputs", "make_inputs"] and all(m["export"] for m in sent)
    assert [m["seed"] for m in sent] == [derive_seed(7, "n200", 0), derive_seed(7, "n200", 1)]
    assert evaluation.inputs["n200"] == {0: [Exported(fresh)], 1: [Exported(fresh)]}


def test_device_inputs_stay_off_without_a_gpu(toy_task):
    ev = Evaluation(toy_task, toy_task.expert_path, EvalOptions(device="cpu", device_inputs=True))
    try:
        assert not ev.export_inputs
    finally:
        ev.close()


class ProbeWorker:
    """A worker that answers the device-to-device probe as told."""

    def __init__(self, answer, alive=True):
        self.answer, self.alive, self.requests, self.killed = answer, alive, [], False

    def request(self, message, timeout=None):
        self.requests.append(message)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer(message)

    def kill(self):
        self.killed = True


def probe_evaluation(evaluation, sent_sum=4242):
    evaluation.export_inputs = True
    evaluation.trusted = ProbeWorker(lambda m: {"input": DESC, "sum": sent_sum})
    return evaluation


def test_device_inputs_are_used_only_when_the_probe_block_arrives_intact(evaluation):
    ev = probe_evaluation(evaluation)
    cand = ProbeWorker(lambda m: {"sum": 4242})
    assert ev.check_device_inputs(cand) is cand
    assert ev.export_inputs and ev.result.environment["device_inputs"] == "on"
    assert cand.requests == [{"op": "ipc_check", "input": DESC}]  # the trusted worker's block, passed on as is

    ev = probe_evaluation(evaluation)
    assert ev.check_device_inputs(ProbeWorker(lambda m: {"sum": 1})) is not None
    assert not ev.export_inputs
    assert ev.result.environment["device_inputs"].startswith("off (files instead): the probe block arrived changed")


def test_a_probe_the_candidates_worker_cannot_import_means_files(evaluation):
    from d2kbench.evaluate.workers import RequestFailed

    ev = probe_evaluation(evaluation)
    failed = RequestFailed({"error": "RuntimeError", "message": "cuIpcOpenMemHandle failed (CUresult 201)"})
    cand = ProbeWorker(failed)
    assert ev.check_device_inputs(cand) is cand and not ev.export_inputs
    assert "CUresult 201" in ev.result.environment["device_inputs"]


def test_a_worker_the_probe_killed_is_replaced_before_the_candidate_loads(evaluation, monkeypatch):
    from d2kbench.evaluate.workers import WorkerFault

    ev = probe_evaluation(evaluation)
    dead = ProbeWorker(WorkerFault("crash", "the worker exited with -11"), alive=False)
    fresh = ProbeWorker(lambda m: {})
    monkeypatch.setattr(ev, "spawn", lambda role: fresh)
    assert ev.check_device_inputs(dead) is fresh and dead.killed and not ev.export_inputs
