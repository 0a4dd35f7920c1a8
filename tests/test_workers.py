"""Worker mechanics the GPU timing relies on, checked on the CPU: in-place rotation of input sets
and pausing a worker's process group."""

import os
import select
import subprocess
import sys
import time

import pytest
import torch

from d2kbench.evaluate import channel
from d2kbench.evaluate.worker import Worker
from d2kbench.evaluate.workers import WorkerProcess
from tests.conftest import ROOT


def test_rotate_moves_input_sets_between_slots_in_place(tmp_path):
    worker = Worker("candidate", tmp_path, "cpu")
    sets = {slot: [torch.full((4,), float(slot)), torch.arange(3) + slot, 0.5 * slot] for slot in (10, 11, 12)}
    for slot, values in sets.items():
        worker._store(slot, values)
    addresses = {slot: [v.data_ptr() for v in worker.slots[slot][:2]] for slot in sets}
    worker.rotate({"slots": [10, 11, 12]})
    for slot, source in ((10, 11), (11, 12), (12, 10)):
        values = worker.slots[slot]
        assert [v.data_ptr() for v in values[:2]] == addresses[slot]  # the same addresses
        assert torch.equal(values[0], torch.full((4,), float(source)))
        assert torch.equal(values[1], torch.arange(3) + source)
        assert values[2] == 0.5 * source
        assert worker._mutated(slot, values) == []  # the pristine copies follow the new contents


def test_mutated_names_the_changed_inputs_only(tmp_path):
    worker = Worker("candidate", tmp_path, "cpu")
    worker.written = (1,)
    values = [torch.zeros(5), torch.zeros(5), torch.zeros(5)]
    worker._store(0, values)
    values[1].add_(1)  # declared as written: allowed
    values[2][3] = -0.0  # a different bit pattern is a change
    assert worker._mutated(0, values) == [2]


def test_a_paused_worker_answers_only_after_it_is_resumed(tmp_path):
    worker = WorkerProcess("trusted", "cpu", tmp_path, tmp_path, {"PATH": "/usr/bin:/bin"})
    try:
        worker.wait_ready()
        with worker.paused():
            channel.write_message(worker.fd_req, {"op": "drop", "slots": [], "id": "r1"})
            ready, _, _ = select.select([worker.fd_rep], [], [], 1.0)
            assert not ready  # stopped: no reply
            start = time.monotonic()
        assert channel.read_message(worker.fd_rep) == {"ok": True, "id": "r1"}
        assert time.monotonic() - start < 30
    finally:
        worker.close()


