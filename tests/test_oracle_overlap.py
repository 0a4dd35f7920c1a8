"""The oracle's outputs are worked out on a thread of their own while the candidate's checked calls run
(`Evaluation.prepare_workload`): real workers on the CPU, the toy task."""

import threading
import time

from d2kbench.evaluate import correctness_phase
from d2kbench.evaluate.evaluator import EvalOptions, Evaluation, InfraError, evaluate
from d2kbench.evaluate.workers import WorkerProcess

SLOW_S = 0.3  # each oracle call made this much slower, so that the overlap cannot be a matter of luck


def test_the_candidates_checked_calls_run_beside_the_oracle(toy_task, monkeypatch):
    log: list[tuple[str, str, float]] = []
    lock = threading.Lock()
    oracle, checked = Evaluation.set_oracle, Evaluation.checked_call

    def slow_oracle(self, workload, i):
        time.sleep(SLOW_S)
        oracle(self, workload, i)
        with lock:
            log.append(("oracle done", threading.current_thread().name, time.perf_counter()))

    def logged_call(self, workload, wr, slot, expected_set, **kwargs):
        with lock:
            log.append(("call", threading.current_thread().name, time.perf_counter()))
        return checked(self, workload, wr, slot, expected_set, **kwargs)

    monkeypatch.setattr(Evaluation, "set_oracle", slow_oracle)
    monkeypatch.setattr(Evaluation, "checked_call", logged_call)
    result = evaluate(toy_task, toy_task.expert_path, EvalOptions(device="cpu", workloads=("n200",)))
    assert result.verdict == "pass", result.detail
    oracles = [entry for entry in log if entry[0] == "oracle done"]
    calls = [entry for entry in log if entry[0] == "call"]
    assert len(oracles) == toy_task.correctness_sets + 1
    assert all(name.startswith(correctness_phase.ORACLE_THREAD) for _, name, _ in oracles)
    assert not any(name.startswith(correctness_phase.ORACLE_THREAD) for _, name, _ in calls)
    assert calls[0][2] < oracles[-1][2]  # the first checked call did not wait for the last set's oracle


def test_an_oracle_that_fails_is_infra_never_the_candidates_fault(toy_task, monkeypatch):
    oracle = Evaluation.set_oracle

    def failing_oracle(self, workload, i):
        if i == 1:
            raise InfraError("the trusted worker failed on call: planted")
        oracle(self, workload, i)

    monkeypatch.setattr(Evaluation, "set_oracle", failing_oracle)
    result = evaluate(toy_task, toy_task.expert_path, EvalOptions(device="cpu", workloads=("n200",)))
    assert (result.verdict, result.reason) == ("infra", "harness_error")
    assert "planted" in result.detail


def test_the_trusted_worker_waits_for_the_oracle_thread(toy_task, monkeypatch):
    """A request to the trusted worker from the evaluation's own thread (the reference's error, the timing's
    fresh sets) waits until the oracle calls still running have ended: one request at a time on its channel."""
    oracle, send = Evaluation.set_oracle, WorkerProcess.request
    in_oracle = threading.Event()
    sent: list[tuple[str, bool]] = []  # the trusted worker's requests from other threads: (what, an oracle busy)

    def slow_oracle(self, workload, i):
        in_oracle.set()
        time.sleep(SLOW_S)
        oracle(self, workload, i)
        in_oracle.clear()

    def watched(self, message, timeout):
        if self.role == "trusted" and not threading.current_thread().name.startswith(correctness_phase.ORACLE_THREAD):
            sent.append((f"{message.get('op')}:{message.get('fn', '')}", in_oracle.is_set()))
        return send(self, message, timeout)

    monkeypatch.setattr(Evaluation, "set_oracle", slow_oracle)
    monkeypatch.setattr(WorkerProcess, "request", watched)
    options = EvalOptions(device="cpu", workloads=("n200",), reference_error=True)
    result = evaluate(toy_task, toy_task.expert_path, options)
    assert result.verdict == "pass", result.detail
    assert ("call:reference", False) in sent  # the reference's error, asked while the checks ran
    assert not [what for what, busy in sent if busy]
