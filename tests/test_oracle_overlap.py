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
    fresh sets) waits until the oracle calls still running have ended: one request at a time on its channel.
    The last set's oracle call is held until the reference's request has been asked; that request must reach
    the worker only after the held oracle call has had its reply."""
    oracle, send, ask = Evaluation.set_oracle, WorkerProcess.request, Evaluation.trusted_request
    last_set = toy_task.correctness_sets  # its oracle call is the one still running when the checks end
    held, released = threading.Event(), threading.Event()
    events: list[str] = []
    lock = threading.Lock()

    def note(event):
        with lock:
            events.append(event)

    def on_oracle_thread():
        return threading.current_thread().name.startswith(correctness_phase.ORACLE_THREAD)

    def held_oracle(self, workload, i):
        if i == last_set:
            held.set()
            assert released.wait(30), "the held oracle call was never released"
            note("oracle released")
        oracle(self, workload, i)
        note(f"oracle {i} done")

    def asked(self, message, timeout=None):
        if not on_oracle_thread() and message.get("fn") == "reference":
            assert held.wait(30), "the last set's oracle call never started"
            note("reference asked")
            threading.Timer(SLOW_S, released.set).start()  # let the oracle go on a while after the asking
        return ask(self, message, timeout)

    def watched(self, message, timeout):
        if self.role == "trusted" and message.get("op") == "call":
            note(f"oracle {message['slot'] % 1000} sent" if on_oracle_thread() else f"{message['fn']} sent")
        return send(self, message, timeout)

    monkeypatch.setattr(Evaluation, "set_oracle", held_oracle)
    monkeypatch.setattr(Evaluation, "trusted_request", asked)
    monkeypatch.setattr(WorkerProcess, "request", watched)
    options = EvalOptions(device="cpu", workloads=("n200",), reference_error=True)
    try:
        result = evaluate(toy_task, toy_task.expert_path, options)
    finally:
        released.set()
    assert result.verdict == "pass", result.detail
    assert events.count("reference asked") == events.count("reference sent") == 1, events
    assert events.index("reference asked") < events.index("oracle released"), events  # asked while one was held
    # forwarded only after the held oracle call had its reply
    assert events.index("oracle released") < events.index(f"oracle {last_set} sent") \
        < events.index(f"oracle {last_set} done") < events.index("reference sent"), events
    # every oracle call of the workload had ended before the reference went
    after = events[: events.index("reference sent")]
    assert all(f"oracle {i} done" in after for i in range(last_set + 1)), events
