import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
PLANTED = ROOT / "tests" / "planted"
# The call limit where a planted candidate hangs: the whole limit is spent, and the toy's calls take milliseconds
HANG_TIMEOUT_S = 6.0

# Tests run kernels through Triton's interpreter on the CPU, whatever the machine has.
os.environ.setdefault("D2K_TEST_DEVICE", "cpu")

# The folder of this run's sm_90 compile reports, shared by its xdist workers (they inherit the variable)
COMPILE_REPORTS = "D2K_TEST_COMPILE_REPORTS"


def pytest_configure(config):
    if "PYTEST_XDIST_WORKER" not in os.environ:  # the controller, or a run without workers
        os.environ[COMPILE_REPORTS] = tempfile.mkdtemp(prefix="d2k-compile-reports-")


def pytest_unconfigure(config):
    if "PYTEST_XDIST_WORKER" not in os.environ:
        folder = os.environ.pop(COMPILE_REPORTS, None)
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def compiled_once(source: Path, parts: list, compile_it: Callable[[], Any]) -> Any:
    """`compile_it()`'s report, as JSON reads it back, made once per run for the same `source` text and `parts`
    (Triton, task, workload): several tests check what the shipped experts, or identical variants, compile to,
    and the sm_90 compiles are most of the suite's time."""
    key = hashlib.sha256(json.dumps([hashlib.sha256(source.read_bytes()).hexdigest(), *parts]).encode()).hexdigest()
    folder = os.environ.get(COMPILE_REPORTS)
    path = Path(folder) / f"{key}.json" if folder else None
    if path is not None and path.exists():
        return json.loads(path.read_text())
    text = json.dumps(compile_it())
    if path is not None:
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(text)
        os.replace(partial, path)  # whole or absent: the other worker may compile the same at the same time
    return json.loads(text)


@pytest.fixture
def toy_copy(tmp_path):
    """A copy of the toy task folder, to break or change."""
    dst = tmp_path / "toy_axpy"
    shutil.copytree(FIXTURES / "toy_axpy", dst)
    return dst


@pytest.fixture(scope="session")
def toy_task():
    from d2kbench.suite import load_task

    return load_task(FIXTURES / "toy_axpy")


class StandInCandidate:
    """The candidate's worker as the parent sees it, without a process: every request is recorded in `sent` and
    answered with `reply` (plus ok)."""

    role, alive, spool, sandbox = "candidate", True, None, None

    def __init__(self, reply: dict | None = None):
        self.reply, self.sent, self.killed, self.spent = reply or {}, [], False, {}

    def request(self, message, timeout=None):
        self.sent.append(message)
        return {"ok": True, **self.reply}

    def kill(self):
        self.killed, self.alive = True, False

    def log_tail(self):
        return ""


@contextmanager
def started_evaluation(task, **options) -> Iterator:
    """An evaluation on the CPU of the task's expert with its trusted and candidate workers started, closed after."""
    from d2kbench.evaluate.evaluator import EvalOptions, Evaluation

    ev = Evaluation(task, task.expert_path, EvalOptions(device="cpu", **options))
    try:
        ev.start_trusted(ev.spawn("trusted"))
        assert ev.start_candidate(ev.spawn("candidate"))
        yield ev
    finally:
        ev.close()


def stand_in_timing(ev, monkeypatch, timed_batch, rotate=lambda workload, slots: True) -> None:
    """What `Evaluation.time_workload` calls, stood in for: a quiet GPU, no timer check or scoring, the rotation
    and the timed batches answered by `rotate` and `timed_batch`, the fresh set made as a placeholder and its
    put recorded by a stand-in candidate (`ev.cand.sent`); no worker process is asked anything."""
    ev.cand = StandInCandidate()
    for w in ev.task.workloads:  # the sets the checks made, as placeholders
        ev.inputs[w.name] = {i: [f"set {i}"] for i in range(ev.task.correctness_sets + 1)}
        ev.resident.add(w.name)
    monkeypatch.setattr(ev, "make_set", lambda workload, i, oracle=True, lend=False: ev.inputs.setdefault(
        workload.name, {}).update({i: [f"set {i}"]}))
    monkeypatch.setattr(ev, "pack", lambda values, worker: list(values))
    monkeypatch.setattr(ev, "gpu_uncontended", lambda workload, wr: True)
    monkeypatch.setattr(ev, "check_unaccounted_time", lambda workload, wr: None)
    monkeypatch.setattr(ev, "score_workload", lambda workload, wr: None)
    monkeypatch.setattr(ev, "rotate_candidate_slots", rotate)
    monkeypatch.setattr(ev, "timed_batch", timed_batch)


# Spills measured and accepted on the H200: muon's symmetric products capped at 128 registers (two programs per SM)
# spill 36 B, 432 B in the launch that also writes P_0, and still ran 4-11% faster than uncapped without spills
# (bench/results/2026-12-04-h200-sweep-17, calls 1-2); their wide tiles (8192x28672) spill 412-508 B in the two
# launches that write P_0 alone and ran 10% faster end to end (bench/results/2026-12-04-h200-owed-18 call6); the
# band tiles (the 4096 shapes', the batch's) compile to the wide path's registers and stay within the same bound.
# Any other spill fails.
ACCEPTED_SPILLS = {("muon_newton_schulz", "_sym_gemm_kernel"): 512}
