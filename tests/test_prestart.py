"""Workers started ahead for the next evaluation (`EvalOptions.prestart`): the next evaluation of the same task in
the same thread takes them, loads its own candidate into them, and leaves no process or folder behind."""

import shutil
import threading

import pytest

from d2kbench.evaluate.evaluator import EvalOptions, evaluate
from d2kbench.evaluate.prestart import PRESTARTED
from d2kbench.suite import load_task
from tests.conftest import FIXTURES, PLANTED

PRESTART = EvalOptions(device="cpu", prestart=True)


@pytest.fixture
def pool():
    PRESTARTED.discard()
    yield PRESTARTED
    PRESTARTED.discard()


def waiting(pool) -> list:
    """Every worker waiting in the pool, of any thread and key."""
    return [w for pair in pool.pairs.values() for w in pair.values()]


def gone(workers) -> bool:
    """Every worker dead, its folders and its log removed."""
    return all(not w.alive and not w.home.exists() and not w.spool.exists() and not w.log_path.exists()
               for w in workers)


def test_the_next_evaluation_takes_the_pair_the_last_one_started(toy_task, pool):
    first = evaluate(toy_task, toy_task.expert_path, PRESTART)
    assert first.verdict == "pass" and "prestarted" not in first.environment
    first_pair = waiting(pool)
    assert sorted(w.role for w in first_pair) == ["candidate", "trusted"] and all(w.alive for w in first_pair)
    second = evaluate(toy_task, PLANTED / "wrong_values.py", PRESTART)
    assert second.environment["prestarted"] == ["trusted", "candidate"]
    assert (second.verdict, second.reason) == ("incorrect", "mismatch")  # its own candidate, in a fresh worker
    assert gone(first_pair)  # used, closed, cleaned up
    third = evaluate(toy_task, toy_task.expert_path, PRESTART)
    assert third.verdict == "pass" and third.environment["prestarted"] == ["trusted", "candidate"]
    last = waiting(pool)
    pool.discard()
    assert gone(last) and pool.work is None


def test_pairs_wait_per_task_and_the_oldest_beyond_the_limit_is_killed(toy_task, pool, tmp_path, monkeypatch):
    """Agents that share a device interleave tasks: each task's pair waits for it, up to PAIRS_PER_THREAD."""
    from d2kbench.evaluate import prestart

    other = load_task(shutil.copytree(FIXTURES / "toy_axpy", tmp_path / "toy_axpy"))
    evaluate(toy_task, toy_task.expert_path, PRESTART)
    toy_pair = waiting(pool)
    result = evaluate(other, other.expert_path, PRESTART)
    assert result.verdict == "pass" and "prestarted" not in result.environment  # the toy's pair is not its
    assert all(w.alive for w in toy_pair) and len(waiting(pool)) == 4
    assert evaluate(toy_task, toy_task.expert_path, PRESTART).environment["prestarted"] == ["trusted", "candidate"]
    monkeypatch.setattr(prestart, "PAIRS_PER_THREAD", 1)
    other_pair = [w for (_, key), pair in pool.pairs.items() if str(other.path) in key for w in pair.values()]
    assert len(other_pair) == 2 and all(w.alive for w in other_pair)
    assert evaluate(toy_task, toy_task.expert_path, PRESTART).verdict == "pass"
    assert gone(other_pair) and len(waiting(pool)) == 2  # the other task's pair was the oldest: killed


def test_a_pair_started_in_another_thread_is_not_taken(toy_task, pool):
    """Pairs belong to the thread that started them (a worker started as a fresh interpreter dies with that thread:
    `die_with_parent`): another thread must not take them, and the next start kills those of a thread that ended."""
    started = []

    def evaluate_and_keep_pair():
        evaluate(toy_task, toy_task.expert_path, PRESTART)
        started.extend(waiting(pool))

    thread = threading.Thread(target=evaluate_and_keep_pair)
    thread.start()
    thread.join()
    assert len(started) == 2
    result = evaluate(toy_task, toy_task.expert_path, PRESTART)
    assert result.verdict == "pass" and "prestarted" not in result.environment
    assert gone(started)  # the ended thread's pair, cleaned up
    assert {thread for thread, _ in pool.pairs} == {threading.get_ident()}


def test_without_prestart_nothing_is_started_ahead(toy_task, pool):
    assert evaluate(toy_task, toy_task.expert_path, EvalOptions(device="cpu")).verdict == "pass"
    assert not pool.pairs and pool.work is None
