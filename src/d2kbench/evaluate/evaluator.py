"""The kernel judge: evaluate one candidate file against one task.

The candidate runs alone in its worker; the reference, oracle and expert run in a trusted worker.
This module (the parent) makes no kernel calls itself: it receives copies of every output, compares
them with the oracle's, checks integrity findings, times both workers alternately under a per-GPU
lock, and owns every verdict. `Evaluation` holds one evaluation's state and runs its phases; the phases
are its mixins: `correctness_phase`, `timing_phase` with `timing_guards`, and `transfer` (how values travel).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import re
import secrets
import shutil
import threading
import time
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from d2kbench.evaluate import bytecode, channel, hardware, static_scan
from d2kbench.evaluate.correctness_phase import ORACLE_THREAD, CorrectnessPhase
from d2kbench.evaluate.prestart import PRESTARTED, remove_folders
from d2kbench.evaluate.result import (
    SANDBOX_VERDICTS,
    EvalResult,
    Failure,
    InfraError,
    WorkloadResult,
    out_of_bounds_detail,
)
from d2kbench.evaluate.sandbox import Sandbox, SandboxSettings
from d2kbench.evaluate.timing_guards import TimingGuards
from d2kbench.evaluate.timing_phase import TimingPhase
from d2kbench.evaluate.transfer import Held, ValueTransfer, workload_dict
from d2kbench.evaluate.workers import RequestFailed, WorkerFault, WorkerProcess
from d2kbench.suite import Task, Workload

__all__ = ["EvalOptions", "Evaluation", "InfraError", "compile_report", "evaluate", "resolve_device"]

COMPILE_ERRORS = ("CompilationError", "CompileTimeAssertionFailure", "OutOfResources", "PTXASError")
# Where the harness's own GPU memory (the trusted worker's, and the input sets it put in the candidate's worker) is
# this share of the card or more, a candidate's out-of-memory is the card's fault, not the candidate's
HARNESS_MEMORY_SHARE = 0.9


@dataclass
class EvalOptions:
    """How to evaluate. `device` is `auto` (a GPU when there is one), `cpu` or `cuda:N`."""

    workloads: tuple[str, ...] | None = None  # names; default: scored (GPU) or cpu (interpreter)
    include_hidden: bool = False  # the final evaluation adds the hidden workloads (correctness only)
    time: bool = True  # GPU only
    comparator: bool = False  # also time the task's comparator
    expert: bool = True  # also time the expert (the agent's benchmark tool turns this off)
    seed: int | None = None  # default: a fresh secret per evaluation
    device: str = "auto"
    load_timeout_s: float = 300.0
    call_timeout_s: float = 300.0
    # the longest the trusted worker waits, the candidate stopped, for work the candidate queued on the GPU before
    # the stop to drain (before each baseline batch and each workload's timings); past it the GPU counts as shared
    quiet_wait_s: float = 10.0
    rounds: int = 6  # timing rounds; each round times every function once (6: all orders of three functions)
    batch_ms: float = 50.0  # target length of one timed batch
    sandbox: bool = True  # confine the candidate's worker (docs/threats.md); off only for debugging
    # input sets handed to the candidate device to device (CUDA IPC, `ipc.py`) instead of through spool files
    # (attention on the H200: 25.7 s instead of 58.2 s per evaluation, the same verdicts; bench/diag/ipc_inputs.py);
    # checked before the candidate loads, and files where that check fails
    device_inputs: bool = True
    # results (the oracle's and the candidate's outputs) to the parent device to device as well, each worker freeing
    # its blocks at its next request (muon on the H200: 37.5 s instead of 70 s per evaluation, attention 20.8 s
    # instead of 24 s, the same verdicts: bench/results/2026-12-03-h200-owed-8); checked before the candidate
    # loads, and files where that check fails
    device_outputs: bool = True
    reference_error: bool = False  # also measure the reference's error against the oracle (d2k suite bench)
    # once this evaluation's workers are up, start the pair for the next evaluation of the same task in this thread,
    # and take the pair an earlier one started (`prestart.py`): an agent's run evaluates one task again and again
    prestart: bool = False
    fail_fast: bool = False  # stop at the first workload that fails (mutant checks); later ones stay unchecked


def resolve_device(device: str) -> str:
    """`auto` (the first GPU, else the CPU), `cpu`, or `cuda`/`cuda:N` naming a visible GPU; anything else is a
    ValueError that names the devices there are."""
    if device == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    match = re.fullmatch(r"cuda(?::(\d+))?", device)
    if match and int(match.group(1) or 0) < gpus:
        return f"cuda:{int(match.group(1) or 0)}"
    visible = ", ".join(["auto", "cpu", *(f"cuda:{i}" for i in range(gpus))])
    raise ValueError(f"no device {device!r} here (this machine has: {visible})")


def select_workloads(task: Task, options: EvalOptions, gpu: bool) -> list[Workload]:
    if options.workloads:
        return [task.workload(name) for name in options.workloads]
    chosen = list(task.split("scored") if gpu else task.split("cpu"))
    if options.include_hidden and gpu:
        chosen += task.split("hidden")
    return chosen


def tensor_bytes(value: Any) -> int:
    """The bytes of a tensor or of a held one's description (0 for other values)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, Held):
        return math.prod(value.shape) * channel.to_dtype(str(value.desc["dtype"])).itemsize
    return 0


