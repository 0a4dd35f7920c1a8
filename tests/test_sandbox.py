"""The candidate's sandbox: planted escapes are stopped with their named verdicts, experts still pass.

Candidates that could hurt the test process if the sandbox failed (killing the evaluator, a fork
bomb, 64 GB) run behind an evaluator of their own in a subprocess, and only where the mechanism that
stops them is active on this machine.
"""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from d2kbench.evaluate import sandbox
from d2kbench.evaluate.evaluator import EvalOptions, evaluate
from d2kbench.evaluate.result import VERDICTS
from tests.conftest import FIXTURES, HANG_TIMEOUT_S, PLANTED, ROOT

SMALL = ("n77_f16",)  # the fixture's smallest workload


def options(**kw) -> EvalOptions:
    return EvalOptions(device="cpu", call_timeout_s=20, **kw)


@pytest.fixture(scope="module")
def expert_result(toy_task):
    return evaluate(toy_task, toy_task.expert_path, options())


@pytest.fixture(scope="module")
def active(expert_result) -> set[str]:
    """The mechanisms that the sandbox could apply on this machine (names without their notes)."""
    return {a.split(" ")[0] for a in expert_result.environment["sandbox"]["active"]}


def needs(active: set[str], *mechanisms: str) -> None:
    missing = set(mechanisms) - active
    if missing:
        pytest.skip(f"this machine lacks {sorted(missing)}")


