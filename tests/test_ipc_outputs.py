"""Results device to device (`EvalOptions.device_outputs`): what the workers and the parent do with them, on the
CPU, the driver stood in for. The transfer itself needs a GPU (bench/gpu_owed.sh runs it on the H200)."""

import contextlib
import os
import threading
import types

import pytest
import torch

from d2kbench.evaluate import channel, ipc, timing_guards, worker
from d2kbench.evaluate.channel import ProtocolError
from d2kbench.evaluate.evaluator import EvalOptions, Evaluation
from d2kbench.evaluate.result import WorkloadResult
from d2kbench.evaluate.transfer import Held
from d2kbench.evaluate.workers import WorkerFault
from tests.conftest import StandInCandidate

RESULT = {"dtype": "float32", "shape": [2, 3], "strides": [3, 1], "type": "Tensor", "ipc": "ab" * 64,
          "nbytes": 24, "result": True}
INPUT = {k: v for k, v in RESULT.items() if k != "result"}


@pytest.fixture
def evaluation(toy_task, tmp_path, monkeypatch):
    ev = Evaluation(toy_task, toy_task.expert_path, EvalOptions(device="cpu"))
    opened, paused_at = [], []  # check_size per block opened; how many were open when the candidate was stopped

    @contextlib.contextmanager
    def paused():
        paused_at.append(len(opened))
        yield

    def import_clone(desc, device, check_size=False):
        opened.append(check_size)
        return torch.full([int(n) for n in desc["shape"]], 1.0)

    monkeypatch.setattr(ipc, "import_clone", import_clone)
    ev.trusted = types.SimpleNamespace(spool=tmp_path, role="trusted")
    ev.cand = types.SimpleNamespace(spool=tmp_path, role="candidate", sandbox=None, alive=True, paused=paused,
                                    kill=lambda: None)
    ev.opened, ev.paused_at = opened, paused_at
    yield ev
    ev.trusted = ev.cand = None
    ev.close()


def test_results_are_cloned_at_once_and_the_candidates_blocks_checked_for_size(evaluation):
    evaluation.export_outputs = True
    assert torch.equal(evaluation.unpack([RESULT], evaluation.trusted)[0], torch.ones(2, 3))
    assert torch.equal(evaluation.unpack([RESULT], evaluation.cand)[0], torch.ones(2, 3))
    assert evaluation.opened == [False, True]  # the candidate's block must hold what its description claims
    assert evaluation.paused_at == [1]  # its worker stopped before its block was opened: it cannot free it meanwhile
    assert evaluation.export_flag() == {"export_results": True}


def test_the_parent_opens_no_handle_it_did_not_ask_for(evaluation):
    """A device handle from the candidate's worker that was not asked for, or one that claims to be an input, is
    a result the parent cannot read as described: the worker is replaced and the verdict says so."""
    with pytest.raises(WorkerFault) as caught:
        evaluation.unpack([RESULT], evaluation.cand)
    assert caught.value.stopped_by == "malformed_result" and "not asked for" in caught.value.detail
    evaluation.export_outputs = True
    with pytest.raises(WorkerFault, match="an input's device handle"):
        evaluation.unpack([INPUT], evaluation.cand)
    assert evaluation.opened == []
    # the trusted worker's held inputs stay descriptions, and no worker's input handle is opened here
    held = {k: v for k, v in INPUT.items() if k not in ("ipc", "nbytes")} | {"held": True}
    assert evaluation.unpack([held], evaluation.trusted, inputs=True) == [Held(held)]
    with pytest.raises(ProtocolError, match="trusted worker sent an input's device handle"):
        evaluation.unpack([INPUT], evaluation.trusted, inputs=True)
    with pytest.raises(WorkerFault, match="held input"):
        evaluation.unpack([held], evaluation.cand)
    assert evaluation.opened == []


class ProbeWorker:
    alive = True

    def __init__(self, role, sent=None, error=None):
        self.role, self.sent, self.error = role, sent, error

    def request(self, message, timeout=None):
        assert message["op"] == "ipc_probe"
        if self.error:
            raise RuntimeError(self.error)
        return {"input": INPUT, "sum": 6 if self.sent is None else self.sent}