def derive_seed(secret: int, workload: str, index: int) -> int:
    digest = hashlib.sha256(f"{secret}:{workload}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def worker_env(device: str, scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("D2K_")}
    env["TRITON_CACHE_DIR"] = os.environ.get("D2K_TRITON_CACHE", str(Path.home() / ".cache" / "d2kbench" / "triton"))
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PYTHONPYCACHEPREFIX", None)
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.6's default, stated so 3.9 agrees
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env.pop("TRITON_INTERPRET", None)
    cached = bytecode.prefix(env)  # the evaluator's bytecode of the workers' imports, once warm (`bytecode.py`)
    if cached:
        env["PYTHONPYCACHEPREFIX"] = cached
    return env


def compile_report(task: Task, candidate: Path | str, workload: str | None = None,
                   dtype: str | None = None, arch: int = 90) -> list[dict[str, Any]]:
    """Compile every kernel the candidate launches on `workload` for sm_`arch`, without a GPU.

    The inputs are the workload's (by default the task's `profile_workload`, a scored one: kernels pick their
    configs from the shapes, and a cpu workload's would report other kernels than the timed ones), made on the
    CPU, in `dtype` where given; nothing runs on a device. Each kernel gets registers, spills, shared memory,
    warps, stages and whether the PTX uses wgmma, or the compiler's error.
    """
    name = workload or task.profile_workload  # "" where a task has no scored workload
    w = task.workload(name) if name else task.split("cpu")[0]
    if dtype:
        w = dataclasses.replace(w, dtype=dtype)
    ev = Evaluation(task, Path(candidate), EvalOptions(device="cpu", time=False))
    ev.env.pop("TRITON_INTERPRET", None)  # compiled, not interpreted: the candidate's kept cache serves it too
    try:
        trusted, cand = ev.spawn("trusted"), ev.spawn("candidate")
        ev.start_trusted(trusted)
        if not ev.start_candidate(cand):
            raise RuntimeError(f"the candidate did not load: {ev.result.detail}")
        ev.put_report_inputs(w, ev.cand, ev.options.call_timeout_s)
        return ev.cand.request({"op": "compile", "slot": 0, "arch": arch}, ev.options.load_timeout_s)["kernels"]
    finally:
        ev.close()


def evaluate(task: Task, candidate: Path | str, options: EvalOptions | None = None) -> EvalResult:
    """Evaluate the candidate file `candidate` on `task`; every verdict is decided here, in the parent."""
    candidate = Path(candidate)
    options = options or EvalOptions()
    if not candidate.is_file():
        raise FileNotFoundError(f"no candidate file {candidate}" + (" (it is a folder)" if candidate.is_dir() else ""))
    return Evaluation(task, candidate, options).run()


class Evaluation(CorrectnessPhase, TimingPhase, TimingGuards, ValueTransfer):
    """One candidate against one task: the state of a single `evaluate` call."""

    def __init__(self, task: Task, candidate: Path, options: EvalOptions):
        self.task, self.candidate, self.options = task, candidate.resolve(), options
        self.device = resolve_device(options.device)
        self.gpu = self.device.startswith("cuda")
        # a custom comparison reads the inputs and results in the parent: those tasks keep their files
        device_routes = self.gpu and all(o.compare != "custom" for o in task.outputs)
        self.export_inputs = device_routes and options.device_inputs
        self.export_outputs = device_routes and options.device_outputs
        self.secret = options.seed if options.seed is not None else secrets.randbits(62)
        self.result = EvalResult(
            task=task.id, candidate=str(self.candidate), mode="gpu" if self.gpu else "interpreter",
            device=self.device, seed=self.secret, environment=hardware.environment(self.device),
        )
        self.work = channel.private_folder("d2k-eval-")
        self.spool = channel.private_folder("d2k-spool-", channel.spool_root())
        self.env = worker_env(self.device, self.work)
        self.trusted: WorkerProcess | None = None
        self.cand: WorkerProcess | None = None
        self.prestarted: list[WorkerProcess] = []  # workers an earlier evaluation started for this one
        self.ceilings: dict[str, float] | None = None  # this GPU's (`gpu_ceilings`)
        self.inputs: dict[str, dict[int, list[Any]]] = {}
        # input tensors that are unchanged maps of the trusted worker's files: id -> (tensor, file)
        self.input_files: dict[int, tuple[torch.Tensor, Path]] = {}
        self.expected: dict[str, dict[int, list[torch.Tensor]]] = {}
        self.oracles: dict[str, dict[int, Future]] = {}  # oracle calls still running or queued (`prepare_workload`)
        self.expected_strides: dict[str, list[list[int]]] = {}
        # quantities of each input set that the roofline needs (`derived` in a task's reference), per workload
        self.derived: dict[str, dict[int, dict[str, float]]] = {}
        # the input set each candidate slot holds (slot 0 is rewritten in place with another set)
        self.slot_set: dict[str, dict[int, int]] = {}
        self.slot_bases: dict[str, int] = {}  # the first worker slot of each workload's input sets
        # the workloads whose sets the workers hold (`prepare_workload`; `drop(..., keep_results=True)` drops them
        # after the workload's correctness, until its timing makes them again: one workload's sets on the card)
        self.resident: set[str] = set()
        # each input set's tensors' fingerprints as first made: a set made again must match (`make_set`)
        self.fingerprints: dict[tuple[str, int], list[int | None]] = {}
        # input sets the trusted worker has lent the candidate's worker: (workload, set) -> (lend id, descriptions)
        self.lends: dict[tuple[str, int], tuple[int, list[dict[str, Any] | None]]] = {}
        self.returned_lends: list[int] = []  # lends over, to send back with the trusted worker's next lend or drop
        # the workload being timed: (request ms, reported times, warm-up calls) of each function's event-timed batches
        self.batch_walls: dict[str, list[tuple[float, list[float], int]]] = {}

    @contextmanager
    def phase(self, name: str, into: str = "phases_s"):
        """Add the wall time of the block to `result.phases_s[name]` (or another dict of seconds)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            spent = getattr(self.result, into)
            spent[name] = round(spent.get(name, 0.0) + time.perf_counter() - start, 3)

    def record_requests(self, worker: WorkerProcess) -> None:
        """Add a worker's seconds per request op to `result.requests_s` (before it is replaced or closed)."""
        for op, seconds in worker.spent.items():
            key = f"{worker.role}.{op}"
            self.result.requests_s[key] = round(self.result.requests_s.get(key, 0.0) + seconds, 3)
        worker.spent.clear()

    def slot_id(self, workload: str, index: int) -> int:
        """The worker slot of one input set of one workload (numbered in this evaluation only)."""
        base = self.slot_bases.setdefault(workload, 1000 * (len(self.slot_bases) + 1))
        return base + index

    def candidate_slots(self, workload: str) -> list[int]:
        """The candidate's slots of a workload, one per correctness set (the timed rounds move sets between them)."""
        return [self.slot_id(workload, i) for i in range(self.task.correctness_sets)]

    def spawn(self, role: str, scratch: Path | None = None, spool: Path | None = None) -> WorkerProcess:
        """A new worker of `role`, its folders in this evaluation's scratch and spool unless others are given."""
        sandbox = None
        if role == "candidate" and self.options.sandbox:
            sandbox = Sandbox(SandboxSettings(), [Path(self.task.path)], self.device,
                              compiles="TRITON_INTERPRET" not in self.env)
        return WorkerProcess(role, self.device, spool or self.spool, scratch or self.work, self.env, sandbox)

    def prestart_key(self) -> tuple:
        """What a prestarted worker must have been started for: the same device, task, sandbox and environment."""
        env = {k: v for k, v in self.env.items() if k != "PYTHONPYCACHEPREFIX"}  # a cache warmed since: no matter
        return self.device, str(self.task.path), self.options.sandbox, tuple(sorted(env.items()))

    def take_or_spawn(self, role: str) -> WorkerProcess:
        """The worker an earlier evaluation started for this one (`prestart`), else a new one."""
        worker = PRESTARTED.take(self.prestart_key(), role) if self.options.prestart else None
        if worker is None:
            return self.spawn(role)
        self.prestarted.append(worker)
        self.result.environment.setdefault("prestarted", []).append(role)
        return worker

    def start_trusted(self, spawned: WorkerProcess | None = None) -> None:
        self.trusted = spawned or self.spawn("trusted")
        self.trusted.request(
            {"op": "load", "task_path": str(self.task.path), "written": list(self.task.written_inputs),
             "upcast": self.task.oracle_upcast, "load_expert": self.gpu and self.options.time and self.options.expert},
            self.options.load_timeout_s,
        )

    def start_candidate(self, spawned: WorkerProcess | None = None) -> bool:
        """Start the candidate's worker and import the file; False (with a failure recorded) if that fails."""
        try:
            self.cand = spawned or self.spawn("candidate")
            self.cand.request(
                {"op": "load", "path": str(self.cand.stage(self.candidate)), "written": list(self.task.written_inputs)},
                self.options.load_timeout_s,
            )
            return True
        except RequestFailed as exc:
            verdict, reason = "error", "no_run" if "defines no function run" in exc.message else "import_error"
            if exc.stopped_by:
                verdict, reason = SANDBOX_VERDICTS[exc.stopped_by][0], exc.stopped_by
            self.result.add(Failure(verdict, reason, f"loading the candidate failed: {exc}"))
        except WorkerFault as exc:
            verdict, reason = ("timeout", "load_timeout") if exc.kind == "timeout" else ("crash", "worker_died")
            if exc.stopped_by:
                verdict, reason = SANDBOX_VERDICTS[exc.stopped_by][0], exc.stopped_by
            self.result.add(Failure(verdict, reason, f"while loading the candidate: {exc.detail}"))
        finally:
            self.record_sandbox()
        self.result.log_tail = self.cand.log_tail() if self.cand else ""
        return False

    def trusted_request(self, message: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """A request to the trusted worker, retried once on a fresh worker; a second failure is infra. From any
        thread but the oracle's, it first waits for the oracle calls still running (one request at a time)."""
        if self.oracles and not threading.current_thread().name.startswith(ORACLE_THREAD):
            for name in list(self.oracles):
                self.settle_oracles(name)
        timeout = timeout or self.options.call_timeout_s
        for attempt in range(2):
            try:
                return self.trusted.request(message, timeout)
            except (RequestFailed, WorkerFault) as exc:
                if attempt == 1 or not isinstance(exc, WorkerFault) and not exc.cuda_fault:
                    raise InfraError(f"the trusted worker failed on {message.get('op')}: {exc}") from exc
                self.record_requests(self.trusted)
                self.trusted.kill()
                self.start_trusted()
                self.restore_trusted_slots()
                if "release" in message:  # lends of the worker that died
                    message = {**message, "release": []}
        raise AssertionError("unreachable")

    def restore_trusted_slots(self) -> None:
        """Give a replaced trusted worker the input sets of the resident workloads back (the others' are made
        again for their timing): held ones made again from their seeds (they and their lends died with the old
        worker; `check_fingerprints`), the others from the parent's copies."""
        self.forget_lends()
        for name, sets in self.inputs.items():
            if name not in self.resident:
                continue
            for i, values in sets.items():
                if any(isinstance(v, Held) for v in values):
                    reply = self.trusted.request(self.make_inputs_request(self.task.workload(name), i),
                                                 self.options.call_timeout_s)
                    self.check_fingerprints(name, i, reply)
                    sets[i] = self.unpack(reply["inputs"], self.trusted, inputs=True)
                    continue
                self.trusted.request(
                    {"op": "put_inputs", "slot": self.slot_id(name, i), "inputs": self.pack(values, self.trusted)},
                    self.options.call_timeout_s,
                )

    def make_inputs_request(self, workload: Workload, i: int, lend: bool = False) -> dict[str, Any]:
        """Make input set `i` of `workload` from its seed; on the GPU route its tensors stay in the trusted worker
        (`Held`), lent at once with `lend`."""
        message = {"op": "make_inputs", "workload": workload_dict(workload), "slot": self.slot_id(workload.name, i),
                   "seed": derive_seed(self.secret, workload.name, i), "export": self.export_inputs}
        if self.export_inputs:
            message.update(lend=lend, release=self.take_returned_lends())
        return message

    def check_fingerprints(self, name: str, i: int, reply: dict[str, Any]) -> None:
        """A set made again from its seed must be the set first made (the oracle's outputs and the candidate's
        copies are of that one); the first making records it."""
        made = reply.get("fingerprints")
        first = self.fingerprints.setdefault((name, i), made)
        if made != first:
            raise InfraError(f"task {self.task.id}: make_inputs made a different input set {i} of workload {name} "
                             "from the same seed; its sets must be a function of the seed, since the evaluation "
                             "makes them again (for timing, and when its trusted worker is replaced)")

    def record_memory(self, workers: list[WorkerProcess]) -> None:
        """Each live worker's GPU memory in GB (`Worker.memory`) into `result.environment["gpu_memory_gb"]`: what an
        evaluation of this task needs of a card. The candidate's figures are its worker's own report (its code can
        write that reply): a diagnosis, never a verdict."""
        memory = {}
        for worker in workers:
            try:
                reply = worker.request({"op": "memory"}, 5) if worker.alive else {}
            except (RequestFailed, WorkerFault):
                continue
            for key in ("peak_reserved", "exported", "total"):
                if isinstance(reply.get(key), int):
                    name = "device_total" if key == "total" else f"{worker.role}_{key}"
                    memory[name] = round(reply[key] / 2**30, 2)
        if memory:
            self.result.environment["gpu_memory_gb"] = memory

    def harness_memory_share(self) -> str:
        """What the harness itself holds of the card, from figures the candidate cannot write: the trusted worker's
        own report (its allocator's reserved bytes and lending blocks) and the parent's count of the input sets it
        put in the candidate's worker (`candidate_input_bytes`). Where that is `HARNESS_MEMORY_SHARE` of the card or
        more, raises `InfraError` (reason `device_memory`): the card cannot hold this task's evaluation, whatever
        the candidate does. Else the figures, for the candidate's verdict."""
        try:
            reply = self.trusted.request({"op": "memory"}, 5) if self.trusted and self.trusted.alive else {}
        except (RequestFailed, WorkerFault):
            reply = {}
        total = reply.get("total")
        if not isinstance(total, int) or total <= 0:
            return "the harness's share of the card is unknown (the trusted worker did not say)"
        trusted = int(reply.get("reserved", 0)) + int(reply.get("exported", 0))
        placed = self.candidate_input_bytes()
        figures = (f"the harness holds {(trusted + placed) / 2**30:.1f} of the card's {total / 2**30:.1f} GiB (the "
                   f"trusted worker {trusted / 2**30:.1f}, the input sets in the candidate's worker with their "
                   f"pristine copies {placed / 2**30:.1f})")
        if trusted + placed >= HARNESS_MEMORY_SHARE * total:
            raise InfraError(f"out of GPU memory in the candidate's worker, but {figures}: this card cannot hold "
                             f"task {self.task.id}'s evaluation", reason="device_memory")
        return figures

    def candidate_input_bytes(self) -> int:
        """The bytes of the input sets in the candidate's slots, each with its worker's pristine copy: the parent's
        own count of what it put there."""
        total = 0
        for name in self.resident & set(self.slot_set):
            for index in self.slot_set[name].values():
                total += 2 * sum(tensor_bytes(v) for v in self.inputs.get(name, {}).get(index, []))
        return total

    def record_sandbox(self) -> None:
        """What confined the candidate's worker, as the sandbox reported it."""
        sandbox = self.cand.sandbox if self.cand else None
        self.result.environment["sandbox"] = sandbox.status if sandbox else {"active": [], "disabled": True}
        if sandbox is not None and sandbox.cache_files is not None:  # a warm compile cache, or a cold one (0)
            self.result.environment["compile_cache_files"] = sandbox.cache_files

    def candidate_fault(self, exc: RequestFailed | WorkerFault, workload: Workload) -> Failure:
        """Turn a candidate worker's failure into a verdict, replacing the worker if it died. Out of GPU memory
        where the harness's own share fills the card is infra (`InfraError`, raised), not the candidate's."""
        if exc.stopped_by == "out_of_memory" and self.gpu:
            failure = Failure("crash", "out_of_memory", f"the candidate's worker ran out of GPU memory ({exc}); "
                              f"{self.harness_memory_share()}", workload.name)
        elif exc.stopped_by:
            verdict, what = SANDBOX_VERDICTS[exc.stopped_by]
            failure = Failure(verdict, exc.stopped_by, f"{what}: {exc}", workload.name)
        elif isinstance(exc, RequestFailed):
            if exc.cuda_fault:
                failure = Failure("crash", "cuda_error", f"CUDA fault: {exc.message}", workload.name)
            elif exc.out_of_bounds:
                failure = Failure("crash", "out_of_bounds", out_of_bounds_detail(exc.out_of_bounds), workload.name)
            elif exc.error in COMPILE_ERRORS:
                failure = Failure("error", "compile_error", f"{exc.error}: {exc.message}", workload.name)
            else:
                failure = Failure("error", "exception", f"{exc.error}: {exc.message}", workload.name)
        else:
            assert isinstance(exc, WorkerFault)
            if exc.kind == "timeout":
                failure = Failure("timeout", "call_timeout", exc.detail, workload.name)
            else:
                failure = Failure("crash", "worker_died", exc.detail, workload.name)
        self.result.log_tail = self.cand.log_tail()
        if not self.cand.alive:
            self.record_requests(self.cand)
            self.cand.kill()
            self.start_candidate()
        return failure

    def check_candidate_reply(self, reply: dict[str, Any], fields: dict[str, type]) -> None:
        """Each field of a reply of the candidate's worker of the type the parent reads it as; else the candidate's
        code changed what its worker sends: `integrity/malformed_result`, the worker replaced."""
        bad = [name for name, kind in fields.items() if not isinstance(reply.get(name), kind)]
        if bad:
            raise self.malformed_reply(", ".join(bad))

    def malformed_reply(self, what: str) -> WorkerFault:
        """The fault for a reply of the candidate's worker that the parent cannot read (the worker killed)."""
        self.cand.kill()
        return WorkerFault("crash", f"its reply's {what} not as the worker sends them", "malformed_result")

    def run(self) -> EvalResult:
        started = time.perf_counter()
        try:
            self._run()
        except InfraError as exc:
            self.result.add(Failure("infra", exc.reason, str(exc)))
        except WorkerFault as exc:
            self.result.add(Failure("infra", "worker_start_failed", str(exc)))
        finally:
            self.close()
            self.result.elapsed_s = round(time.perf_counter() - started, 3)
        return self.result

    def close(self) -> None:
        """Stop both workers (both asked first, so they tear down side by side) and remove the spool and scratch
        folders."""
        workers = [w for w in (self.cand, self.trusted) if w is not None]
        if self.gpu:
            self.record_memory(workers)
        for worker in workers:
            self.record_requests(worker)
            worker.ask_exit()
        for worker in workers:
            worker.close()
        if self.cand is not None and self.cand.sandbox is not None:
            self.cand.sandbox.keep_cache(self.cand.home)
        for worker in self.prestarted:  # their folders are the prestart's, not under this evaluation's
            remove_folders(worker)
        shutil.rmtree(self.spool, ignore_errors=True)
        shutil.rmtree(self.work, ignore_errors=True)

    def scan(self) -> None:
        """The static scan of the candidate's source: findings recorded, forbidden ones a failure."""
        self.result.findings = static_scan.scan_file(self.candidate)
        summary = static_scan.forbidden_summary(self.result.findings)
        if summary:
            self.result.add(Failure("integrity", "forbidden_code", summary))

    def _run(self) -> None:
        self.scan()
        workloads = select_workloads(self.task, self.options, self.gpu)
        self.result.workloads = [WorkloadResult(w.name, w.split) for w in workloads]
        with self.phase("start_workers"):
            trusted, cand = self.take_or_spawn("trusted"), self.take_or_spawn("candidate")  # both start at once
            try:
                self.start_trusted(trusted)
            except (RequestFailed, WorkerFault) as exc:
                cand.kill()
                raise InfraError(f"the trusted worker did not start: {exc}") from exc
            if self.gpu and self.options.time:
                try:
                    self.gpu_ceilings()  # measured (once per GPU) before any of the candidate's code is loaded
                except InfraError:
                    cand.kill()
                    raise
            if self.export_inputs:
                cand = self.check_device_inputs(cand)
            if self.export_outputs:
                cand = self.check_device_outputs(cand)
            if self.options.prestart:  # this evaluation's workers are up: the next one's start beside its work
                PRESTARTED.start(self.prestart_key(), self.spawn)
            if not self.start_candidate(cand):
                return
        for workload, wr in zip(workloads, self.result.workloads, strict=True):
            with self.phase("inputs_and_oracle"):
                self.prepare_workload(workload)
            before = len(self.result.failures)
            try:
                with self.phase("correctness"):
                    try:
                        self.check_workload(workload, wr)
                    finally:
                        self.settle_oracles(workload.name)
                self.check_tolerance_discriminates(workload)
            except (RequestFailed, WorkerFault) as exc:
                failure = self.candidate_fault(exc, workload)
                self.result.add(failure)
                wr.errors.append(f"{failure.verdict}/{failure.reason}: {failure.detail}")
                if failure.verdict == "timeout":
                    break  # a hanging candidate would cost the deadline again on every workload
            wr.correct = len(self.result.failures) == before
            if self.options.fail_fast and not wr.correct:
                break
            self.drop(workload, keep_results=True)  # timing makes its sets again: one workload's on the card
        timed = self.gpu and self.options.time and self.result.verdict == "pass"
        for workload, wr in zip(workloads, self.result.workloads, strict=True):
            if timed and workload.split == "scored" and self.result.verdict == "pass":
                with self.phase("timing"):
                    self.time_workload(workload, wr)
            self.drop(workload)
        if self.cand is not None:
            self.result.log_tail = self.cand.log_tail()

    def drop(self, workload: Workload, keep_results: bool = False) -> None:
        """Both workers forget the workload's input sets and the trusted worker takes their lends back; with
        `keep_results` the parent keeps what timing needs to make the sets again and check them (the oracle's
        outputs, the roofline's quantities, which set each candidate slot held)."""
        fresh = self.task.correctness_sets + 2 * self.options.rounds + 1  # the timed rounds' fresh and replay sets
        slots = [self.slot_id(workload.name, i) for i in range(fresh)]
        self.return_lends(workload.name)
        for worker in (self.trusted, self.cand):
            if worker is not None and worker.alive:
                message = {"op": "drop", "slots": slots}
                if worker is self.trusted:
                    message["release"] = self.take_returned_lends()
                try:
                    worker.request(message, 60)
                except (RequestFailed, WorkerFault):
                    pass
        self.resident.discard(workload.name)
        if not keep_results:
            self.inputs.pop(workload.name, None)
            self.expected.pop(workload.name, None)