def evaluate_in_subprocess(candidate: Path, workloads: tuple[str, ...] = SMALL, call_timeout_s: float = 20) -> dict:
    """Evaluate behind a sacrificial evaluator process; its JSON result."""
    code = (
        "import json, sys; from pathlib import Path; from d2kbench.suite import load_task; "
        "from d2kbench.evaluate.evaluator import EvalOptions, evaluate; "
        f"r = evaluate(load_task(Path({str(FIXTURES / 'toy_axpy')!r})), {str(candidate)!r}, "
        f"EvalOptions(device='cpu', call_timeout_s={call_timeout_s}, workloads={workloads!r})); "
        "print(json.dumps(r.to_json()))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, f"the evaluator process died ({proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(proc.stdout.splitlines()[-1])


def test_expert_passes_in_the_sandbox_and_the_result_says_what_was_active(expert_result):
    assert expert_result.verdict == "pass", expert_result.detail
    status = expert_result.environment["sandbox"]
    assert set(status) >= {"active", "missing"}
    names = {a.split(" ")[0] for a in status["active"]} | set(status["missing"])
    assert names == set(sandbox.MECHANISMS)
    assert expert_result.findings == []


def test_sandbox_can_be_switched_off(toy_task):
    result = evaluate(toy_task, toy_task.expert_path, options(sandbox=False, workloads=SMALL))
    assert result.verdict == "pass", result.detail
    assert result.environment["sandbox"] == {"active": [], "disabled": True}


@pytest.mark.parametrize("planted,mechanism,denied", [
    ("sandbox_reads_task_files.py", "landlock", "expert.py"),
    ("sandbox_reads_seed.py", "landlock", "environ"),
    ("sandbox_writes_outside.py", "landlock", "d2k-planted-escape.txt"),
])
def test_file_access_outside_the_sandbox_is_refused(toy_task, active, planted, mechanism, denied):
    needs(active, mechanism)
    result = evaluate(toy_task, PLANTED / planted, options(workloads=SMALL))
    assert (result.verdict, result.reason) == ("error", "sandbox_denied"), result.detail
    assert "PermissionError" in result.detail and denied in result.detail
    assert not Path("/tmp/d2k-planted-escape.txt").exists()
    assert not (ROOT / "src" / "d2kbench" / "planted_escape.txt").exists()


def test_network_is_unreachable(toy_task, active):
    needs(active, "netns")
    listener = socket.socket()
    try:
        listener.bind(("127.0.0.1", 47391))
    except OSError:
        pytest.skip("port 47391 is taken")
    listener.listen(1)
    listener.settimeout(0.5)
    try:
        result = evaluate(toy_task, PLANTED / "sandbox_opens_socket.py", options(workloads=SMALL))
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing ever connected
    finally:
        listener.close()
    assert (result.verdict, result.reason) == ("error", "sandbox_denied"), result.detail
    assert any(f.code == "network" and f.forbidden for f in result.findings)


def test_killing_the_evaluator_is_refused(active):
    needs(active, "uid")
    result = evaluate_in_subprocess(PLANTED / "sandbox_kills_parent.py")
    assert (result["verdict"], result["reason"]) == ("error", "sandbox_denied"), result["detail"]
    assert "Operation not permitted" in result["detail"]


def test_out_of_memory_is_named_and_the_next_workload_runs(active):
    needs(active, "rlimit_memory")
    result = evaluate_in_subprocess(PLANTED / "sandbox_allocates_64gb.py", ("n200", "n77_f16"))
    assert (result["verdict"], result["reason"]) == ("crash", "out_of_memory"), result["detail"]
    first, second = result["workloads"]
    assert first["correct"] is False and "out_of_memory" in first["errors"][0]
    assert second["correct"] is True  # a fresh worker ran the float16 workload


def test_fork_bomb_is_named_killed_whole_and_the_next_workload_runs(active):
    needs(active, "uid")
    result = evaluate_in_subprocess(PLANTED / "sandbox_fork_bomb.py", ("n200", "n77_f16"), HANG_TIMEOUT_S)
    assert (result["verdict"], result["reason"]) == ("crash", "process_limit"), result["detail"]
    first, second = result["workloads"]
    assert first["correct"] is False and second["correct"] is True
    uid = result["environment"]["sandbox"]["uid"]
    assert sandbox.uid_pids(uid) == [], "processes of the fork bomb survived"


def test_kill_all_reaches_processes_that_left_the_process_group(tmp_path):
    """A child that starts its own session escapes killpg; the sandbox's uid and cgroup still reach it."""
    box = sandbox.Sandbox(sandbox.SandboxSettings(), [], "cpu")
    home, spool = tmp_path / "home", tmp_path / "spool"
    home.mkdir()
    spool.mkdir()
    prefix = box.prepare(home, spool)
    if box.uid is None and box.cgroup is None:
        pytest.skip("neither a uid nor a cgroup on this machine")
    plan = json.loads(prefix[3])
    escape = ("import json, os, sys, time; from d2kbench.evaluate import sandbox; "
              "sandbox.enter(sandbox.Plan(**json.loads(sys.argv[1]))); "
              "os.fork() == 0 and (os.setsid(), time.sleep(60)); time.sleep(60)")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-c", escape, json.dumps(plan)], env=env, cwd=home,
                            start_new_session=True)
    try:
        deadline = time.time() + 30
        while len(sandbox.uid_pids(box.uid) if box.uid else []) < 2 and time.time() < deadline:
            time.sleep(0.1)
        assert box.uid is None or len(sandbox.uid_pids(box.uid)) == 2
        uid, cgroup = box.uid, box.cgroup
        box.kill_all()
        proc.wait(timeout=10)
        if uid is not None:
            assert sandbox.uid_pids(uid) == []
        box.release()
        assert cgroup is None or not cgroup.exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_cpu_time_limit_is_named(toy_task, active, monkeypatch):
    """A worker past its CPU seconds (torch's import counts too) is killed by SIGXCPU: timeout/cpu_time_limit."""
    needs(active, "rlimit_cpu")
    monkeypatch.setattr("d2kbench.evaluate.evaluator.SandboxSettings",
                        lambda: sandbox.SandboxSettings(cpu_seconds=8))
    result = evaluate(toy_task, PLANTED / "infinite_loop.py", EvalOptions(device="cpu", call_timeout_s=120,
                                                                           workloads=SMALL))
    assert (result.verdict, result.reason) == ("timeout", "cpu_time_limit"), result.detail
    assert "SIGXCPU" in result.detail


@pytest.mark.parametrize("planted,verdict,reason", [
    ("segfault.py", "crash", "worker_died"),
    ("infinite_loop.py", "timeout", "call_timeout"),
])
def test_faults_still_get_their_verdicts_in_the_sandbox(toy_task, planted, verdict, reason):
    result = evaluate(toy_task, PLANTED / planted, EvalOptions(device="cpu", call_timeout_s=HANG_TIMEOUT_S,
                                                               workloads=SMALL))
    assert (result.verdict, result.reason) == (verdict, reason), result.detail
    assert result.environment["sandbox"]["active"]


# The soak: a mix of good, cheating and crashing candidates, each with exactly one verdict.
SOAK_MIX = [
    (FIXTURES / "toy_axpy" / "expert.py", "pass", None),
    (PLANTED / "wrong_values.py", "incorrect", "mismatch"),
    (PLANTED / "stale_by_shape.py", "integrity", "stale_output"),
    (PLANTED / "torch_does_work.py", "integrity", "aten_op"),
    (PLANTED / "static_patches_torch.py", "integrity", "forbidden_code"),
    (PLANTED / "raises.py", "error", "exception"),
    (PLANTED / "sandbox_reads_task_files.py", "error", "sandbox_denied"),
    (PLANTED / "segfault.py", "crash", "worker_died"),
]


SOAK_EVALS = int(os.environ.get("D2K_SOAK_EVALS", "8"))


@pytest.mark.timeout(120 + 30 * SOAK_EVALS)
def test_soak(toy_task, tmp_path):
    """D2K_SOAK_EVALS evaluations (default 8, once round the mix, for CI's time; the issue's soak is 200:
    `D2K_SOAK_EVALS=200 pytest tests/test_sandbox.py -k soak`) in rotation over the mix.

    Each result is appended to a JSONL record as it comes; the record must hold exactly one line per
    evaluation, in order, each with the verdict its candidate deserves.
    """
    record = tmp_path / "soak.jsonl"
    for i in range(SOAK_EVALS):
        candidate, _, _ = SOAK_MIX[i % len(SOAK_MIX)]
        result = evaluate(toy_task, candidate, options(workloads=SMALL))
        with record.open("a") as f:
            f.write(json.dumps({"i": i, "candidate": candidate.name, **result.to_json()}) + "\n")
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [line["i"] for line in lines] == list(range(SOAK_EVALS))
    for line in lines:
        _, verdict, reason = SOAK_MIX[line["i"] % len(SOAK_MIX)]
        assert line["verdict"] in VERDICTS
        assert (line["verdict"], line["reason"]) == (verdict, reason), \
            f"evaluation {line['i']} ({line['candidate']}): {line['detail']}"


PROFILED_CHILD = '''
import json, os, socket, sys
from d2kbench.evaluate import sandbox
status = sandbox.enter(sandbox.Plan(**json.loads(sys.argv[1])))
port = int(sys.argv[2])
out = {"status": status, "netns": os.readlink("/proc/self/ns/net")}
server = socket.socket()
server.bind(("127.0.0.1", port))
server.listen(1)
print("listening", flush=True)
conn, _ = server.accept()
out["got"] = conn.recv(16).decode()
try:
    socket.socket().bind(("127.0.0.1", port + 1))
    out["other_port"] = "bound"
except OSError as exc:
    out["other_port"] = exc.errno
print(json.dumps(out), flush=True)
'''
FRONT_END = '''
import json, os, socket, subprocess, sys
from d2kbench.evaluate import sandbox
plan, port, child = sys.argv[1], int(sys.argv[2]), sys.argv[3]
proc = subprocess.Popen([sys.executable, child, plan, str(port)], stdout=subprocess.PIPE, text=True)
assert proc.stdout.readline().strip() == "listening"
with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
    conn.sendall(b"hello")
out = json.loads(proc.stdout.readline())
out["front_netns"], out["front_interfaces"] = os.readlink("/proc/self/ns/net"), sandbox._interfaces()
print(json.dumps(out))
'''


def plan_of(box: sandbox.Sandbox, tmp_path: Path) -> str:
    """`box` prepared for folders under `tmp_path`: the JSON plan its child enters."""
    (tmp_path / "home").mkdir()
    (tmp_path / "spool").mkdir()
    return box.prepare(tmp_path / "home", tmp_path / "spool")[3]


def entered(box: sandbox.Sandbox, tmp_path: Path, report: str):
    """Enter `box`'s plan in a fresh Python and return `report` (an expression over the status `s`), as JSON."""
    plan = plan_of(box, tmp_path)
    code = ("import json, os, resource, sys; from d2kbench.evaluate import sandbox; "
            "s = sandbox.enter(sandbox.Plan(**json.loads(sys.argv[1]))); "
            f"print(json.dumps({report}))")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    try:
        proc = subprocess.run([sys.executable, "-c", code, plan], capture_output=True, text=True, env=env, timeout=60)
    finally:
        box.release()
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


def run_profiled(tmp_path: Path, command_prefix: list[str], port: int) -> dict:
    """A stand-in for ncu: a front end that reaches a sandboxed child on a loopback port."""
    box = sandbox.Sandbox(sandbox.SandboxSettings(), [], "cpu", profiler_ports=[port])
    plan = plan_of(box, tmp_path)
    (tmp_path / "child.py").write_text(PROFILED_CHILD)
    (tmp_path / "front.py").write_text(FRONT_END)
    os.chmod(tmp_path, 0o755)
    os.chmod(tmp_path / "child.py", 0o644)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    try:
        proc = subprocess.run([*command_prefix, sys.executable, str(tmp_path / "front.py"), plan, str(port),
                               str(tmp_path / "child.py")], capture_output=True, text=True, env=env, timeout=60)
    finally:
        box.release()
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_profiler_reaches_the_sandboxed_process_on_loopback_alone(tmp_path, active):
    needs(active, "netns")
    loopback = [sys.executable, "-m", "d2kbench.evaluate.sandbox", "--loopback-netns", "--"]
    out = run_profiled(tmp_path, loopback, 49152)
    assert out["got"] == "hello"  # the front end reached the confined child over loopback TCP
    assert out["netns"] == out["front_netns"] != os.readlink("/proc/self/ns/net")
    assert out["front_interfaces"] == ["lo"]  # a namespace of their own: no network beyond the two of them
    assert "netns (the profiler's: loopback only)" in out["status"]["active"]
    landlock = [a for a in out["status"]["active"] if a.startswith("landlock")]
    if landlock and "TCP only to the profiler's ports 49152-49152" in landlock[0]:
        assert out["other_port"] == 13  # EACCES: every other port stays closed


def test_under_a_profiler_a_namespace_with_a_network_is_still_left(tmp_path, active):
    needs(active, "netns")
    if sandbox._interfaces() == ["lo"]:
        pytest.skip("this machine's namespace has loopback alone")
    box = sandbox.Sandbox(sandbox.SandboxSettings(), [], "cpu", profiler_ports=[49152])
    active_now, netns, interfaces = entered(
        box, tmp_path, "[s['active'], os.readlink('/proc/self/ns/net'), sandbox._interfaces()]")
    assert netns != os.readlink("/proc/self/ns/net") and interfaces == ["lo"]
    assert any(a.startswith("netns (fresh: the parent's namespace has") for a in active_now)


def test_a_diagnosis_can_leave_a_mechanism_out_and_the_status_says_so(tmp_path):
    box = sandbox.Sandbox(sandbox.SandboxSettings(), [], "cpu", skip=["landlock", "rlimit_cpu"])
    status, cpu_limit = entered(box, tmp_path, "[s, resource.getrlimit(resource.RLIMIT_CPU)[0]]")
    assert status["missing"]["landlock"] == status["missing"]["rlimit_cpu"] == "left out for a diagnosis"
    assert cpu_limit != sandbox.SandboxSettings().cpu_seconds  # the limit was not set
    assert not any(a.startswith(("landlock", "rlimit_cpu")) for a in status["active"])


def test_a_folder_can_be_opened_to_landlock_wholly_or_to_reading_only(tmp_path, active):
    """`ro:` opens a folder to reading, a task folder inside it still hidden (the ncu sandbox opens ncu's install
    folders so); a bare path opens it wholly (diagnoses only)."""
    needs(active, "landlock")
    opened = tmp_path / "opened"
    (opened / "task").mkdir(parents=True)
    for path, text in ((opened / "f.txt", "seen"), (opened / "task" / "reference.py", "secret")):
        path.write_text(text)
        os.chmod(path, 0o666)
    for folder in (tmp_path, opened, opened / "task"):
        os.chmod(folder, 0o777)

    def attempt(grant: str, where: Path) -> list[str]:
        """Read, then append to, a file under `opened`, then read the task's file, sandboxed with `grant`."""
        box = sandbox.Sandbox(sandbox.SandboxSettings(), [opened / "task"], "cpu", grant=[grant])
        plan = plan_of(box, where)
        code = ("import json, sys; from d2kbench.evaluate import sandbox; "
                "sandbox.enter(sandbox.Plan(**json.loads(sys.argv[1])))\n"
                "def attempt(what):\n"
                "    try:\n        return what()\n"
                "    except PermissionError:\n        return 'denied'\n"
                "print(json.dumps([attempt(lambda: open(sys.argv[2]).read()), "
                "attempt(lambda: open(sys.argv[2], 'a').write('x') and 'written'), "
                "attempt(lambda: open(sys.argv[3]).read())]))")
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        try:
            proc = subprocess.run([sys.executable, "-c", code, plan, str(opened / "f.txt"),
                                   str(opened / "task" / "reference.py")],
                                  capture_output=True, text=True, env=env, timeout=60)
        finally:
            box.release()
        assert proc.returncode == 0, proc.stderr[-2000:]
        return json.loads(proc.stdout.splitlines()[-1])

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert attempt(f"ro:{opened}", tmp_path / "a") == ["seen", "denied", "denied"]
    assert attempt(str(opened), tmp_path / "b") == ["seen", "written", "secret"]
