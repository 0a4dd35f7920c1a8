"""What an evaluation needs of a card, recorded per worker (`Evaluation.record_memory`, `Worker.memory`): on an 80 GB
H100 attention's evaluation ran out of memory (docs/perf/evaluator.md), and these figures size that."""

import types

import pytest
import torch

from d2kbench.evaluate.evaluator import EvalOptions, Evaluation
from d2kbench.evaluate.result import InfraError
from d2kbench.evaluate.transfer import Held
from d2kbench.evaluate.worker import Worker
from d2kbench.evaluate.workers import RequestFailed, WorkerFault
from tests.conftest import StandInCandidate

GB = 2**30


def test_each_live_workers_memory_is_recorded_in_gb_and_a_failing_one_is_left_out(toy_task):
    ev = Evaluation(toy_task, toy_task.expert_path, EvalOptions(device="cpu", seed=7))
    try:
        trusted = StandInCandidate({"peak_reserved": 50 * GB, "exported": 27 * GB, "total": 80 * GB})
        trusted.role = "trusted"
        cand = StandInCandidate({"peak_reserved": 3 * GB // 2, "exported": 0, "total": 80 * GB})
        ev.record_memory([cand, trusted])
        assert ev.result.environment["gpu_memory_gb"] == {
            "candidate_peak_reserved": 1.5, "candidate_exported": 0.0, "trusted_peak_reserved": 50.0,
            "trusted_exported": 27.0, "device_total": 80.0}
        assert [m["op"] for m in trusted.sent] == ["memory"]

        def hung(message, timeout=None):
            raise WorkerFault("timeout", "no reply within 5 s")

        ev.result.environment.clear()
        cand.request = hung
        gone = StandInCandidate({"peak_reserved": GB})
        gone.role, gone.alive = "trusted", False  # a worker that died is not asked
        ev.record_memory([cand, gone])
        assert "gpu_memory_gb" not in ev.result.environment and gone.sent == []
    finally:
        ev.close()


def test_a_worker_reports_its_allocator_peak_and_what_it_exported(tmp_path, monkeypatch):
    worker = Worker("trusted", tmp_path, "cpu")
    assert worker.memory({}) == {}  # nothing to say on a CPU
    worker.device = torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device: 7 * GB)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 5 * GB)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: types.SimpleNamespace(total_memory=80 * GB))
    worker.lending.held_bytes = 3 * GB
    assert worker.memory({}) == {"peak_reserved": 7 * GB, "reserved": 5 * GB, "exported": 3 * GB, "total": 80 * GB}


def test_a_comparator_batch_keeps_the_prepared_inputs_of_its_own_slots_only(tmp_path):
    """A task's comparator_prepare may copy a whole set (attention gathers its KV): the slots of earlier rounds'
    fresh sets must not each keep one."""
    worker = Worker("trusted", tmp_path, "cpu")
    prepared = []
    worker.reference_module = types.SimpleNamespace(comparator_prepare=lambda x: prepared.append(x) or (x * 2,))
    worker.functions["comparator"] = lambda x: x + 1
    for slot in (1, 2, 3):
        worker._store(slot, [torch.full((4,), float(slot))])
    worker.time({"fn": "comparator", "slots": [1, 2], "reps": 3, "warmup": 1})
    assert set(worker.prepared) == {1, 2}
    worker.time({"fn": "comparator", "slots": [2, 3], "reps": 3, "warmup": 1})
    assert set(worker.prepared) == {2, 3} and len(prepared) == 3  # slot 2's kept, slot 1's dropped
    assert torch.equal(worker.prepared[3][0], torch.full((4,), 6.0))


def out_of_memory_evaluation(toy_task, trusted_reply: dict) -> Evaluation:
    """An evaluation on a stand-in GPU whose candidate's worker holds workload n200's three sets of 4 GiB held
    tensors each (the parent's count: 24 GiB with their pristine copies)."""
    ev = Evaluation(toy_task, toy_task.expert_path, EvalOptions(device="cpu", seed=7))
    ev.gpu = True
    ev.trusted = StandInCandidate(trusted_reply)
    ev.trusted.role = "trusted"
    ev.cand = StandInCandidate()
    held = Held({"dtype": "float32", "shape": [GB], "strides": [1], "type": "Tensor", "held": True})
    ev.inputs["n200"] = {i: [held, 2.5] for i in range(4)}
    ev.slot_set["n200"] = {0: 3, 1: 1, 2: 2}
    ev.resident.add("n200")
    return ev


def out_of_memory() -> RequestFailed:
    failed = RequestFailed({"error": "OutOfMemoryError", "message": "CUDA out of memory", "out_of_memory": True})
    failed.stopped_by = "out_of_memory"
    return failed


def test_an_out_of_memory_the_harness_fills_the_card_for_is_infra(toy_task):
    """The candidate's worker ran out of GPU memory while the trusted worker (its own report) and the sets the
    parent put there (its own count) take 90% of the card or more: no candidate could have passed, so the verdict
    is the card's, never a crash of the candidate's."""
    ev = out_of_memory_evaluation(toy_task, {"reserved": 40 * GB, "exported": 10 * GB, "total": 80 * GB})
    try:
        assert ev.candidate_input_bytes() == 24 * GB
        with pytest.raises(InfraError, match=r"holds 74.0 of the card's 80.0 GiB") as caught:
            ev.candidate_fault(out_of_memory(), toy_task.workload("n200"))
        assert caught.value.reason == "device_memory"
    finally:
        ev.trusted = ev.cand = None
        ev.close()


def test_an_out_of_memory_with_room_left_by_the_harness_is_the_candidates(toy_task):
    ev = out_of_memory_evaluation(toy_task, {"reserved": 20 * GB, "exported": 5 * GB, "total": 80 * GB})
    try:
        failure = ev.candidate_fault(out_of_memory(), toy_task.workload("n200"))
        assert (failure.verdict, failure.reason) == ("crash", "out_of_memory")
        assert "ran out of GPU memory" in failure.detail and "holds 49.0 of the card's 80.0 GiB" in failure.detail
        ev.trusted.reply = {}  # a trusted worker that cannot say: the candidate's verdict, the share unknown
        failure = ev.candidate_fault(out_of_memory(), toy_task.workload("n200"))
        assert failure.reason == "out_of_memory" and "share of the card is unknown" in failure.detail
    finally:
        ev.trusted = ev.cand = None
        ev.close()
