"""Workers forked from a server with torch imported: each is what a fresh interpreter would be (its folders,
environment, session and sandbox), its exit status is its own, and nothing outlives the evaluator."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from d2kbench.evaluate import forkserver
from d2kbench.evaluate.evaluator import EvalOptions, evaluate
from d2kbench.evaluate.workers import WorkerProcess
from tests.conftest import ROOT

ENV = {"PATH": "/usr/bin:/bin"}

# A candidate that passes only where its worker is set up as a fresh one would be: its working directory its home,
# its temporary files in its own folder (a server's cached /tmp would be refused by the sandbox), a session of its
# own.
CHECKS = """
import os
import tempfile


def run(x, y, alpha):
    assert os.getcwd() == os.environ["HOME"], (os.getcwd(), os.environ["HOME"])
    assert tempfile.gettempdir() == os.environ["TMPDIR"], (tempfile.gettempdir(), os.environ["TMPDIR"])
    with tempfile.NamedTemporaryFile() as f:
        f.write(b"ok")
    assert os.getsid(0) == os.getpid() == os.getpgid(0)
    return expert_run(x, y, alpha)
"""


def fresh_candidate(toy_task, tmp_path):
    """The toy's expert as `expert_run`, called by CHECKS' `run`."""
    candidate = tmp_path / "fresh.py"
    candidate.write_text(toy_task.expert_path.read_text().replace("def run(", "def expert_run(") + CHECKS)
    return candidate


def gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as f:  # a zombie nobody reaped yet counts as gone
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        time.sleep(0.05)
    return False


def test_a_forked_candidate_runs_in_its_own_folders_session_and_sandbox(toy_task, tmp_path):
    candidate = fresh_candidate(toy_task, tmp_path)
    result = evaluate(toy_task, candidate, EvalOptions(device="cpu", workloads=("n77_f16",)))
    assert result.verdict == "pass", f"{result.reason}: {result.detail}"
    assert forkserver._SERVERS, "the workers were not forked from a server"
    assert any(a.startswith("landlock") or a.startswith("uid") for a in result.environment["sandbox"]["active"]) \
        or os.geteuid() != 0


def test_exit_statuses_are_the_workers_own(tmp_path):
    killed = WorkerProcess("trusted", "cpu", tmp_path, tmp_path, ENV)
    asked = WorkerProcess("trusted", "cpu", tmp_path, tmp_path, ENV)
    alive = WorkerProcess("trusted", "cpu", tmp_path, tmp_path, ENV)
    try:
        assert isinstance(killed.proc, forkserver.ForkedProcess)
        killed.wait_ready()
        asked.wait_ready()
        assert killed.alive and killed.proc.poll() is None
        os.kill(killed.proc.pid, signal.SIGSEGV)
        assert killed.proc.wait(timeout=10) == -signal.SIGSEGV
        asked.ask_exit()
        assert asked.proc.wait(timeout=10) == 0
        with pytest.raises(subprocess.TimeoutExpired):
            alive.proc.wait(timeout=0.2)  # no status yet
        at_once = WorkerProcess("trusted", "cpu", tmp_path, tmp_path, ENV)
        at_once.kill()  # right after its start: its pid names its process group already
        assert at_once.proc.returncode == -signal.SIGKILL
    finally:
        for worker in (killed, asked, alive):
            worker.kill()


def test_a_server_that_died_takes_its_workers_and_is_replaced(tmp_path):
    worker = WorkerProcess("trusted", "cpu", tmp_path, tmp_path, ENV)
    worker.wait_ready()
    server = worker.proc.server
    os.kill(server.proc.pid, signal.SIGKILL)
    assert worker.proc.wait(timeout=10) == -signal.SIGKILL  # PDEATHSIG: no worker outlives its server
    again = WorkerProcess("trusted", "cpu", tmp_path, tmp_path, ENV)
    try:
        again.wait_ready()
        assert again.proc.server is not server and again.alive
    finally:
        again.kill()
        worker.kill()


EVALUATOR = """
import json, sys
from pathlib import Path
from d2kbench.evaluate.workers import WorkerProcess
w = WorkerProcess("trusted", "cpu", Path(sys.argv[1]), Path(sys.argv[1]), {"PATH": "/usr/bin:/bin"})
w.wait_ready()
print(json.dumps({"server": w.proc.server.proc.pid, "worker": w.proc.pid}), flush=True)
sys.stdin.read()
"""


def test_nothing_outlives_an_evaluator_killed_by_sigkill(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-c", EVALUATOR, str(tmp_path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        pids = json.loads(proc.stdout.readline())
        assert not gone(pids["server"], 0.1) and not gone(pids["worker"], 0.1)
        proc.kill()
        proc.wait()
        assert gone(pids["server"]) and gone(pids["worker"])
    finally:
        proc.kill()


def test_one_server_serves_every_test_of_a_process():
    """pytest names the running test in the environment; the workers' environments differ in it alone, and a server
    per test would hold one torch per test (the suite ran out of memory)."""
    env = {**ENV, "PYTHONPATH": str(ROOT / "src")}
    first = forkserver.server_for({**env, "PYTEST_CURRENT_TEST": "a (call)", "HOME": "/tmp/a"})
    assert forkserver.server_for({**env, "PYTEST_CURRENT_TEST": "b (call)", "HOME": "/tmp/b"}) is first
    assert forkserver.server_for({**env, "TRITON_INTERPRET": "1"}) is not first  # what the imports may read


def test_a_process_forked_from_the_evaluator_starts_servers_of_its_own(tmp_path):
    """Its parent's servers answer on sockets the two would share: the child forgets them (and the parent keeps its
    own, working)."""
    worker = WorkerProcess("trusted", "cpu", tmp_path, tmp_path, ENV)
    worker.wait_ready()
    parents = set(forkserver._SERVERS.values())
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a worker of its own, from a server of its own
        ok = False
        try:
            os.close(read)
            child = WorkerProcess("trusted", "cpu", tmp_path, tmp_path, ENV)
            child.wait_ready()
            ok = child.proc.server not in parents and child.alive
            child.kill()
        finally:
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 1) == b"1"
        os.waitpid(pid, 0)
        assert worker.proc.server in parents and not worker.proc.server.closed and worker.alive
        worker.request({"op": "drop", "slots": []}, timeout=30)
    finally:
        os.close(read)
        worker.kill()


def test_without_the_server_a_sandboxed_candidate_starts_as_a_fresh_interpreter(toy_task, tmp_path, monkeypatch):
    """D2K_FORKSERVER=0 (and ncu's workers, and a server that fails): the sandbox's own entry in a new interpreter."""
    monkeypatch.setenv("D2K_FORKSERVER", "0")
    candidate = fresh_candidate(toy_task, tmp_path)
    started = []
    real_popen = subprocess.Popen

    def popen(command, *args, **kwargs):
        started.append(command)
        return real_popen(command, *args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", popen)
    result = evaluate(toy_task, candidate, EvalOptions(device="cpu", workloads=("n77_f16",)))
    assert result.verdict == "pass", f"{result.reason}: {result.detail}"
    assert any(c[1:3] == ["-m", "d2kbench.evaluate.sandbox"] for c in started)  # the candidate
    assert any(c[1:3] == ["-m", "d2kbench.evaluate.worker"] for c in started)  # the trusted worker
