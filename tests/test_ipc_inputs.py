"""Input sets device to device (CUDA IPC): what the parent does with them, on the CPU. The transfer itself
needs a GPU: bench/diag/ipc_inputs.py and bench/diag/cuda_ipc_probe.py run it on the H200."""

import types

import pytest
import torch

from d2kbench.evaluate import ipc
from d2kbench.evaluate.channel import ProtocolError
from d2kbench.evaluate.evaluator import EvalOptions, Evaluation, derive_seed
from d2kbench.evaluate.result import InfraError
from d2kbench.evaluate.transfer import Held, shape_of

DESC = {"dtype": "float16", "shape": [4, 8], "strides": [8, 1], "type": "Tensor", "ipc": "ab" * 64, "nbytes": 64}


def test_an_exported_description_that_does_not_add_up_is_refused_before_the_driver():
    with pytest.raises(ProtocolError, match="cannot have shape"):
        ipc.import_clone({**DESC, "nbytes": 65}, "cuda:0")
    with pytest.raises(ProtocolError, match="bad IPC handle"):
        ipc.import_clone({**DESC, "ipc": "not hex"}, "cuda:0")
    assert ipc.is_exported(DESC) and not ipc.is_exported({"tensor": "x.bin"})


HELD = {"dtype": "float16", "shape": [4, 8], "strides": [8, 1], "type": "Tensor", "held": True}


@pytest.fixture
def evaluation(toy_task, tmp_path):
    ev = Evaluation(toy_task, toy_task.expert_path, EvalOptions(device="cpu", seed=7))
    ev.trusted = types.SimpleNamespace(spool=tmp_path, requests=[])
    ev.cand = types.SimpleNamespace(spool=tmp_path, sandbox=None)
    yield ev
    ev.trusted = ev.cand = None
    ev.close()


def lending_trusted(evaluation):
    """A stand-in trusted worker that answers `lend` with one lend per slot, numbered, and records requests."""

    def request(message, timeout=None):
        evaluation.trusted.requests.append(message)
        base = 10 * len(evaluation.trusted.requests)
        return {"lends": [{"id": base + k, "inputs": [{**DESC, "ipc": f"{slot:02x}" * 64}, None]}
                          for k, slot in enumerate(message["slots"])]}

    evaluation.trusted.request = request
    evaluation.slot_bases["n200"] = 0
    evaluation.inputs = {"n200": {i: [Held(HELD), 2.5] for i in range(4)}}
    return evaluation.trusted.requests


def test_held_inputs_reach_the_candidate_only_by_a_lend(evaluation):
    """The parent never holds the bytes: the trusted worker describes what it keeps, and lends a copy for the
    candidate's worker when a request of the candidate's needs it; the other values travel as always."""
    values = evaluation.unpack([HELD, {"scalar": 2.5}], evaluation.trusted, inputs=True)
    assert values == [Held(HELD), 2.5] and shape_of(values[0]) == (4, 8) and shape_of(2.5) is None
    with pytest.raises(TypeError, match="hand_over"):
        evaluation.pack(values, evaluation.cand)
    sent = lending_trusted(evaluation)
    assert evaluation.hand_over("n200", 2) == [{**DESC, "ipc": "02" * 64}, {"scalar": 2.5}]
    assert evaluation.hand_over("n200", 2) == [{**DESC, "ipc": "02" * 64}, {"scalar": 2.5}]  # lent once
    assert sent == [{"op": "lend", "slots": [2], "release": []}]
    assert not evaluation.input_files  # nothing to link


def test_lends_go_back_with_the_next_request_that_lends_or_drops(evaluation):
    """A round lends its sets in one request, which takes back the lends of the round before: the trusted worker's
    blocks hold the sets in use only."""
    sent = lending_trusted(evaluation)
    evaluation.lend_sets("n200", [1, 3])
    assert sent[-1] == {"op": "lend", "slots": [1, 3], "release": []}
    assert set(evaluation.lends) == {("n200", 1), ("n200", 3)}
    evaluation.return_lends("n200")
    evaluation.lend_sets("n200", [0, 3])
    assert sent[-1] == {"op": "lend", "slots": [0, 3], "release": [10, 11]}  # the ids the first request lent
    evaluation.lend_sets("n200", [0, 3])  # lent already: nothing asked
    assert len(sent) == 2
    evaluation.return_lends("n200")
    evaluation.trusted.alive = True
    evaluation.cand = None
    evaluation.drop(types.SimpleNamespace(name="n200"), keep_results=True)
    assert sent[-1]["op"] == "drop" and sent[-1]["release"] == [20, 21]
    assert evaluation.inputs["n200"] and not evaluation.lends and not evaluation.returned_lends
    evaluation.drop(types.SimpleNamespace(name="n200"))
    assert "n200" not in evaluation.inputs


