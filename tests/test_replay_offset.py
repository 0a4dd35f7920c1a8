"""Each process replays small kernels a few tenths of a microsecond faster or slower than another; the evaluator
measures both workers' replay probes before the candidate loads and takes the difference off the candidate's
graph-replay time of latency-bound workloads (`Evaluation.measure_replay_offset`, `score_workload`)."""

import contextlib
import dataclasses

import pytest

from d2kbench.evaluate import evaluator
from d2kbench.evaluate.evaluator import REPLAY_OFFSET_CAP_MS, EvalOptions, Evaluation
from d2kbench.evaluate.result import Timing, WorkloadResult
from d2kbench.evaluate.workers import RequestFailed


@pytest.fixture
def evaluation(toy_task, monkeypatch):
    ev = Evaluation(toy_task, toy_task.expert_path, EvalOptions(device="cpu", replay_offset=True))
    ev.ceilings = {"copy_bytes_per_s": 4e12, "bf16_flops_per_s": 7e14}
    monkeypatch.setattr(evaluator, "gpu_lock", lambda device: contextlib.nullcontext())
    yield ev
    ev.close()



class ProbeWorker:
    def __init__(self, ms=None, error=None):
        self.ms, self.error = ms, error

    def request(self, message, timeout=None):
        assert message == {"op": "replay_probe"}
        if self.error:
            raise RequestFailed({"error": "RuntimeError", "message": self.error})
        return {"ms": self.ms}


def probed(ev: Evaluation, monkeypatch, trusted_ms: float, candidate: ProbeWorker) -> float | None:
    monkeypatch.setattr(ev, "trusted_request", lambda message, timeout=None: {"ms": trusted_ms})
    ev.measure_replay_offset(candidate)
    return ev.replay_offset_ms


def scored(ev: Evaluation, latency_bound: bool) -> WorkloadResult:
    workload = dataclasses.replace(ev.task.workload("n200"), latency_bound=latency_bound)
    wr = WorkloadResult(workload.name, "scored")
    wr.timings = {fn: Timing(0.0070, 0.0069, 0.0072, 100, graph_median_ms=0.0060)
                  for fn in ("candidate", "reference", "expert")}
    ev.score_workload(workload, wr)
    return wr


def test_the_candidates_offset_comes_off_its_graph_replay_time(evaluation, monkeypatch):
    assert probed(evaluation, monkeypatch, 0.0048, ProbeWorker(0.0050)) == pytest.approx(0.0002)
    assert evaluation.result.environment["replay_probe_ms"] == {"trusted": [0.0048] * 2, "candidate": [0.0050] * 2}
    wr = scored(evaluation, latency_bound=True)
    assert wr.replay_offset_ms == pytest.approx(0.0002)
    assert wr.fraction_of_expert == pytest.approx(0.0060 / 0.0058)  # the expert's replay against the corrected one
    assert wr.speedup == pytest.approx(0.0060 / 0.0058)


def test_each_workers_fastest_probe_counts(evaluation, monkeypatch):
    """Another evaluation's work beside a probe can only slow it: the offset is taken between the fastest."""
    trusted = iter([0.0049, 0.0047])
    candidate = iter([0.0056, 0.0050])
    monkeypatch.setattr(evaluation, "trusted_request", lambda message, timeout=None: {"ms": next(trusted)})
    evaluation.measure_replay_offset(type("Worker", (), {"request": lambda self, m, t=None: {"ms": next(candidate)}})())
    assert evaluation.replay_offset_ms == pytest.approx(0.0003)
    assert evaluation.result.environment["replay_probe_ms"] == {"trusted": [0.0049, 0.0047],
                                                                "candidate": [0.0056, 0.0050]}


def test_event_timed_workloads_are_left_as_timed(evaluation, monkeypatch):
    probed(evaluation, monkeypatch, 0.0048, ProbeWorker(0.0050))
    wr = scored(evaluation, latency_bound=False)
    assert wr.replay_offset_ms is None and wr.fraction_of_expert == pytest.approx(1.0)


def test_an_offset_past_the_cap_is_not_the_processes_and_nothing_comes_off(evaluation, monkeypatch):
    assert probed(evaluation, monkeypatch, 0.0048, ProbeWorker(0.0048 + 2 * REPLAY_OFFSET_CAP_MS)) is None
    wr = scored(evaluation, latency_bound=True)
    assert wr.replay_offset_ms is None and wr.fraction_of_expert == pytest.approx(1.0)


def test_a_probe_that_fails_is_noted_and_nothing_comes_off(evaluation, monkeypatch):
    assert probed(evaluation, monkeypatch, 0.0048, ProbeWorker(error="no CUDA")) is None
    assert "not measured" in evaluation.result.environment["replay_probe_ms"]
    assert scored(evaluation, latency_bound=True).replay_offset_ms is None


def test_a_replaced_worker_drops_the_offset(evaluation, monkeypatch):
    probed(evaluation, monkeypatch, 0.0048, ProbeWorker(0.0050))
    stand_in = type("Worker", (), {"request": staticmethod(lambda message, timeout=None: {})})()
    monkeypatch.setattr(evaluation, "spawn", lambda role: stand_in)
    evaluation.start_trusted()  # its load request goes to the stand-in: what matters is the offset dropped
    evaluation.trusted = None  # nothing to close
    assert evaluation.replay_offset_ms is None
