"""The parent's handle on a worker process: spawn, request with a deadline, kill, replace."""

from __future__ import annotations

import os
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from d2kbench.evaluate import channel, forkserver
from d2kbench.evaluate.sandbox import Sandbox, proc_state

KILL_WAIT_S = 30.0  # how long a killed worker may take to exit before the evaluation goes on without it


def _wait_stopped(pid: int, timeout: float = 1.0) -> None:
    """Wait until every thread of `pid` has stopped: SIGSTOP is delivered asynchronously, and a thread
    still running after `killpg` returns could queue GPU work beside the timings."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            return  # gone (or no /proc): nothing left to run
        # A thread that just ended reads as "": nothing left to stop there.
        if all(proc_state(Path("/proc", str(pid), "task", t, "stat")) in ("T", "t", "Z", "X", "") for t in threads):
            return
        time.sleep(0.001)


class WorkerFault(Exception):
    """A worker that stopped answering: it died (`crash`) or ran past its deadline (`timeout`)."""

    def __init__(self, kind: str, detail: str, stopped_by: str | None = None):
        self.kind, self.detail = kind, detail
        self.stopped_by = stopped_by  # the sandbox limit it ran into (a key of result.SANDBOX_VERDICTS)
        super().__init__(f"{kind}: {detail}")


class RequestFailed(Exception):
    """A request that raised inside the worker; the worker may still be alive."""

    def __init__(self, reply: dict[str, Any]):
        self.reply = reply
        self.error = str(reply.get("error", "Error"))
        self.message = str(reply.get("message", ""))
        self.cuda_fault = bool(reply.get("cuda_fault"))
        # interpreted kernels' accesses outside their tensors (`interp_bounds`), as the worker recorded them
        stray = reply.get("out_of_bounds")
        self.out_of_bounds = [str(s) for s in stray] if isinstance(stray, list) else []
        self.stopped_by: str | None = None  # what of the sandbox stopped it (a key of result.SANDBOX_VERDICTS)
        super().__init__(f"{self.error}: {self.message}")


def _denied(failed: RequestFailed) -> bool:
    """A failure that is the sandbox refusing an access (files, signals, network)."""
    return failed.error == "PermissionError" or "Network is unreachable" in failed.message


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "the worker stopped answering"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"the worker was killed by {name}"
    return f"the worker exited with status {returncode} before replying"


class WorkerProcess:
    """One worker subprocess in its own process group, with a private request/reply pipe.

    Each worker gets folders of its own: `home` (its working directory and caches) and `spool`
    (its tensor files), inside the evaluation's scratch and spool folders; its log stays outside them.
    A `sandbox` (candidate workers) confines the process to those folders (see `sandbox`).
    """

    def __init__(self, role: str, device: str, spool: Path, scratch: Path, env: dict[str, str],
                 sandbox: Sandbox | None = None):
        self.role, self.device, self.sandbox = role, device, sandbox
        self.home = Path(tempfile.mkdtemp(prefix=f"{role}-", dir=scratch))
        self.spool = Path(tempfile.mkdtemp(prefix=f"{role}-", dir=spool))
        self.log_path = scratch / f"{self.home.name}.log"  # one per worker: scratch may hold several of a role
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        src_root = str(Path(__file__).resolve().parents[2])
        env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [src_root, env.get("PYTHONPATH", "")]))}
        args = ["--role", role, "--spool", str(self.spool), "--device", device, "--parent", str(os.getpid())]
        fds = ["--fd-in", str(req_r), "--fd-out", str(rep_w)]
        plan = sandbox.plan(self.home, self.spool) if sandbox is not None else None
        if sandbox is not None:
            env = sandbox.environment(env, self.home)
        self.proc: subprocess.Popen | forkserver.ForkedProcess | None = None
        with open(self.log_path, "ab") as log:
            if forkserver.enabled() and (sandbox is None or sandbox.forkable):
                try:
                    self.proc = forkserver.server_for(env).spawn(args, env, str(self.home), req_r, rep_w,
                                                                 log.fileno(), asdict(plan) if plan else None)
                except forkserver.ForkServerError as exc:
                    print(f"d2kbench: {exc}; the worker starts as a fresh interpreter", file=sys.stderr, flush=True)
            if self.proc is None:
                prefix = ([sys.executable, "-m", "d2kbench.evaluate.worker"] if sandbox is None
                          else sandbox.command(plan))
                self.proc = subprocess.Popen(
                    [*prefix, *args, *fds],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(req_r, rep_w),
                    cwd=self.home,
                    env=env,
                    start_new_session=True,  # its own process group: killed whole on timeout
                )
        os.close(req_r)
        os.close(rep_w)
        self.fd_req, self.fd_rep = req_w, rep_r
        self._ready = False
        self._exit_asked = False
        self.spent: dict[str, float] = {}  # seconds per request op (and op[fn]), reply included

    def stage(self, candidate: Path) -> Path:
        """The candidate file as this worker loads it: a copy in its home when sandboxed."""
        return self.sandbox.stage(candidate, self.home) if self.sandbox else candidate

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Wait for the worker's hello (imports done); workers can start side by side before this."""
        if not self._ready:
            if self.sandbox is not None:  # the sandbox reports before the worker says hello
                self.sandbox.record(self._await(timeout).get("sandbox", {}))
            self._await(timeout)
            self._ready = True

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one request; return its reply, raise `RequestFailed` or `WorkerFault`."""
        self.wait_ready()
        start = time.perf_counter()
        message = {**message, "id": secrets.token_hex(8)}  # the reply must carry it: code in the worker can't
        try:
            channel.write_message(self.fd_req, message)
        except (BrokenPipeError, OSError):
            raise self._fault() from None
        try:
            reply = self._await(timeout)
        finally:
            op, elapsed = str(message.get("op")), time.perf_counter() - start
            self.spent[op] = self.spent.get(op, 0.0) + elapsed
            if "fn" in message:  # and per function (graph-replay batches and traced calls apart): what costs what
                marks = "".join(f", {m}" for m, key in (("graph", "graph"), ("traced", "trace")) if message.get(key))
                part = f"{op}[{message['fn']}{marks}]"
                self.spent[part] = self.spent.get(part, 0.0) + elapsed
        if reply.get("id") != message["id"]:
            self.kill()
            raise WorkerFault("crash", f"a message answering no request arrived for {op!r} (id "
                              f"{str(reply.get('id'))[:20]!r}): written by code in the worker", "forged_result")
        stages = reply.get("stages_s")
        if isinstance(stages, dict):  # the request's stages as the worker says (each within the request)
            for stage, seconds in list(stages.items())[:16]:
                if isinstance(seconds, float) and seconds > 0:
                    key = f"{op}.{str(stage)[:40]}"
                    self.spent[key] = self.spent.get(key, 0.0) + min(seconds, elapsed)
        if not reply.get("ok"):
            failed = RequestFailed(reply)
            failed.stopped_by = "out_of_memory" if reply.get("out_of_memory") else self._limit_hit()
            if failed.stopped_by is None and self.sandbox is not None and _denied(failed):
                failed.stopped_by = "sandbox_denied"
            if failed.cuda_fault or failed.stopped_by in ("out_of_memory", "process_limit"):
                self.kill()
            raise failed
        return reply

    def _limit_hit(self, signal_number: int | None = None) -> str | None:
        """The sandbox limit behind a failure: `process_limit`, `cpu_time_limit`, or None."""
        if self.sandbox is not None and self.sandbox.process_limit_hit():
            return "process_limit"
        return "cpu_time_limit" if signal_number == signal.SIGXCPU else None

    def _await(self, timeout: float) -> dict[str, Any]:
        ready, _, _ = select.select([self.fd_rep], [], [], timeout)
        if not ready:
            stopped_by = self._limit_hit()
            self.kill()
            raise WorkerFault("timeout", f"no reply within {timeout:.0f} s", stopped_by)
        try:
            return channel.read_message(self.fd_rep)
        except channel.ChannelClosed:
            raise self._fault() from None
        except channel.ProtocolError as exc:
            self.kill()
            raise WorkerFault("crash", f"the worker sent a malformed message ({exc})") from None

    def _fault(self) -> WorkerFault:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        stopped_by = self._limit_hit(-code if code and code < 0 else None)
        self.kill()
        return WorkerFault("crash", describe_exit(code), stopped_by)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    @contextmanager
    def paused(self):
        """Stop the worker's process group (SIGSTOP) for the block, then let it go on (SIGCONT).

        While the trusted worker times the baselines the candidate's process launches nothing: a
        thread that keeps the GPU busy to slow the reference is frozen with it.
        """
        try:
            os.killpg(self.proc.pid, signal.SIGSTOP)
            _wait_stopped(self.proc.pid)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            yield
        finally:
            try:
                os.killpg(self.proc.pid, signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            try:  # children it left behind in its group
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            # Stuck in the kernel (a GPU context whose endless kernel the driver has not torn down yet):
            # waiting on would hang the evaluation; the copy probe before any timing sees the busy GPU.
            print(f"d2kbench: worker {self.proc.pid} ({self.role}) did not exit {KILL_WAIT_S:.0f} s after SIGKILL; "
                  "going on without it", file=sys.stderr, flush=True)
        if self.sandbox is not None:
            self.sandbox.release()  # kills what left the process group too
        for fd in (self.fd_req, self.fd_rep):
            try:
                os.close(fd)
            except OSError:
                pass
        self.fd_req = self.fd_rep = -1

    def ask_exit(self) -> None:
        """Ask the worker to exit at once (no interpreter teardown), without waiting for it."""
        if self.alive and not self._exit_asked:
            try:
                channel.write_message(self.fd_req, {"op": "exit", "fast": True})
                self._exit_asked = True
            except OSError:
                pass

    def close(self) -> None:
        """Ask the worker to exit, wait for it (10 s at most), then kill whatever of its group is left."""
        self.ask_exit()
        if self.alive:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def __del__(self) -> None:  # a last resort; the evaluator closes its workers explicitly
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            self.kill()