@pytest.mark.parametrize("sandboxed", [False, True])
def test_workers_die_with_the_evaluator_even_on_sigkill(tmp_path, sandboxed):
    """An orphaned busy worker would keep the GPU busy and slow every later measurement on it.

    The worker is busy (a load that never ends), so it never reads the closed request pipe."""
    busy = tmp_path / "busy.py"
    busy.write_text("import time\ntime.sleep(600)\n")
    script = (
        "import time\n"
        "from pathlib import Path\n"
        "from d2kbench.evaluate import channel\n"
        "from d2kbench.evaluate.sandbox import Sandbox, SandboxSettings\n"
        "from d2kbench.evaluate.workers import WorkerProcess\n"
        f"box = Sandbox(SandboxSettings(), [], 'cpu') if {sandboxed} else None\n"
        f"w = WorkerProcess('candidate', 'cpu', Path({str(tmp_path)!r}), Path({str(tmp_path)!r}), "
        "{'PATH': '/usr/bin:/bin'}, box)\n"
        "busy = w.stage(Path(" + repr(str(busy)) + "))\n"
        "w.wait_ready()\n"
        "channel.write_message(w.fd_req, {'op': 'load', 'path': str(busy), 'written': []})\n"
        "print(w.proc.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        worker_pid = int(parent.stdout.readline())
        os.kill(worker_pid, 0)  # alive while the evaluator is
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(worker_pid):
            time.sleep(0.05)
        assert not _alive(worker_pid), "the worker outlived its evaluator"
    finally:
        parent.kill()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"  # a zombie awaiting its reaper is dead
    except FileNotFoundError:
        return False


def test_the_copy_probe_answers_a_bandwidth(tmp_path):
    """The contention probe the evaluator runs beside its GPU timings (here on the CPU, by wall clock)."""
    worker = WorkerProcess("trusted", "cpu", tmp_path, tmp_path, {"PATH": "/usr/bin:/bin"})
    try:
        first = worker.request({"op": "probe"}, 60)["copy_bytes_per_s"]
        second = worker.request({"op": "probe"}, 60)["copy_bytes_per_s"]
    finally:
        worker.close()
    assert 1e8 < first < 1e12 and 1e8 < second < 1e12  # a memory copy on any CPU: 0.1 GB/s to 1 TB/s


def test_the_copy_probe_waits_for_a_rate_it_does_not_reach_then_answers(tmp_path):
    """`min_rate`: probe again until the GPU is quiet or `wait_s` has passed (the evaluator's drain)."""
    worker = WorkerProcess("trusted", "cpu", tmp_path, tmp_path, {"PATH": "/usr/bin:/bin"})
    try:
        unreachable = worker.request({"op": "probe", "min_rate": 1e18, "wait_s": 0.5}, 60)
        reached = worker.request({"op": "probe", "min_rate": 1.0, "wait_s": 30}, 60)
    finally:
        worker.close()
    assert unreachable["waited_s"] >= 0.5 and 1e8 < unreachable["copy_bytes_per_s"] < 1e12
    assert reached["waited_s"] == 0.0  # reached at the first probe


def test_a_worker_that_will_not_exit_after_sigkill_does_not_hang_the_evaluation(tmp_path, capsys):
    """A process stuck in the driver (an endless GPU kernel being torn down) ignores SIGKILL for a while."""
    worker = WorkerProcess("trusted", "cpu", tmp_path, tmp_path, {"PATH": "/usr/bin:/bin"})
    worker.wait_ready()
    real_wait = worker.proc.wait

    def stuck(timeout=None):
        raise subprocess.TimeoutExpired(worker.proc.args, timeout)

    worker.proc.wait = stuck
    start = time.monotonic()
    worker.kill()
    assert time.monotonic() - start < 5
    assert "did not exit 30 s after SIGKILL" in capsys.readouterr().err
    assert worker.fd_req == -1 and worker.fd_rep == -1
    real_wait(timeout=10)  # it was killed all the same


def test_asked_to_exit_a_worker_leaves_by_itself(tmp_path):
    """`ask_exit` does not wait (the evaluator asks both workers before waiting for either); the worker exits
    cleanly without the interpreter's teardown."""
    worker = WorkerProcess("trusted", "cpu", tmp_path, tmp_path, {"PATH": "/usr/bin:/bin"})
    try:
        worker.wait_ready()
        assert worker.request({"op": "drop", "slots": []}, 30)["ok"]
        worker.ask_exit()
        assert worker.proc.wait(timeout=30) == 0  # it left on its own: the parent only waited
        worker.ask_exit()  # asked again: nothing to write to, no error
    finally:
        worker.close()
    assert worker.fd_req == -1


def test_the_candidate_worker_pays_torchs_lazy_imports_before_its_hello(tmp_path):
    """torch imports torch._dynamo on the first op under a dispatch mode (the op guard): 4-5 s on the H200, which
    was the candidate's first checked call. The candidate worker takes it before its hello (`warm_op_guard`): a
    candidate file loaded by a real candidate worker finds torch._dynamo imported already; a fresh process with
    torch and the worker module imported does not have it (so it is the warm-up that imported it)."""
    seen = tmp_path / "seen.txt"
    candidate = tmp_path / "candidate.py"
    candidate.write_text(
        "import sys\n"
        "from pathlib import Path\n"
        f"Path({str(seen)!r}).write_text(str('torch._dynamo' in sys.modules))\n"
        "def run(x):\n"
        "    return x\n"
    )
    worker = WorkerProcess("candidate", "cpu", tmp_path, tmp_path, {"PATH": "/usr/bin:/bin"})
    try:
        worker.request({"op": "load", "path": str(worker.stage(candidate)), "written": []}, 120)
    finally:
        worker.close()
    assert seen.read_text() == "True"
    code = "import sys, torch, d2kbench.evaluate.worker; print('torch._dynamo' in sys.modules)"
    src = str(ROOT / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH", "")]))}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False"]
