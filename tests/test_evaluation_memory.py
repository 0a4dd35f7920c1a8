"""What an evaluation needs of a card, recorded per worker (`Evaluation.record_memory`, `Worker.memory`): on an 80 GB
H100 attention's evaluation ran out of memory (docs/perf/evaluator.md), and these figures size that."""

import types

import torch

from d2kbench.evaluate.evaluator import EvalOptions, Evaluation
from d2kbench.evaluate.worker import Worker
from d2kbench.evaluate.workers import WorkerFault
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
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: types.SimpleNamespace(total_memory=80 * GB))
    worker.lending.held_bytes = 3 * GB
    assert worker.memory({}) == {"peak_reserved": 7 * GB, "exported": 3 * GB, "total": 80 * GB}


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
