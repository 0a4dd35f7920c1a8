"""The parent's wall clock against the candidate's own timer (`Evaluation.check_unaccounted_time`): timing runs
inside the candidate's process, so a timer patched there could report less than the calls took; the time it
hides shows up as wall time that neither the reported kernel times nor the baselines' overhead explain."""

import contextlib
import time

import pytest

from d2kbench.evaluate import timing_guards
from d2kbench.evaluate.evaluator import EvalOptions, Evaluation
from d2kbench.evaluate.result import Timing, WorkloadResult
from d2kbench.evaluate.timing_guards import unaccounted_ms
from d2kbench.evaluate.timing_phase import WARMUP_CALLS


def batch(call_ms: float, reported_ms: float, reps: int, overhead_ms: float) -> tuple[float, list[float], int]:
    """A batch as the parent sees it: `reps` timed calls and the warm-up calls, each taking `call_ms` plus
    `overhead_ms` (flush, head start, launches) of wall time, the worker reporting `reported_ms` per call."""
    wall = (reps + WARMUP_CALLS) * call_ms + reps * overhead_ms
    return wall, [reported_ms] * reps, WARMUP_CALLS


def test_unaccounted_time_is_the_wall_less_the_reported_calls_and_warm_ups():
    assert unaccounted_ms([batch(2.0, 2.0, 50, 0.3)]) == pytest.approx(0.3)
    assert unaccounted_ms([batch(2.0, 1.0, 50, 0.3)]) == pytest.approx(0.3 + 1.0 * (50 + 3) / 50)
    # batches of different lengths are pooled per call, not averaged per batch
    assert unaccounted_ms([batch(1.0, 1.0, 10, 0.2), batch(1.0, 1.0, 90, 0.4)]) == pytest.approx(0.38)


@pytest.fixture
def evaluation(toy_task):
    ev = Evaluation(toy_task, toy_task.expert_path, EvalOptions(device="cpu"))
    yield ev
    ev.close()


def judged(ev: Evaluation, call_ms: float, reported_ms: float, reference_ms: float = 1.0) -> WorkloadResult:
    """check_unaccounted_time over four rounds in which the reference reports truly and the candidate
    reports `reported_ms` for calls of `call_ms`; both with the same 0.3 ms of overhead per call."""
    reps = max(5, min(200, int(100 / call_ms)))
    ev.batch_walls = {"reference": [batch(reference_ms, reference_ms, 100, 0.3)] * 4,
                      "candidate": [batch(call_ms, reported_ms, reps, 0.3)] * 4}
    wr = WorkloadResult("n200", "scored")
    wr.timings = {fn: Timing(ms, ms, ms, 4 * reps) for fn, ms in (("candidate", reported_ms),
                                                                   ("reference", reference_ms))}
    ev.check_unaccounted_time(ev.task.workload("n200"), wr)
    return wr


@pytest.mark.parametrize("call_ms", [0.005, 0.05, 0.5, 5.0, 40.0])
def test_a_truthful_candidate_is_never_flagged_whatever_its_speed(evaluation, call_ms):
    wr = judged(evaluation, call_ms, call_ms)
    assert evaluation.result.verdict == "pass"
    assert wr.unaccounted_ms == {"reference": pytest.approx(0.3), "candidate": pytest.approx(0.3)}


@pytest.mark.parametrize("call_ms,factor,caught", [
    (1.0, 2.0, True),     # half of a 1 ms kernel hidden
    (20.0, 1.6, True),
    (1.0, 1.5, True),     # a third of a 1 ms kernel hidden
    (1.0, 1.2, False),    # under 25% of the reported time: within what the check allows
    (0.12, 3.0, False),   # 0.08 ms hidden: below HIDDEN_MIN_MS, the physical floor's to catch
])
def test_a_timer_that_under_reports_leaves_wall_time_unaccounted(evaluation, call_ms, factor, caught):
    judged(evaluation, call_ms, call_ms / factor)
    if caught:
        assert (evaluation.result.verdict, evaluation.result.reason) == ("integrity", "patched_timer")
        assert "more wall time than its reported kernel time" in evaluation.result.detail
    else:
        assert evaluation.result.verdict == "pass"


def test_the_baselines_largest_overhead_is_the_bar(evaluation):
    """An expert or comparator with more overhead per call than the reference raises what the candidate may
    show, never lowers it."""
    evaluation.batch_walls = {"reference": [batch(1.0, 1.0, 100, 0.3)], "expert": [batch(1.0, 1.0, 100, 1.0)],
                              "candidate": [batch(1.0, 0.55, 100, 0.3)]}
    wr = WorkloadResult("n200", "scored")
    wr.timings = {"candidate": Timing(0.55, 0.55, 0.55, 100)}
    evaluation.check_unaccounted_time(evaluation.task.workload("n200"), wr)
    assert evaluation.result.verdict == "pass" and wr.unaccounted_ms["expert"] == pytest.approx(1.0)


def test_the_parent_times_each_batch_itself_and_leaves_out_validated_ones(evaluation, monkeypatch):
    """The wall time is the parent's clock around the request, whatever the worker replies."""
    monkeypatch.setattr(timing_guards, "gpu_lock", lambda device: contextlib.nullcontext())

    def slow_request(message, timeout=None):
        time.sleep(0.05)
        return {"times_ms": [0.001] * message["reps"], "outputs": {}, "inputs": {}}

    evaluation.cand = type("Worker", (), {"request": staticmethod(slow_request), "spool": evaluation.spool})()
    wr = WorkloadResult("n200", "scored")
    try:
        for validate in (False, True):
            assert evaluation.timed_batch(evaluation.task.workload("n200"), wr, "candidate", evaluation.cand, [0], 5,
                                          graph=False, validate=validate) is not None
    finally:
        evaluation.cand = None  # a stand-in: nothing to close
    [(request_ms, times, warmups)] = evaluation.batch_walls["candidate"]
    assert request_ms >= 50 and times == [0.001] * 5 and warmups == WARMUP_CALLS

