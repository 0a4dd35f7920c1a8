"""Workers forked from a server that has imported torch already.

A worker started as a fresh interpreter imports torch before it can answer, and a candidate's worker then imports
torch._dynamo as well (its op guard's first use, `worker.warm_op_guard`): 3-6 s of CPU per evaluation on the
CPU-only machines, most of the test suite's time. A fork server per evaluator process and worker environment pays
those imports once; each worker is a fork of it that then becomes what a fresh interpreter would be: a session
(process group) of its own, its log as stdout and stderr, its working directory and environment, the sandbox
entered (`sandbox.enter`, before any candidate code runs) and the worker's main. The server never initialises CUDA
(a CUDA context does not survive a fork): each worker does, after the fork, as a fresh process does.

The evaluator speaks to a server over a unix socket pair (SOCK_SEQPACKET: one JSON message each, the worker's pipe
ends and log passed beside a spawn request): a spawn is answered with the child's pid, and every child the server
reaps is reported with its wait status, which `ForkedProcess` turns into a returncode as `subprocess.Popen` has
it. The server exits when the evaluator does (it watches its parent), killing its children's process groups.

Profiled workers (ncu must start the process it profiles) and `D2K_FORKSERVER=0` start fresh interpreters.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from d2kbench.evaluate.sandbox import proc_state

# Set per worker (the sandbox's own folders and user), so not part of what a server is started for.
PER_WORKER_ENV = ("HOME", "TMPDIR", "TRITON_CACHE_DIR", "TRITON_HOME", "XDG_CACHE_HOME", "USER", "LOGNAME",
                  "PYTHONPYCACHEPREFIX")
# Changed by the evaluator's host (pytest names each test in it), never read by a worker's imports: a server per
# value would be a server per test.
VOLATILE_ENV = ("PYTEST_CURRENT_TEST",)
START_TIMEOUT_S = 300.0  # the server's imports (torch, torch._dynamo) on a loaded machine
POLL_S = 0.05  # how often the server reaps children and checks its parent
MAX_MESSAGE = 1 << 20


def enabled() -> bool:
    return os.environ.get("D2K_FORKSERVER", "1") != "0"


# -- the evaluator's side ----------------------------------------------------------------------------
class ForkServerError(OSError):
    """The server could not be started or stopped answering."""


class ForkServer:
    """One server process, started for one worker environment (less `PER_WORKER_ENV`)."""

    def __init__(self, env: dict[str, str]):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        server_env = {k: v for k, v in env.items() if k not in PER_WORKER_ENV or k == "PYTHONPYCACHEPREFIX"}
        for key in ("HOME", "TMPDIR", "USER", "LOGNAME"):  # the evaluator's own, not a worker's folder
            if key in os.environ:
                server_env[key] = os.environ[key]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "d2kbench.evaluate.forkserver", str(theirs.fileno()), str(os.getpid())],
            pass_fds=(theirs.fileno(),), env=server_env, cwd="/", stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, start_new_session=True,  # stderr: the evaluator's, for the server's faults
        )
        theirs.close()
        self.lock = threading.Lock()
        self.exited: dict[int, int] = {}  # pid -> wait status, for the children reaped and not yet polled
        self.closed = False
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            message = self._receive(deadline - time.monotonic())
            if message is None:
                self.stop()
                raise ForkServerError(f"the fork server did not start within {START_TIMEOUT_S:.0f} s")
            if message.get("ready"):
                break

    def spawn(self, args: list[str], env: dict[str, str], cwd: str, fd_in: int, fd_out: int, log: int,
              plan: dict[str, Any] | None) -> ForkedProcess:
        """Fork a worker: `args` are the worker's arguments less --fd-in/--fd-out, which it gets for `fd_in` and
        `fd_out` as received; `plan` the sandbox to enter first (`sandbox.Plan` as a dict), or None."""
        request = json.dumps({"args": args, "env": env, "cwd": cwd, "plan": plan}).encode()
        with self.lock:
            try:
                socket.send_fds(self.sock, [request], [fd_in, fd_out, log])
            except OSError as exc:
                self.closed = True
                raise ForkServerError(f"the fork server is gone ({exc})") from None
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                message = self._receive(deadline - time.monotonic())
                if message is None:
                    raise ForkServerError("the fork server did not answer a spawn")
                if "pid" in message:
                    return ForkedProcess(self, int(message["pid"]), args)

    def collect(self, timeout: float) -> None:
        """Take the exit reports that arrive within `timeout` seconds (0: those already there)."""
        with self.lock:
            self._receive(timeout, until_exit=True)

    def _receive(self, timeout: float, until_exit: bool = False) -> dict[str, Any] | None:
        """The next message that is not an exit report (exit reports are recorded on the way), or None at the
        timeout or once the server is gone. With `until_exit`, return once an exit report has come (with those queued
        behind it) or at the timeout."""
        deadline = time.monotonic() + max(timeout, 0.0)
        while not self.closed:
            ready, _, _ = select.select([self.sock], [], [], max(deadline - time.monotonic(), 0.0))
            if not ready:
                return None
            data = self.sock.recv(MAX_MESSAGE)
            if not data:
                self.closed = True
                return None
            message = json.loads(data)
            if "exit" in message:
                self.exited[int(message["exit"])] = int(message["status"])
                if until_exit:
                    deadline = time.monotonic()  # take what is queued, then return
                continue
            return message
        return None

    @property
    def alive(self) -> bool:
        return not self.closed and self.proc.poll() is None

    def stop(self) -> None:
        """Close the socket (the server then kills its children and exits) and wait for it."""
        self.closed = True
        self.sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class ForkedProcess:
    """A worker forked by a `ForkServer`: what `WorkerProcess` uses of `subprocess.Popen`."""

    def __init__(self, server: ForkServer, pid: int, args: list[str]):
        self.server, self.pid, self.args = server, pid, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            if self.pid not in self.server.exited:
                self.server.collect(0.0)
            status = self.server.exited.pop(self.pid, None)
            if status is not None:
                self.returncode = os.waitstatus_to_exitcode(status)
            elif self.server.closed and not _exists(self.pid):
                self.returncode = -signal.SIGKILL  # the server died first; its children died with it (PDEATHSIG)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = POLL_S if deadline is None else min(POLL_S, deadline - time.monotonic())
            if left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            if self.server.closed:
                time.sleep(left)
            else:
                self.server.collect(left)
        return self.returncode


def _exists(pid: int) -> bool:
    """Whether `pid` still runs: a zombie does not (where the machine's init reaps no orphans, one stays)."""
    return proc_state(Path("/proc", str(pid), "stat")) not in ("Z", "X", "")


_SERVERS: dict[tuple, ForkServer] = {}
_SERVERS_LOCK = threading.Lock()


def server_for(env: dict[str, str]) -> ForkServer:
    """This process's server for workers of `env` (started on first use, again if it died)."""
    key = tuple(sorted((k, v) for k, v in env.items() if k not in PER_WORKER_ENV + VOLATILE_ENV))
    with _SERVERS_LOCK:
        server = _SERVERS.get(key)
        if server is None or not server.alive:
            if server is not None:
                server.stop()
            server = _SERVERS[key] = ForkServer(env)
        return server


def stop_servers() -> None:
    """Stop every server of this process (each kills the workers it forked)."""
    with _SERVERS_LOCK:
        for server in _SERVERS.values():
            server.stop()
        _SERVERS.clear()


def _forget_servers() -> None:
    """In a child forked from the evaluator: its servers are the parent's (their sockets shared): start new ones."""
    for server in _SERVERS.values():
        server.closed = True
        server.sock.close()  # this process's copy only: the parent's server goes on
    _SERVERS.clear()


atexit.register(stop_servers)  # before prestart's: atexit runs it after the waiting workers are discarded
os.register_at_fork(after_in_child=_forget_servers)


# -- the server ----------------------------------------------------------------------------------------
def _serve(sock: socket.socket, parent: int) -> None:
    import warnings

    # Python 3.12 warns on fork() beside any thread; torch's import leaves one (idle), as every process that forks
    # after importing torch (a DataLoader's) has.
    warnings.filterwarnings("ignore", r".*multi-threaded.*fork\(\).*", DeprecationWarning)
    # What every worker imports, and what a candidate's op guard imports on its first use; no CUDA call.
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    from d2kbench.evaluate import sandbox, worker  # noqa: F401

    worker.warm_op_guard()
    children: set[int] = set()
    sock.send(json.dumps({"ready": True}).encode())
    try:
        while os.getppid() == parent:
            ready, _, _ = select.select([sock], [], [], POLL_S)
            _reap(sock, children)
            if not ready:
                continue
            data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 3)
            if not data:
                return  # the evaluator closed its end
            session_r, session_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(session_r)
                _become_worker(sock, json.loads(data), fds, session_w)  # never returns
            os.close(session_w)
            for fd in fds:  # only the child holds the worker's ends: its death must close them
                os.close(fd)
            os.read(session_r, 1)  # the child has its own session (or died): the pid names its process group
            os.close(session_r)
            children.add(pid)
            sock.send(json.dumps({"pid": pid}).encode())
    finally:
        for pid in children:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _reap(sock: socket.socket, children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        sock.send(json.dumps({"exit": pid, "status": status}).encode())


def _become_worker(sock: socket.socket, request: dict[str, Any], fds: list[int], session_w: int) -> None:
    """In the forked child: be a fresh worker process, then exit (never back into the server's loop)."""
    code = 1
    try:
        sock.close()
        os.setsid()
        os.close(session_w)  # the server replies with the pid only now, so that the pid is a process group's
        fd_in, fd_out, log = fds
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        # unbuffered, as the worker's PYTHONUNBUFFERED makes a fresh interpreter's: a crash keeps its last words
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True, line_buffering=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True, line_buffering=True)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        import tempfile

        tempfile.tempdir = None  # found again from this worker's TMPDIR

        from d2kbench.evaluate import sandbox

        sandbox.run_worker(request["plan"], [*request["args"], "--fd-in", str(fd_in), "--fd-out", str(fd_out)])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the child must never return into the server
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main() -> None:
    """`python -m d2kbench.evaluate.forkserver FD PARENT`: serve spawn requests on socket FD for PARENT."""
    fd, parent = int(sys.argv[1]), int(sys.argv[2])
    _serve(socket.socket(fileno=fd), parent)


if __name__ == "__main__":
    main()