@pytest.mark.parametrize("cand,on,why", [
    (ProbeWorker("candidate"), True, None),
    (ProbeWorker("candidate", sent=7), False, "arrived changed"),
    (ProbeWorker("candidate", error="cuIpcOpenMemHandle failed (CUresult 201)"), False, "could not import"),
])
def test_the_route_is_checked_with_a_probe_from_each_worker_first(evaluation, cand, on, why):
    evaluation.trusted = ProbeWorker("trusted")
    evaluation.export_outputs = True
    assert evaluation.check_device_outputs(cand) is cand
    assert evaluation.export_outputs is on
    said = evaluation.result.environment["device_outputs"]
    assert said == "on" if on else (said.startswith("off (files instead)") and why in said)
    evaluation.trusted = types.SimpleNamespace(spool=None)


def test_device_outputs_stay_off_without_a_gpu(toy_task):
    ev = Evaluation(toy_task, toy_task.expert_path, EvalOptions(device="cpu", device_outputs=True))
    try:
        assert not ev.export_outputs and ev.export_flag() == {}
    finally:
        ev.close()


def test_a_worker_frees_the_blocks_of_its_last_reply_at_the_next_request(tmp_path, monkeypatch):
    """The serve loop, in this process: a request asking for exported results, then any other request."""
    freed, exported = [], []

    def export_copy(value, owned=None):
        owned.append(1000 + len(exported))
        exported.append(value)
        return {"ipc": "x", "nbytes": 0}

    monkeypatch.setattr(ipc, "export_copy", export_copy)
    monkeypatch.setattr(ipc, "free_blocks", lambda owned: (freed.append(list(owned)), owned.clear()))
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))  # stands in for a GPU tensor
    w = worker.Worker("trusted", tmp_path, "cpu")
    w.exporting = True
    assert w.pack(torch.ones(3)) == {"ipc": "x", "nbytes": 0, "result": True}
    assert w.pack(2.5) == {"scalar": 2.5} and w.parent_blocks == [1000] and w.stages_s["pack"] > 0

    to_worker, from_parent = os.pipe()
    from_worker, to_parent = os.pipe()
    monkeypatch.setattr(worker, "Worker", lambda role, spool, device: w)
    server = threading.Thread(target=worker.serve, args=("trusted", to_worker, to_parent, tmp_path, "cpu"))
    server.start()
    try:
        assert channel.read_message(from_worker)["ready"]
        channel.write_message(from_parent, {"op": "drop", "slots": [], "id": "a"})
        reply = channel.read_message(from_worker)
        assert reply["ok"] and freed == [[1000]] and w.parent_blocks == [] and not w.exporting
    finally:
        os.close(from_parent)
        server.join(10)
        for fd in (to_worker, from_worker, to_parent):
            os.close(fd)


@pytest.mark.parametrize("on", [True, False])
def test_requests_that_return_results_ask_for_them_exported_only_when_the_route_is_on(toy_task, monkeypatch, on):
    ev = Evaluation(toy_task, toy_task.expert_path, EvalOptions(device="cpu"))
    ev.export_outputs = on
    ev.cand = cand = StandInCandidate()  # its replies are unreadable: each call ends as malformed_result
    monkeypatch.setattr(timing_guards, "gpu_lock", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(ev, "start_candidate", lambda spawned=None: True)
    workload = ev.task.workload("n200")
    try:
        with pytest.raises(WorkerFault):
            ev.checked_call(workload, WorkloadResult("n200", "scored"), 0, 0)
        ev.timed_batch(workload, WorkloadResult("n200", "scored"), "candidate", ev.cand, [0], 1, graph=False,
                       validate=True)
    finally:
        ev.cand = None
        ev.close()
    assert [m["op"] for m in cand.sent] == ["call", "time"]
    assert all(m.get("export_results", False) is on for m in cand.sent)