def test_a_replaced_trusted_worker_makes_held_sets_again_from_their_seeds(evaluation):
    """The held tensors and their lends die with the worker: the new one makes the same inputs (same seed), which
    must come out the same; no lend of the old worker's is sent back to the new one."""
    def request(message, timeout=None):
        evaluation.trusted.requests.append(message)
        return {"inputs": [HELD], "fingerprints": [41]}

    evaluation.trusted.request = request
    evaluation.export_inputs = True
    evaluation.slot_bases["n200"] = 0
    evaluation.inputs = {"n200": {0: [Held(HELD)], 1: [Held(HELD)]}, "n64": {0: [Held(HELD)]}}
    evaluation.resident = {"n200"}  # n64's sets were dropped after its correctness: its timing makes them again
    evaluation.fingerprints = {("n200", 0): [41]}  # set 1's first making is this one
    evaluation.lends = {("n200", 0): (5, [DESC])}
    evaluation.returned_lends = [4]
    evaluation.restore_trusted_slots()
    sent = evaluation.trusted.requests
    assert [m["op"] for m in sent] == ["make_inputs", "make_inputs"] and all(m["export"] for m in sent)
    assert [m["seed"] for m in sent] == [derive_seed(7, "n200", 0), derive_seed(7, "n200", 1)]
    assert all(m["release"] == [] and not m["lend"] for m in sent)
    assert evaluation.inputs["n200"] == {0: [Held(HELD)], 1: [Held(HELD)]} and not evaluation.lends
    assert all(m["workload"]["name"] == "n200" for m in sent)

    evaluation.fingerprints[("n200", 1)] = [42]
    with pytest.raises(InfraError, match="make_inputs made a different input set 1 of workload n200"):
        evaluation.restore_trusted_slots()


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


def cpu_lending(monkeypatch):
    """An `InputLending` whose blocks are numbered stand-ins and whose export records what it copied, CPU tensors
    standing in for GPU ones."""
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    addresses = iter(range(100, 1000))
    copied = []

    def exporter(value, pointer):
        copied.append((pointer, value.clone()))
        return {"ipc": str(pointer), "nbytes": value.numel() * value.element_size()}

    return ipc.InputLending(allocator=lambda nbytes: next(addresses), exporter=exporter), copied


def test_lent_blocks_take_later_sets_once_taken_back(monkeypatch):
    lending, copied = cpu_lending(monkeypatch)
    big, small = torch.ones(256, dtype=torch.float32), torch.ones(16, dtype=torch.float32)
    first = lending.lend([big, small, 2.5])
    assert first["inputs"][2] is None and [p for p, _ in copied] == [100, 101] and lending.held_bytes == 1088
    second = lending.lend([small])  # the first lend is still out: a new block
    assert second["inputs"][0]["ipc"] == "102" and lending.held_bytes == 1152
    lending.release([first["id"]])
    third = lending.lend([small, small, small])  # the smallest free blocks that hold it: 64, then 1024 bytes
    assert [d["ipc"] for d in third["inputs"]] == ["101", "100", "103"] and lending.held_bytes == 1216
    with pytest.raises(KeyError, match="no outstanding lends"):
        lending.release([first["id"]])  # taken back already
    assert torch.equal(copied[-1][1], small) and third["inputs"][0]["nbytes"] == 64


def test_a_trusted_worker_lends_written_inputs_as_they_were_made(tmp_path, monkeypatch):
    """The reference and the expert write the slot's own copy of a written input when timed: the candidate's
    worker must get the input as made, from the pristine copy."""
    from d2kbench.evaluate.worker import Worker

    lending, copied = cpu_lending(monkeypatch)
    w = Worker("trusted", tmp_path, "cpu")
    w.lending, w.written = lending, (1,)
    w._store(5, [torch.zeros(4), torch.arange(4.0), 3])
    w.slots[5][1].fill_(-1.0)  # a timed call wrote it
    w.slots[5][0].fill_(7.0)  # not a written input: lent as it is
    reply = w.lend({"slots": [5], "release": []})
    assert [d is None for d in reply["lends"][0]["inputs"]] == [False, False, True]
    assert torch.equal(copied[0][1], torch.full((4,), 7.0)) and torch.equal(copied[1][1], torch.arange(4.0))
    w.take_back({"op": "drop", "slots": [5], "release": [reply["lends"][0]["id"]]})  # as the serve loop does
    w.drop({"slots": [5]})
    assert lending.lent == {} and len(lending.free) == 2 and 5 not in w.slots


def test_a_fingerprint_changes_with_the_bytes_and_their_order():
    from d2kbench.evaluate.worker import fingerprint

    x = torch.randn(1000)
    assert fingerprint(x) == fingerprint(x.clone()) and fingerprint(2.5) is None
    assert fingerprint(x) != fingerprint(x.flip(0))
    nudged = x.clone()
    nudged[500] = torch.nextafter(nudged[500], torch.tensor(10.0))
    assert fingerprint(x) != fingerprint(nudged)
    odd = torch.arange(7, dtype=torch.uint8)  # an odd byte count: read as bytes
    assert fingerprint(odd) != fingerprint(odd.flip(0)) and fingerprint(torch.empty(0)) == fingerprint(torch.empty(0))
