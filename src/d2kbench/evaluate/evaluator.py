"""The kernel judge: evaluate one candidate file against one task.

The candidate runs alone in its worker; the reference, oracle and expert run in a trusted worker.
This module (the parent) makes no kernel calls itself: it receives copies of every output, compares
them with the oracle's, checks integrity findings, times both workers alternately under a per-GPU
lock, and owns every verdict.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import math
import os
import secrets
import shutil
import statistics
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from d2kbench.evaluate import channel, hardware, ipc, static_scan
from d2kbench.evaluate.compare import compare_output, output_error
from d2kbench.evaluate.prestart import PRESTARTED, remove_folders
from d2kbench.evaluate.result import SANDBOX_VERDICTS, EvalResult, Failure, Timing, WorkloadResult
from d2kbench.evaluate.sandbox import Sandbox, SandboxSettings
from d2kbench.evaluate.workers import RequestFailed, WorkerFault, WorkerProcess
from d2kbench.suite import Task, Workload, roofline

ORACLE_THREAD = "d2k-oracle"  # the thread that works out a workload's expected outputs (`prepare_workload`)
COMPILE_ERRORS = ("CompilationError", "CompileTimeAssertionFailure", "OutOfResources", "PTXASError")
# A copy probe below this share of the GPU's measured copy bandwidth means the GPU is shared while timing.
CONTENDED_SHARE = 0.8
# The probe right after a baseline's batch may probe again for this long: after a batch of a 5 us kernel (the GPU
# mostly asleep in head starts) one probe read 75% on a quiet H200 and refused a clean evaluation as
# gpu_contended (bench/results/2026-12-03-h200-owed-7). The candidate is stopped and drained before the batch, so
# a share that recovers within this window was the GPU's own, not work beside the baseline.
SETTLE_S = 0.5
# what a latency-bound workload's graph recheck (`Timer.replay_recheck`) says when its outputs are wrong
GRAPH_REPLAY_WRONG = (
    "the CUDA graph captured from your call, replayed once more{moved} with its outputs poisoned, gave wrong "
    "outputs: {detail}. Latency-bound workloads are scored on graph replays, as a serving engine runs them, so "
    "the captured work must read its inputs on the GPU when replayed (no launch decisions from input values on "
    "the host, no results worked out before the capture)")
WARMUP_CALLS = 3  # untimed calls at the start of each timed batch...
WARMUP_MS = 10.0  # ...once a function's time is estimated, as few as take this long (at least one)
MIN_REPS, MAX_REPS = 3, 200  # timed calls per batch, `batch_ms` long between these bounds
SHUFFLE = secrets.SystemRandom()  # the order of the functions in each timed round (`balanced_orders`)
# Every timed round puts a fresh input set, one the candidate has never seen, in one of its slots, left out of
# the warm-up: its first timed call there is the first call on those inputs. A candidate whose first call there,
# against its calls on the sets it had seen in the same batch, is (the median over the rounds) this many times the
# reference's same ratio ran faster on inputs it had seen: outputs cached by the inputs' contents. An honest
# kernel's ratio moves by some percent from call to call; a cache of a compute-bound kernel's outputs is many
# times faster than computing them. Every round, not only the checked one: a fresh set in the checked round
# alone would tell the candidate which round is checked. The candidate's worker writes the fresh set over its slot
# inside the timed request, after the warm-up, and the fresh slot's call is the batch's first timed call
# (`fresh_first`): no call, timed or not, sees the new contents before it, so a cache keyed by the inputs' contents
# cannot work the fresh outputs out ahead. (The first timed call ran 0.1-0.9 ms long after the warm-up's
# synchronize, bench/results/2026-12-04-h200-owed-14; with the 2 ms head start before it, `FIRST_HEAD_START_S`,
# it is within 0.87-1.16x of the batch's other calls, -owed-15 and -sweep-16.) The same for a latency-bound
# workload's graph replays, scored instead: the first replay on each round's replay set. Honest experts' medians
# 0.89-1.10 on the H200 in 20 workload evaluations (single rounds 0.59-2.13), a device-side cache in the graph 6.1
# (bench/results/2026-12-04-h200-owed-18 call1).
FRESH_SLOWDOWN = 1.5
# A candidate whose event-timed batches took, per call, more wall time than the baselines' overhead and its own
# reported kernel time explain, by more than this share of that kernel time and this many ms, under-reports.
# Honest experts timed as candidates on the H200 (bench/results/2026-12-03-h200-owed-5 and -owed-6, 66 workload
# evaluations) exceeded the baselines' largest overhead by at most 0.075 ms (muon, 1.5% of its 4.9 ms kernel),
# and by at most 0.018 ms under 1 ms; against the reference alone, by at most 0.19 ms (3.8%).
HIDDEN_SHARE, HIDDEN_MIN_MS = 0.25, 0.1


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


@contextmanager
def one_cpu_thread():
    """torch's CPU ops of this thread on one core: a task's custom check runs in the parent beside busy workers
    (prestarted ones starting up), and a team of one thread per core is slowed badly by any busy core (moe's
    check, 3 ms alone: 15 ms beside one importing process with 2 threads on 2 cores, 5 ms with one thread either
    way; on the H200 its parent compare went from 0.1-0.4 to 6-8 s of an evaluation, bench/results/
    2026-12-04-h200-owed-19 call6). torch keeps the count per OS thread, so other threads keep theirs."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    return device


def select_workloads(task: Task, options: EvalOptions, gpu: bool) -> list[Workload]:
    if options.workloads:
        return [task.workload(name) for name in options.workloads]
    chosen = list(task.split("scored") if gpu else task.split("cpu"))
    if options.include_hidden and gpu:
        chosen += task.split("hidden")
    return chosen


def unaccounted_ms(batches: list[tuple[float, list[float], int]]) -> float:
    """Per timed call: the batches' wall time (ms, the parent's clock) less the reported kernel times and the
    warm-up calls' (each taken at its batch's median)."""
    wall = sum(request_ms for request_ms, _, _ in batches)
    reported = sum(sum(times) + warmups * statistics.median(times) for _, times, warmups in batches)
    return (wall - reported) / sum(len(times) for _, times, _ in batches)


def fresh_first(slots: list[int], fresh_slot: int) -> list[int]:
    """`slots` rotated so that `fresh_slot` comes first: its call is the batch's first timed call, right after the
    fresh set is written (the candidate's worker writes it after the warm-up), the same place in every function's
    batch."""
    k = slots.index(fresh_slot)
    return slots[k:] + slots[:k]


def fresh_call(times: list[float], slots: list[int], fresh_slot: int) -> tuple[float, float] | None:
    """A batch's first call on `fresh_slot` (calls rotate over `slots`) and the median of its calls elsewhere (ms;
    None without calls elsewhere)."""
    rest = [t for i, t in enumerate(times) if slots[i % len(slots)] != fresh_slot]
    return (times[slots.index(fresh_slot)], statistics.median(rest)) if rest else None


def note_first_call(ratios: dict[int, dict[str, float | None]], raw: dict[str, list[dict[str, float]]], rnd: int,
                    fn: str, times: list[float], slots: list[int], fresh_slot: int) -> None:
    """`fn`'s first call (or replay) on `fresh_slot` in one batch of round `rnd` against its others (`fresh_call`):
    the ratio into `ratios[rnd][fn]`, the raw figures into `raw[fn]` (to calibrate the check)."""
    first = fresh_call(times, slots, fresh_slot)
    if first is not None:
        fresh_ms, rest_ms = first
        ratios.setdefault(rnd, {})[fn] = fresh_ms / max(rest_ms, 1e-9)
        raw.setdefault(fn, []).append({"fresh_ms": round(fresh_ms, 5), "rest_ms": round(rest_ms, 5)})


def fresh_slowdown(ratio: dict[str, float | None]) -> float | None:
    """The candidate's first call on the fresh set over its other calls (`fresh_call`), over the reference's same
    ratio (None where either is missing)."""
    cand, ref = ratio.get("candidate"), ratio.get("reference")
    return None if cand is None or not ref else cand / ref


def scored_on_graphs(workload: Workload, wr: WorkloadResult) -> bool:
    """Whether the workload's times are its graph replays' (latency-bound, every function replayed) rather than
    its events batches'."""
    return workload.latency_bound and bool(wr.timings) and all(tm.graph_median_ms for tm in wr.timings.values())


def derive_seed(secret: int, workload: str, index: int) -> int:
    digest = hashlib.sha256(f"{secret}:{workload}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


@contextmanager
def gpu_lock(device: str):
    """Serialise timing on one GPU across every evaluator process on the machine."""
    path = Path(tempfile.gettempdir()) / f"d2kbench-{device.replace(':', '')}.lock"
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def worker_env(device: str, scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("D2K_")}
    env["TRITON_CACHE_DIR"] = os.environ.get("D2K_TRITON_CACHE", str(Path.home() / ".cache" / "d2kbench" / "triton"))
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.6's default, stated so 3.9 agrees
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


@dataclass
class ReplayFresh:
    """One function's graph batch in a round with a replay set (`Evaluation.time_workload`): the slots it replays,
    the replay set's slot first; for the candidate, the set written over that slot after the captures and where
    the parent's record then has it."""

    slots: list[int]
    slot: int
    write: dict[str, Any] | None = None  # the candidate's only: `{"slot", "inputs"}`, as the worker's `fresh`
    holds: tuple[int, int] | None = None  # the candidate's only: (position k in its slots, input set index)


@dataclass
class TimingRun:
    """What a workload's timing rounds gather, per function."""

    fns: list[tuple[str, WorkerProcess | None]]
    checked: int  # the round whose outputs are checked again
    samples: dict[str, list[float]]  # events times, rounds 1 on (ms)
    graph_samples: dict[str, list[float]]  # graph replay times (latency-bound workloads)
    reps: dict[str, int]  # timed calls per batch (3 in the estimate round, then sized by it)
    warmups: dict[str, int]
    # per round: function -> its first call on the round's fresh set / its other calls in the batch
    fresh_ratio: dict[int, dict[str, float | None]] = dataclasses.field(default_factory=dict)
    # ...and its first graph replay on the round's replay set / its other replays (latency-bound workloads)
    replay_fresh_ratio: dict[int, dict[str, float | None]] = dataclasses.field(default_factory=dict)
    unchecked_graphs: bool = False  # the checked round's graph batch of the candidate gave no times

    orders: list[list[tuple[str, WorkerProcess | None]]] = dataclasses.field(default_factory=list)  # rounds 1 on

    @classmethod
    def of(cls, fns: list[tuple[str, WorkerProcess | None]], checked: int, rounds: int) -> TimingRun:
        names = [f for f, _ in fns]
        return cls(fns, checked, {f: [] for f in names}, {f: [] for f in names}, {f: 3 for f in names},
                   {f: WARMUP_CALLS for f in names}, orders=balanced_orders(fns, rounds))


def balanced_orders(items: list, rounds: int) -> list[list]:
    """The order of the functions in each of `rounds` timed rounds: the cyclic shifts of a random order and of its
    reverse (2k orders for k functions), shuffled, repeated as needed. Over 2k rounds every function takes every
    place twice and follows each of its two neighbours in the cycle equally often (for three functions: all six
    orders, each once). The H200 caps its power at 700 W: a GEMM-bound kernel runs at 1980 MHz after the GPU
    idled and at 1605-1695 MHz once it has been busy for some 50 ms, 8-10% slower (bench/results/
    2026-12-04-h200-owed-15, `gap_*.log`), so what ran before a batch moves its time; orders drawn independently
    gave one function the favoured places more often in some evaluations (muon's fraction of expert 0.967-1.018)."""
    first = SHUFFLE.sample(items, len(items))
    cycle = [first[i:] + first[:i] for i in range(len(first))]
    cycle += [list(reversed(order)) for order in cycle]
    SHUFFLE.shuffle(cycle)
    return [cycle[i % len(cycle)] for i in range(rounds)]


@dataclass(frozen=True)
class Exported:
    """An input the trusted worker exported on the GPU (`ipc.export_copy`): the parent holds its description
    only, and hands it to the candidate's worker, which clones it."""

    desc: dict[str, Any]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(n) for n in self.desc["shape"])


def shape_of(value: Any) -> tuple[int, ...] | None:
    return tuple(value.shape) if isinstance(value, (torch.Tensor, Exported)) else None


class Evaluation:
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

    # -- workers --------------------------------------------------------------------------------
    def spawn(self, role: str, scratch: Path | None = None, spool: Path | None = None) -> WorkerProcess:
        """A new worker of `role`, its folders in this evaluation's scratch and spool unless others are given."""
        sandbox = None
        if role == "candidate" and self.options.sandbox:
            sandbox = Sandbox(SandboxSettings(), [Path(self.task.path)], self.device,
                              compiles="TRITON_INTERPRET" not in self.env)
        return WorkerProcess(role, self.device, spool or self.spool, scratch or self.work, self.env, sandbox)

    def prestart_key(self) -> tuple:
        """What a prestarted worker must have been started for: the same device, task, sandbox and environment."""
        return self.device, str(self.task.path), self.options.sandbox, tuple(sorted(self.env.items()))

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

    def alive_or_fresh(self, cand: WorkerProcess) -> WorkerProcess:
        """`cand` (the candidate's worker, nothing loaded yet) if a probe left it alive, else a fresh one."""
        if cand.alive:
            return cand
        cand.kill()
        return self.spawn("candidate")

    def check_device_inputs(self, cand: WorkerProcess) -> WorkerProcess:
        """Send a probe block device to device before the candidate's code loads; if the route fails there, the
        evaluation falls back to files (an import failing later could not be told from the candidate's doing).
        The candidate's worker to load the candidate into: `cand`, or a fresh one if the probe killed it."""
        seed = secrets.randbits(16)
        try:
            probe = self.trusted_request({"op": "ipc_probe", "seed": seed})
            got = cand.request({"op": "ipc_check", "input": probe["input"]}, self.options.load_timeout_s)["sum"]
            sent = probe["sum"]
            problem = None if got == sent else f"the probe block arrived changed (sum {got}, {sent} sent)"
        except InfraError as exc:
            problem = str(exc)
        except (RequestFailed, WorkerFault) as exc:
            problem = f"the candidate's worker could not import the probe block: {exc}"
            cand = self.alive_or_fresh(cand)
        self.export_inputs = problem is None
        self.result.environment["device_inputs"] = "on" if problem is None else f"off (files instead): {problem}"
        return cand

    def check_device_outputs(self, cand: WorkerProcess) -> WorkerProcess:
        """Import a probe block from each worker (the candidate's before its code loads) and check its sum; where
        either fails, results travel through files and `environment.device_outputs` says why. The candidate's
        worker to load the candidate into: `cand`, or a fresh one if the probe killed it."""
        problem = None
        for role in ("trusted", "candidate"):
            message = {"op": "ipc_probe", "seed": secrets.randbits(16)}
            try:
                probe = (self.trusted_request(message) if role == "trusted"
                         else cand.request(message, self.options.load_timeout_s))
                got = int(ipc.import_clone(probe["input"], torch.device(self.device), check_size=True).sum())
            except (InfraError, RequestFailed, WorkerFault, RuntimeError, ValueError) as exc:
                problem = f"the parent could not import the {role} worker's probe block: {exc}"[:300]
            else:
                if got != probe["sum"]:
                    problem = f"the {role} worker's probe block arrived changed (sum {got}, {probe['sum']} sent)"
            if problem:
                break
        cand = self.alive_or_fresh(cand)
        self.export_outputs = problem is None
        self.result.environment["device_outputs"] = "on" if problem is None else f"off (files instead): {problem}"
        return cand

    def export_flag(self) -> dict[str, bool]:
        """What a request whose reply carries results adds to ask for them device to device (`device_outputs`)."""
        return {"export_results": True} if self.export_outputs else {}

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
        raise AssertionError("unreachable")

    def restore_trusted_slots(self) -> None:
        """Give a replaced trusted worker the input sets back: exported ones made again from their seeds (the
        blocks died with the old worker), the others from the parent's copies."""
        for name, sets in self.inputs.items():
            for i, values in sets.items():
                if any(isinstance(v, Exported) for v in values):
                    reply = self.trusted.request(self.make_inputs_request(self.task.workload(name), i),
                                                 self.options.call_timeout_s)
                    sets[i] = self.unpack(reply["inputs"], self.trusted, inputs=True)
                    continue
                self.trusted.request(
                    {"op": "put_inputs", "slot": self.slot_id(name, i), "inputs": self.pack(values, self.trusted)},
                    self.options.call_timeout_s,
                )

    def make_inputs_request(self, workload: Workload, i: int) -> dict[str, Any]:
        return {"op": "make_inputs", "workload": workload_dict(workload), "slot": self.slot_id(workload.name, i),
                "seed": derive_seed(self.secret, workload.name, i), "export": self.export_inputs}

    def pack(self, values: list[Any], worker: WorkerProcess) -> list[dict[str, Any]]:
        """Values for `worker`, in its own spool folder: the trusted worker's input files hard-linked (read-only)
        where the worker is a candidate confined to a uid of its own, which cannot write them; else copied."""
        link = worker is self.cand and worker.sandbox is not None and worker.sandbox.status.get("uid") is not None
        with self.phase("parent.pack", into="requests_s"):
            return [v.desc if isinstance(v, Exported) else (link and self.linked(v, worker))
                    or channel.pack_value(v, worker.spool) for v in values]

    def linked(self, value: Any, worker: WorkerProcess) -> dict[str, Any] | None:
        """`value` as a link to the trusted worker's file in `worker`'s spool, if it is one of its inputs."""
        entry = self.input_files.get(id(value))
        if entry is None or entry[0] is not value:
            return None
        return channel.link_value(value, entry[1], worker.spool)

    def unpack(self, descs: list[dict[str, Any]], worker: WorkerProcess, inputs: bool = False) -> list[Any]:
        """Values from `worker`'s spool folder (the trusted worker's mapped, the candidate's copied). The
        trusted worker's `inputs` keep their files, for `pack` to link (removed with the spool)."""
        mapped = worker is self.trusted
        # The candidate's worker stopped while its exported blocks are cloned: none of its threads can free one
        # under the parent's mapping (a read of freed memory would fault the evaluator's own CUDA context).
        blocks = worker is self.cand and any(ipc.is_exported(d) for d in descs)
        with self.phase("parent.unpack", into="requests_s"), worker.paused() if blocks else nullcontext():
            try:
                values = [self.unpack_exported(d, worker) if ipc.is_exported(d) else
                          channel.unpack_value(d, worker.spool, mapped=mapped, consume=not (mapped and inputs))
                          for d in descs]
            except Exception as exc:  # noqa: BLE001 - whatever a forged description makes reading raise
                if worker is not self.cand:
                    raise
                raise self.malformed_reply(f"results ({type(exc).__name__}: {exc})"[:500]) from None
        if mapped and inputs:
            for d, v in zip(descs, values, strict=True):
                if isinstance(v, torch.Tensor) and v.numel():
                    self.input_files[id(v)] = (v, worker.spool / d["tensor"])
        return values

    def unpack_exported(self, desc: dict[str, Any], worker: WorkerProcess) -> Any:
        """A value a worker exported on the GPU. The trusted worker's inputs stay descriptions (`Exported`, for the
        candidate's worker to clone); results (`"result"`) are cloned here at once, and only where this evaluation
        asked for them that way: the parent opens no handle of the candidate's worker otherwise."""
        if not desc.get("result"):
            if worker is self.trusted:
                return Exported(desc)
            raise channel.ProtocolError("the candidate's worker sent an input's device handle")
        if not self.export_outputs:
            raise channel.ProtocolError(f"the {worker.role} worker sent a device handle that was not asked for")
        return ipc.import_clone(desc, torch.device(self.device), check_size=worker is not self.trusted)

    def put_report_inputs(self, workload: Workload, worker: WorkerProcess, timeout: float) -> None:
        """Make `workload`'s inputs (seed 0) in the trusted worker and put them into `worker`'s slot 0: the
        inputs of a report (compile, ncu), never of a verdict."""
        reply = self.trusted_request({"op": "make_inputs", "workload": workload_dict(workload), "slot": 0, "seed": 0})
        inputs = self.pack(self.unpack(reply["inputs"], self.trusted), worker)
        worker.request({"op": "put_inputs", "slot": 0, "inputs": inputs}, timeout)

    def record_sandbox(self) -> None:
        """What confined the candidate's worker, as the sandbox reported it."""
        sandbox = self.cand.sandbox if self.cand else None
        self.result.environment["sandbox"] = sandbox.status if sandbox else {"active": [], "disabled": True}
        if sandbox is not None and sandbox.cache_files is not None:  # a warm compile cache, or a cold one (0)
            self.result.environment["compile_cache_files"] = sandbox.cache_files

    def candidate_fault(self, exc: RequestFailed | WorkerFault, workload: Workload) -> Failure:
        """Turn a candidate worker's failure into a verdict, replacing the worker if it died."""
        if exc.stopped_by:
            verdict, what = SANDBOX_VERDICTS[exc.stopped_by]
            failure = Failure(verdict, exc.stopped_by, f"{what}: {exc}", workload.name)
        elif isinstance(exc, RequestFailed):
            if exc.cuda_fault:
                failure = Failure("crash", "cuda_error", f"CUDA fault: {exc.message}", workload.name)
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

    # -- correctness -------------------------------------------------------------------------------
    def prepare_workload(self, workload: Workload) -> None:
        """Make the input sets in the trusted worker and keep copies; the oracle's outputs for them are worked out
        on a thread of their own, beside the candidate's checked calls (`expected_outputs` waits for a set's,
        `settle_oracles` for all). Until they are settled the trusted worker is that thread's alone."""
        name = workload.name
        self.inputs[name], self.expected[name] = {}, {}
        sets = range(self.task.correctness_sets + 1)  # the last set rewrites slot 0 in place
        for i in sets:
            self.make_set(workload, i, oracle=False)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=ORACLE_THREAD)
        self.oracles[name] = {i: pool.submit(self.set_oracle, workload, i) for i in sets}
        pool.shutdown(wait=False)  # its thread works through the sets, then ends

    def expected_outputs(self, name: str, i: int) -> list[Any]:
        """The oracle's outputs for input set `i`, once its thread has them (its failure raised here)."""
        future = self.oracles.get(name, {}).get(i)
        if future is not None:
            future.result()
        return self.expected[name][i]

    def settle_oracles(self, name: str) -> None:
        """Wait until every oracle call of the workload has ended (the trusted worker free again); the first
        failure among them raised."""
        futures = list(self.oracles.pop(name, {}).values())
        wait_futures(futures)
        for future in futures:
            future.result()

    def make_set(self, workload: Workload, i: int, oracle: bool = True) -> None:
        """Input set `i` made in the trusted worker (its slot), a copy kept, and (with `oracle`) the oracle's
        outputs for it."""
        name = workload.name
        reply = self.trusted_request(self.make_inputs_request(workload, i))
        self.inputs[name][i] = self.unpack(reply["inputs"], self.trusted, inputs=True)
        self.derived.setdefault(name, {})[i] = reply.get("derived", {})
        if oracle:
            self.set_oracle(workload, i)

    def set_oracle(self, workload: Workload, i: int) -> None:
        """The oracle's outputs for input set `i` (and the inputs it writes in place), kept as `expected`."""
        name, written = workload.name, self.task.written_inputs
        oracle = self.trusted_request(
            {"op": "call", "fn": "oracle", "slot": self.slot_id(name, i), "return_inputs": bool(written),
             **self.export_flag()}
        )
        outs = self.unpack(oracle["outputs"], self.trusted)
        self.expected_strides[name] = [d.get("strides") for d in oracle["outputs"]]
        if written:
            after = self.unpack(oracle["inputs"], self.trusted)
            outs += [after[k] for k in written]
        self.expected[name][i] = outs

    def check_tolerance_discriminates(self, workload: Workload) -> None:
        """Trivial outputs must fail the task's comparison: zeros, the oracle's mean as a constant, and
        the oracle's output for another input set (no input sensitivity). If one passes, a passing
        candidate proves nothing: the task's tolerance is at fault, an infra failure, never a pass."""
        name = workload.name
        sets = self.expected[name]
        for k, spec in enumerate(self.compared_specs()):
            expected = sets[0][k]
            if spec.compare not in ("allclose", "fp8") or expected.numel() < 2:
                continue
            dtype = getattr(torch, workload.dtype if spec.dtype == "workload" else spec.dtype)
            mean = float(expected.double().nan_to_num().mean())
            trivial = {
                "all zeros": torch.zeros(expected.shape, dtype=dtype),
                f"the constant {mean:.4g}": torch.full(expected.shape, mean).to(dtype),
                "the output of another input set": sets[1][k].to(dtype),
            }
            expected = expected.to(self.device)
            for label, value in trivial.items():
                if compare_output(spec, value.to(self.device), expected, workload.dtype) is None:
                    raise InfraError(f"task {self.task.id}, workload {name}: output {spec.name} passes the "
                                     f"comparison with {label}; its tolerance cannot tell a kernel from a trivial "
                                     "output")

    def check_workload(self, workload: Workload, wr: WorkloadResult) -> None:
        name, sets = workload.name, self.task.correctness_sets
        self.slot_set[name] = {}
        for i in range(sets):
            self.cand.request(
                {"op": "put_inputs", "slot": self.slot_id(name, i),
                 "inputs": self.pack(self.inputs[name][i], self.cand)},
                self.options.call_timeout_s,
            )
            self.slot_set[name][i] = i
            if not self.checked_call(workload, wr, slot=i, expected_set=i):
                return
        if self.options.reference_error:
            reply = self.trusted_request({"op": "call", "fn": "reference", "slot": self.slot_id(name, 0),
                                          "return_inputs": True, **self.export_flag()})
            wr.reference_error = self.errors(workload, 0, self.unpack(reply["outputs"], self.trusted),
                                             self.unpack(reply["inputs"], self.trusted))
        # Fresh inputs written over set 0 at the same addresses must give fresh outputs.
        if list(map(shape_of, self.inputs[name][0])) != list(map(shape_of, self.inputs[name][sets])):
            raise InfraError(f"task {self.task.id}: make_inputs gives input shapes that depend on the seed "
                             f"(workload {name}); shapes must depend on the workload only")
        self.cand.request(
            {"op": "put_inputs", "slot": self.slot_id(name, 0), "inputs": self.pack(self.inputs[name][sets], self.cand),
             "in_place": True},
            self.options.call_timeout_s,
        )
        self.slot_set[name][0] = sets
        self.checked_call(workload, wr, slot=0, expected_set=sets, stale_check=True, trace=True)

    def checked_call(self, workload: Workload, wr: WorkloadResult, slot: int, expected_set: int,
                     stale_check: bool = False, trace: bool = False) -> bool:
        """One guarded, poisoned call (with `trace`, its kernels and aten ops listed); records failures on `wr`;
        True when everything held."""
        name = workload.name
        reply = self.cand.request(
            {"op": "call", "fn": "run", "slot": self.slot_id(name, slot), "guard": True, "poison": True,
             "return_inputs": True, "check_inputs": True, "trace": trace, **self.export_flag()},
            self.options.call_timeout_s,
        )
        self.check_candidate_reply(reply, {"outputs": list, "inputs": list, "findings": dict})
        outputs = self.unpack(reply["outputs"], self.cand)
        after = self.unpack(reply["inputs"], self.cand)
        findings = reply["findings"]
        if findings.get("trace_error"):  # the profiler's fault, not the candidate's: noted, no verdict
            self.result.environment["kernel_trace_error"] = str(findings["trace_error"])[:300]
        failures = self.integrity_failures(findings, workload)
        failures += self.mutation_failures(workload, findings)
        mismatch = self.compare(workload, expected_set, outputs, after, [d.get("strides") for d in reply["outputs"]])
        if mismatch is not None:
            reason, detail = mismatch
            earlier = self.matches_earlier_set(workload, expected_set, outputs, after)
            if earlier is not None:
                failures.append(Failure("integrity", "stale_output",
                                        f"the outputs are those of an earlier input set ({earlier}), not of these "
                                        f"inputs: {detail}", name))
            elif stale_check and reason in ("mismatch", "nan"):
                failures.append(Failure("integrity", "stale_output",
                                        "inputs rewritten in place at the same addresses gave outputs that do not "
                                        f"match the new inputs: {detail}", name))
            else:
                failures.append(Failure("incorrect", reason, detail, name))
        elif expected_set == 0:
            wr.error = self.errors(workload, 0, outputs, after)
        for f in failures:
            self.result.add(f)
            wr.errors.append(f"{f.verdict}/{f.reason}: {f.detail}")
        return not failures

    def matches_earlier_set(self, workload: Workload, expected_set: int, outputs: list[Any],
                            after: list[Any]) -> int | None:
        """The earlier input set whose expected outputs these outputs match (a cached result), if any."""
        for i in range(expected_set if expected_set < self.task.correctness_sets else self.task.correctness_sets):
            if i != expected_set and self.compare(workload, i, outputs, after, []) is None:
                return i
        return None

    def integrity_failures(self, findings: dict[str, Any], workload: Workload) -> list[Failure]:
        name, out = workload.name, []
        if findings.get("launches", 0) < 1:
            out.append(Failure("integrity", "no_triton_launch", "the call launched no Triton kernel", name))
        ops = findings.get("forbidden_ops") or {}
        if ops:
            listed = ", ".join(f"aten.{op} x{n}" for op, n in sorted(ops.items()))
            out.append(Failure("integrity", "aten_op", f"torch did work inside the call: {listed}", name))
        if findings.get("aliasing"):
            out.append(Failure("integrity", "alias", "; ".join(findings["aliasing"]), name))
        kernels = findings.get("kernels") or {}
        if kernels.get("foreign"):
            out.append(Failure("integrity", "foreign_kernel",
                               f"the call ran kernels that are neither its Triton kernels nor torch's "
                               f"initialisation or copy kernels: {', '.join(kernels['foreign'][:5])}", name))
        if kernels.get("ops") and not ops:
            out.append(Failure("integrity", "aten_op", "torch did work inside the call with the op guard switched "
                               f"off: {', '.join('aten.' + op for op in kernels['ops'][:8])}", name))
        if kernels.get("streams"):
            out.append(Failure("integrity", "side_stream",
                               f"the call's kernels ran on {len(kernels['streams'])} streams", name))
        if findings.get("late_writes"):
            out.append(Failure("integrity", "side_stream",
                               f"{', '.join(findings['late_writes'])} changed after the call's stream was "
                               "synchronized: work left running on another stream or in a thread", name))
        if findings.get("not_tensor"):
            out.append(Failure("integrity", "not_plain_tensor",
                               f"outputs {findings['not_tensor']} are not plain torch.Tensor objects", name))
        return out

    def mutation_failures(self, workload: Workload, findings: dict[str, Any]) -> list[Failure]:
        """Inputs not declared as written must stay bit for bit unchanged (checked in the worker, on the device)."""
        if "mutated" not in findings:
            return [Failure("integrity", "forged_result", "the worker's reply lacks the unchanged-input check",
                            workload.name)]
        changed = [self.task.inputs[int(i)].name for i in findings["mutated"]
                   if int(i) not in self.task.written_inputs]
        if changed:
            return [Failure("integrity", "input_mutated", f"the call modified its inputs {changed}", workload.name)]
        return []

    def compared_specs(self) -> list:
        """The specs of the compared values: returned outputs, then the inputs written in place."""
        by_name = {o.name: o for o in self.task.outputs}
        return list(self.task.returned_outputs) + [by_name[self.task.inputs[i].name] for i in self.task.written_inputs]

    def compared_values(self, outputs: list[Any], after: list[Any]) -> list[Any]:
        """What is compared with the oracle, in `compared_specs` order: the outputs, then the written inputs."""
        return list(outputs) + [after[k] for k in self.task.written_inputs]

    def compare(self, workload: Workload, expected_set: int, outputs: list[Any], after: list[Any],
                strides: list[Any]) -> tuple[str, str] | None:
        """Compare with the oracle: (reason, detail) of the first difference, or None."""
        with self.phase("parent.compare", into="requests_s"):
            return self._compare(workload, expected_set, outputs, after, strides)

    def _compare(self, workload: Workload, expected_set: int, outputs: list[Any], after: list[Any],
                 strides: list[Any]) -> tuple[str, str] | None:
        n_returned = len(self.task.returned_outputs)
        if len(outputs) != n_returned or any(not isinstance(o, torch.Tensor) for o in outputs):
            return "output_count", (f"returned {len(outputs)} value(s) of types {[type(o).__name__ for o in outputs]}; "
                                    f"the task returns {n_returned} tensor(s)")
        expected = self.expected_outputs(workload.name, expected_set)
        got = self.compared_values(outputs, after)
        specs = self.compared_specs()
        if any(spec.compare == "custom" for spec in specs):
            message = self.custom_check(workload, expected_set, got, expected)
            if message:
                return "check_failed", message
        want_strides = self.expected_strides[workload.name]
        for k, spec in enumerate(specs):
            if spec.compare == "custom":
                continue
            # On a GPU machine the parent compares on the GPU: a CPU pass over a gigabyte output takes seconds.
            mismatch = compare_output(
                spec, got[k].to(self.device), expected[k].to(self.device), workload.dtype,
                got_strides=strides[k] if k < len(strides) else None,
                expected_strides=want_strides[k] if k < len(want_strides) else None,
            )
            if mismatch:
                return mismatch.reason, mismatch.detail
        return None

    def errors(self, workload: Workload, expected_set: int, outputs: list[Any], after: list[Any]) -> dict[str, float]:
        """Each compared output's distance from the oracle (`compare.output_error`), where it has one."""
        got = self.compared_values(outputs, after)
        out = {}
        for spec, g, e in zip(self.compared_specs(), got, self.expected_outputs(workload.name, expected_set),
                              strict=False):
            if isinstance(g, torch.Tensor):
                value = output_error(spec, g.to(self.device), e.to(self.device))
                if value is not None:
                    out[spec.name] = value
        return out

    def custom_check(self, workload: Workload, expected_set: int, got: list[Any], expected: list[Any]) -> str | None:
        from d2kbench.evaluate.taskcode import reference_module

        check = getattr(reference_module(self.task), "check", None)
        if check is None:
            raise InfraError(f"task {self.task.id} has a custom comparison but reference.py defines no check()")
        with one_cpu_thread():
            return check(tuple(got), tuple(expected), tuple(self.inputs[workload.name][expected_set]))

    # -- timing ------------------------------------------------------------------------------------
    def time_workload(self, workload: Workload, wr: WorkloadResult) -> None:
        name = workload.name
        slots = self.candidate_slots(name)
        fns = [("reference", self.trusted), ("candidate", self.cand)]
        if self.options.expert:
            fns.append(("expert", self.trusted))
        if self.options.comparator:
            fns.append(("comparator", self.trusted))
        # The round whose outputs are checked again, drawn here and told to no one: every round starts the same
        # way (the candidate's input sets moved between its slots, a fresh set in one of them), so a candidate that
        # counts calls, watches for the rotation or fingerprints its inputs cannot tell it from the rest and cheat
        # around it. Only the checked round's fresh set needs the oracle's outputs.
        run = TimingRun.of(fns, checked=1 + secrets.randbelow(self.options.rounds), rounds=self.options.rounds)
        fresh = {rnd: self.task.correctness_sets + rnd for rnd in range(1, self.options.rounds + 1)}
        for rnd, index in fresh.items():
            self.make_set(workload, index, oracle=(rnd == run.checked))
        replay_sets = self.make_replay_sets(workload, run)
        self.batch_walls = {}
        if not self.gpu_uncontended(workload, wr):
            return
        for rnd in range(self.options.rounds + 1):  # round 0 estimates each function's time
            if not self.timed_round(workload, wr, run, slots, rnd, fresh.get(rnd), replay_sets.get(rnd)):
                return
        if run.unchecked_graphs:  # its other rounds' graphs cannot count unchecked: its events time is scored
            run.graph_samples["candidate"] = []
            wr.errors.append("candidate: no CUDA graph in the round whose graph outputs were checked; graph "
                             "times not scored")
        if not self.gpu_uncontended(workload, wr):
            return
        for fn, values in run.samples.items():
            g = run.graph_samples[fn]
            wr.timings[fn] = Timing(
                median_ms=statistics.median(values), min_ms=min(values), max_ms=max(values), samples=len(values),
                graph_median_ms=statistics.median(g) if g else None,
            )
        self.check_unaccounted_time(workload, wr)  # first: times it cannot vouch for make the ratios below moot
        self.check_fresh_sets(workload, wr, run)
        self.score_workload(workload, wr)

    def make_replay_sets(self, workload: Workload, run: TimingRun) -> dict[int, int]:
        """Round -> the input set of its graph batches (latency-bound workloads whose sets differ only in tensors),
        made here (the oracle's outputs for the checked round's): the candidate's worker writes it over the slot of
        the round's fresh set after the captures and replays that slot first (`Timer.time_graphs`). The round's
        fresh set cannot serve: the events batch has called it, and the capture calls every slot."""
        if not workload.latency_bound or not self.sets_can_move(workload):
            return {}
        first = self.task.correctness_sets + self.options.rounds
        replay = {rnd: first + rnd for rnd in range(1, self.options.rounds + 1)}
        for rnd, index in replay.items():
            self.make_set(workload, index, oracle=(rnd == run.checked))
        return replay if self.sets_can_move(workload) else {}

    def timed_round(self, workload: Workload, wr: WorkloadResult, run: TimingRun, slots: list[int], rnd: int,
                    fresh_index: int | None, replay_index: int | None = None) -> bool:
        """Round `rnd` of a workload's timing: the candidate's sets moved between its slots and input set
        `fresh_index` put over one of them (rounds 1 on; its graph batch writes `replay_index` there after its
        captures), each function's batches, the replaced set put back. False where a request failed (its failure
        recorded)."""
        name = workload.name
        fresh_in = None  # the candidate's slot that holds this round's fresh set
        fresh_write = None  # ...written there by its worker inside its events batch, after the warm-up
        replay_write = None  # ...and the replay set, written there inside its graph batch, after the captures
        if rnd > 0:
            if not self.rotate_candidate_slots(workload, slots):
                return False
            k = secrets.randbelow(len(slots))
            fresh_in, replaced = slots[k], self.slot_set[name][k]
            fresh_write = {"slot": fresh_in, "inputs": self.pack(self.inputs[name][fresh_index], self.cand)}
            self.slot_set[name][k] = fresh_index
            if replay_index is not None:
                replay_write = {"slot": fresh_in, "inputs": self.pack(self.inputs[name][replay_index], self.cand)}
        # The baselines time the input sets that the candidate holds: its slot 0 was rewritten with the last set
        # (the stale check), one slot holds this round's fresh set, and a workload whose sets differ in work (drawn
        # lengths) must not be timed on others. In the candidate's order, so that the fresh set takes the same
        # place in every function's batch.
        trusted_slots = [self.slot_id(name, self.slot_set[name][j]) for j in range(len(slots))]
        # Each timed round in an order of its own, the orders balanced over the rounds (`balanced_orders`): a
        # batch's place in the round (after which other batch, which probe) must not favour one function. In a
        # fixed order the expert's graph replays came out 0.13 us faster than the candidate's on average (35 pairs,
        # bench/results/2026-12-04-h200-owed-9 to -12) while their events times agreed.
        for fn, worker in run.fns if rnd == 0 else run.orders[rnd - 1]:
            fn_slots = slots if fn == "candidate" else trusted_slots
            fresh_slot = None  # its slot of the fresh set, left out of the warm-up
            replay = None
            if fresh_in is not None:
                fresh_slot = fresh_in if fn == "candidate" else self.slot_id(name, fresh_index)
                fn_slots = fresh_first(fn_slots, fresh_slot)
                if replay_write is not None and fn == "candidate":
                    replay = ReplayFresh(fn_slots, fresh_in, replay_write, (k, replay_index))
                elif replay_write is not None:  # the baselines replay the replay set's own slot first
                    own = self.slot_id(name, replay_index)
                    replay = ReplayFresh([own if s == fresh_slot else s for s in fn_slots], own)
            if not self.time_function(workload, wr, run, rnd, fn, worker, fn_slots, fresh_slot,
                                      fresh_write if fn == "candidate" else None, replay):
                return False
        if rnd == 0:
            return True
        # the set the fresh one replaced goes back where the round's set is now (a recheck moves sets)
        now = next(j for j, held in self.slot_set[name].items() if held in (fresh_index, replay_index))
        return self.put_set(workload, slots, now, replaced) is not None

    def time_function(self, workload: Workload, wr: WorkloadResult, run: TimingRun, rnd: int, fn: str,
                      worker: WorkerProcess, fn_slots: list[int], fresh_slot: int | None,
                      fresh_write: dict[str, Any] | None = None, replay: ReplayFresh | None = None) -> bool:
        """One function's batches of round `rnd`: events (round 0: the estimate that sizes the later batches; the
        candidate's carries the round's fresh set, `fresh_write`) and, for a latency-bound workload, graph replays
        (with `replay`: the round's replay set replayed first). False where a request failed."""
        validate = rnd == run.checked
        times = self.timed_batch(workload, wr, fn, worker, fn_slots, run.reps[fn], graph=False,
                                 validate=validate, warmup=run.warmups[fn], unwarmed=fresh_slot,
                                 fresh_write=fresh_write)
        if times is None:
            return False
        if fresh_slot is not None:
            note_first_call(run.fresh_ratio, wr.fresh_calls, rnd, fn, times, fn_slots, fresh_slot)
        if rnd == 0:
            # A kernel of tens of ms needs few calls for a stable median: muon's 40-70 ms ones, three calls a
            # batch, spread 0.2-1.3% between evaluations (bench/results/2026-12-04-h200-owed-10)
            estimate = max(statistics.median(times), 1e-3)
            run.reps[fn] = max(MIN_REPS, len(fn_slots), min(MAX_REPS, int(self.options.batch_ms / estimate)))
            run.warmups[fn] = max(1, min(WARMUP_CALLS, math.ceil(WARMUP_MS / estimate)))
            self.batch_walls.pop(fn, None)  # an estimate: three calls, where request overhead dominates
            return True
        run.samples[fn] += times
        if workload.latency_bound:
            gslots = replay.slots if replay else fn_slots
            gtimes = self.timed_batch(workload, wr, fn, worker, gslots, run.reps[fn], graph=True,
                                      validate=validate, warmup=run.warmups[fn],
                                      fresh_write=replay and replay.write, holds=replay and replay.holds)
            if gtimes is None:
                return False
            if gtimes:
                run.graph_samples[fn] += gtimes
                if replay:
                    note_first_call(run.replay_fresh_ratio, wr.fresh_replays, rnd, fn, gtimes, gslots, replay.slot)
            else:
                if validate and fn == "candidate":
                    run.unchecked_graphs = True
                if replay and replay.holds:  # a failed capture may or may not have written the replay set: again
                    k, index = replay.holds
                    return self.put_set(workload, self.candidate_slots(workload.name), k, index) is not None
        return True

    def check_unaccounted_time(self, workload: Workload, wr: WorkloadResult) -> None:
        """The parent's clock against the candidate's own timer. Each function's event-timed batches take wall time
        for the calls the worker reports plus overhead (the L2 flush, launches, the request); the baselines'
        overhead bounds what an honest candidate's should be. A timer patched to report less leaves the rest as
        unaccounted wall time: `integrity/patched_timer` once it is above `HIDDEN_SHARE` of the reported kernel time
        and `HIDDEN_MIN_MS`. (A cheat that also skips the flush and the head start, which run in its process too,
        wins their time back: about 0.3 ms per call on the H200.)"""
        wr.unaccounted_ms = {fn: round(unaccounted_ms(batches), 4) for fn, batches in self.batch_walls.items()}
        baselines = [v for fn, v in wr.unaccounted_ms.items() if fn != "candidate"]
        if "candidate" not in wr.unaccounted_ms or not baselines:
            return
        hidden = wr.unaccounted_ms["candidate"] - max(baselines)
        reported = wr.timings["candidate"].median_ms
        if hidden > max(HIDDEN_SHARE * reported, HIDDEN_MIN_MS):
            self.result.add(Failure(
                "integrity", "patched_timer",
                f"the candidate's timed batches took {hidden:.3f} ms per call more wall time than its reported kernel "
                f"time ({reported:.3f} ms median) and the baselines' overhead ({max(baselines):.3f} ms) explain",
                workload.name))

    @contextmanager
    def gpu_to_trusted(self):
        """The GPU to the trusted worker alone, as the baselines are timed: under the GPU lock, the candidate's
        process group stopped (once it is started)."""
        with gpu_lock(self.device), self.cand.paused() if self.cand is not None else nullcontext():
            yield

    def trusted_request_alone(self, message: dict[str, Any]) -> dict[str, Any]:
        with self.gpu_to_trusted():
            return self.trusted_request(message)

    def gpu_ceilings(self) -> dict[str, float]:
        """This GPU's copy bandwidth and GEMM rate (cached per GPU, and kept here for the evaluation), measured
        the first time with the GPU to the trusted worker alone: before the candidate's code is loaded (`_run`),
        or with it stopped."""
        if self.ceilings is None:
            try:
                self.ceilings = hardware.ceilings(self.device, self.trusted_request_alone)
            except hardware.SharedGpu as exc:
                raise InfraError(str(exc), "gpu_contended") from exc
        return self.ceilings

    def quiet(self, workload: Workload, wr: WorkloadResult, ceiling: float, wait_s: float, when: str) -> float:
        """The trusted worker's copy probe as a share of `ceiling`, probing again for up to `wait_s` until it
        reaches `CONTENDED_SHARE` (the seconds spent go to `wr.drained_s`). The caller holds the GPU lock, the
        candidate stopped: what still lowers the share is work queued before the stop (it drains) or another
        process. Still below it, this workload's times would not be honest: an `infra` failure, never a score."""
        reply = self.trusted_request({"op": "probe", "min_rate": CONTENDED_SHARE * ceiling, "wait_s": wait_s})
        share, waited = reply["copy_bytes_per_s"] / ceiling, float(reply.get("waited_s", 0.0))
        wr.drained_s += waited
        if share < CONTENDED_SHARE:
            self.result.add(Failure(
                "infra", "gpu_contended",
                f"{when}, the GPU gave a copy probe {share:.0%} of its measured {ceiling / 1e12:.2f} TB/s, still "
                f"after {waited:.1f} s with the candidate stopped: something else runs on it (another process, or "
                "work the candidate queued before it was stopped); times not scored", workload.name))
        return share

    def gpu_uncontended(self, workload: Workload, wr: WorkloadResult) -> bool:
        """`quiet`, waiting up to `quiet_wait_s`, before and after a workload's timings."""
        ceiling = self.gpu_ceilings()["copy_bytes_per_s"]
        with self.gpu_to_trusted():
            share = self.quiet(workload, wr, ceiling, self.options.quiet_wait_s, "before or after the timings")
        wr.gpu_probe.append(float(f"{share:.3g}"))
        return share >= CONTENDED_SHARE

    def rotate_candidate_slots(self, workload: Workload, slots: list[int]) -> bool:
        """Before each timed round, move the input sets between the candidate's slots in place, so outputs
        cached by pointer or call count in the timed runs no longer match (False on a fault)."""
        if not self.ask_candidate(workload, {"op": "rotate", "slots": slots}):
            return False
        self.sets_moved_along(workload)
        return True

    def ask_candidate(self, workload: Workload, message: dict[str, Any]) -> bool:
        """One request to the candidate's worker between timed batches; False, its fault recorded, where it fails."""
        try:
            self.cand.request(message, self.options.call_timeout_s)
        except (RequestFailed, WorkerFault) as exc:
            self.result.add(self.candidate_fault(exc, workload))
            return False
        return True

    def put_set(self, workload: Workload, slots: list[int], k: int, index: int) -> int | None:
        """Write input set `index` in place over the candidate's slot `k`; the set the slot held, or None on a
        fault."""
        if not self.ask_candidate(workload, {"op": "put_inputs", "slot": slots[k], "in_place": True,
                                             "inputs": self.pack(self.inputs[workload.name][index], self.cand)}):
            return None
        replaced = self.slot_set[workload.name][k]
        self.slot_set[workload.name][k] = index
        return replaced

    def check_fresh_sets(self, workload: Workload, wr: WorkloadResult, run: TimingRun) -> None:
        """Per round, the candidate's first call on the fresh input set against its calls on the sets it had seen,
        over the reference's same ratio; their median `FRESH_SLOWDOWN` or more is `integrity/input_cache`, outputs
        served from a cache keyed by the inputs' contents. The median over the rounds: one slow call can be a
        hiccup of the GPU. Judged on the batches whose times are scored: the events batches' first calls, or, for
        a workload scored on its graph replays, the first replays on each round's replay set (a cache kept on
        the device inside the captured graph)."""
        wr.replay_fresh_slowdown = [round(v, 3) for v in map(fresh_slowdown, run.replay_fresh_ratio.values())
                                    if v is not None]
        wr.fresh_slowdown = [round(v, 3) for v in map(fresh_slowdown, run.fresh_ratio.values()) if v is not None]
        if scored_on_graphs(workload, wr):
            ratios, first, others = wr.replay_fresh_slowdown, "first graph replays", "replays"
        else:
            ratios, first, others = wr.fresh_slowdown, "first calls", "calls"
        if not ratios:
            return
        slowdown = statistics.median(ratios)
        if slowdown >= FRESH_SLOWDOWN:
            self.result.add(Failure(
                "integrity", "input_cache",
                f"its {first} on input sets it had not seen took {slowdown:.1f}x its {others} on the sets it had "
                "seen (the median over the rounds), relative to the reference's: outputs served from a cache keyed "
                "by the inputs' contents", workload.name))

    def sets_can_move(self, workload: Workload) -> bool:
        """Whether the graph recheck may move the input sets between the slots: only tensors change under a
        captured graph, so every other input must be the same in every set."""
        sets = list(self.inputs[workload.name].values())  # the last one too: it was written over slot 0
        return all(isinstance(v, torch.Tensor | Exported) or all(s[k] == v for s in sets)
                   for k, v in enumerate(sets[0]))

    def sets_moved_along(self, workload: Workload) -> None:
        """Record that the candidate's worker moved the input sets one slot along (slot k holds slot k+1's)."""
        held = self.slot_set[workload.name]
        self.slot_set[workload.name] = {k: held[(k + 1) % len(held)] for k in range(len(held))}

    def timed_batch(self, workload: Workload, wr: WorkloadResult, fn: str, worker: WorkerProcess,
                    slots: list[int], reps: int, graph: bool, validate: bool,
                    warmup: int = WARMUP_CALLS, unwarmed: int | None = None,
                    fresh_write: dict[str, Any] | None = None,
                    holds: tuple[int, int] | None = None) -> list[float] | None:
        """One timed batch of `fn` on `slots` (graph replays with `graph`): its times (ms), or None where it failed
        ([] for a graph capture that failed). `validate`: the candidate's outputs come back and are compared with
        the oracle's for the sets its slots hold; `holds` = (k, index): once the batch has run, its slot k holds set
        `index` (its worker wrote `fresh_write` there)."""
        returned = validate and fn == "candidate"
        move_sets = returned and graph and self.sets_can_move(workload)
        message = {"op": "time", "fn": "run" if fn == "candidate" else fn, "slots": slots, "reps": reps,
                   "warmup": warmup, "unwarmed": unwarmed, "graph": graph, "return_outputs": returned,
                   "move_sets": move_sets, "fresh": fresh_write, **self.export_flag()}
        ceiling = self.gpu_ceilings()["copy_bytes_per_s"] if worker is self.trusted else 0.0
        with gpu_lock(self.device):
            start = time.perf_counter()
            try:
                if worker is self.trusted:
                    with self.cand.paused():  # nothing of the candidate's runs beside the baselines...
                        # ...once what it queued on the GPU before the stop has drained (a stopped thread's
                        # copies still ran and slowed the reference 2.6x: bench/results/2026-12-03-h200-owed-2)
                        before = self.quiet(workload, wr, ceiling, self.options.quiet_wait_s,
                                            f"before the {fn}'s timed batch")
                        if before < CONTENDED_SHARE:
                            return None
                        sent = time.perf_counter()
                        reply = self.trusted_request(message)
                        request_ms = (time.perf_counter() - sent) * 1e3
                        after = self.quiet(workload, wr, ceiling, SETTLE_S, f"right after the {fn}'s timed batch")
                        if after < CONTENDED_SHARE:
                            return None
                else:
                    sent = time.perf_counter()
                    reply = worker.request(message, self.options.call_timeout_s)
                    request_ms = (time.perf_counter() - sent) * 1e3
            except RequestFailed as exc:
                if graph:
                    wr.errors.append(f"{fn}: CUDA graph capture failed ({exc.error}); graph time not reported")
                    return []
                self.result.add(self.candidate_fault(exc, workload))
                return None
            except WorkerFault as exc:
                self.result.add(self.candidate_fault(exc, workload))
                return None
            wall_ms = (time.perf_counter() - start) * 1e3
        if worker is self.cand:
            try:
                self.check_candidate_reply(reply, {"times_ms": list, **({"outputs": dict, "inputs": dict}
                                                                        if returned else {})})
                keys = {str(s) for s in slots}
                if not all(type(t) in (int, float) for t in reply["times_ms"]) or returned and not (
                        set(reply["outputs"]) <= keys and set(reply["inputs"]) == set(reply["outputs"])):
                    raise self.malformed_reply("times or result slots")
            except WorkerFault as exc:
                self.result.add(self.candidate_fault(exc, workload))
                return None
        times = [float(t) for t in reply["times_ms"]]
        if holds is not None:
            self.slot_set[workload.name][holds[0]] = holds[1]
        if fn == "candidate" and reply.get("persisting_l2_bytes"):
            self.result.add(Failure("integrity", "persisting_l2",
                                    f"the candidate's process reserved {reply['persisting_l2_bytes']} bytes of L2 for "
                                    "persisting lines while timed: its data would survive the flush", workload.name))
            return None
        if fn == "candidate" and sum(times) > wall_ms * 1.05 + 1.0:
            self.result.add(Failure("integrity", "patched_timer",
                                    f"reported {sum(times):.2f} ms of kernel time in {wall_ms:.2f} ms of wall time",
                                    workload.name))
        if not graph and not validate and times:  # a validated batch also writes its outputs out
            self.batch_walls.setdefault(fn, []).append((request_ms, times, warmup))
        if returned:
            if move_sets:  # its outputs come from a replay after the worker moved the sets along (`replay_recheck`)
                self.sets_moved_along(workload)
            for slot_key, descs in reply["outputs"].items():
                index = int(slot_key) - self.slot_id(workload.name, 0)
                try:
                    outs = self.unpack(descs, self.cand)
                    after = self.unpack(reply["inputs"][slot_key], self.cand)
                except WorkerFault as exc:
                    self.result.add(self.candidate_fault(exc, workload))
                    return None
                expected_set = self.slot_set[workload.name][index]
                mismatch = self.compare(workload, expected_set, outs, after, [d.get("strides") for d in descs])
                if mismatch and graph:
                    self.result.add(Failure("incorrect", "graph_replay_mismatch", GRAPH_REPLAY_WRONG.format(
                        moved=" after its inputs changed in place" if move_sets else "", detail=mismatch[1]),
                        workload.name))
                elif mismatch:
                    self.result.add(Failure("incorrect", "timed_output_mismatch",
                                            f"an output of the timed runs is wrong: {mismatch[1]}", workload.name))
        return times

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

    def timed_derived(self, name: str) -> dict[str, float] | None:
        """The roofline's quantities averaged over the input sets the timing ran on (the candidate's slots at the
        end: the sets a workload with drawn lengths was timed on; each round's fresh set, timed once, left out)."""
        per_set = [self.derived.get(name, {}).get(i) for i in self.slot_set.get(name, {}).values()]
        per_set = [d for d in per_set if d]
        if not per_set:
            return None
        return {k: statistics.fmean(d[k] for d in per_set) for k in per_set[0]}

    def score_workload(self, workload: Workload, wr: WorkloadResult) -> None:
        graph = scored_on_graphs(workload, wr)
        t = {fn: tm.graph_median_ms if graph else tm.median_ms for fn, tm in wr.timings.items()}
        cand = t["candidate"]
        wr.bytes, wr.flops = roofline(self.task, workload, self.timed_derived(workload.name))
        wr.speedup = t["reference"] / cand
        if "expert" in t:
            wr.fraction_of_expert = t["expert"] / cand
        if "comparator" in t:
            wr.speedup_vs_comparator = t["comparator"] / cand
        wr.achieved_tbps = wr.bytes / (cand * 1e-3) / 1e12
        wr.achieved_tflops = wr.flops / (cand * 1e-3) / 1e12
        ceilings = self.gpu_ceilings()
        floor_s = max(wr.bytes / ceilings["copy_bytes_per_s"], wr.flops / ceilings["bf16_flops_per_s"])
        wr.sol_fraction = floor_s / (cand * 1e-3)
        nameplate = hardware.nameplate_floor_s(self.result.environment.get("gpu", ""), wr.bytes, wr.flops)
        if nameplate is not None and cand * 1e-3 < 0.9 * nameplate:
            self.result.add(Failure(
                "integrity", "below_physical_floor",
                f"{cand * 1e3:.1f} us is more than 10% below the nameplate floor of {nameplate * 1e6:.1f} us",
                workload.name))

    # -- the whole evaluation ---------------------------------------------------------------------
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
        timed = self.gpu and self.options.time and self.result.verdict == "pass"
        for workload, wr in zip(workloads, self.result.workloads, strict=True):
            if timed and workload.split == "scored" and self.result.verdict == "pass":
                with self.phase("timing"):
                    self.time_workload(workload, wr)
            self.drop(workload)
        if self.cand is not None:
            self.result.log_tail = self.cand.log_tail()

    def drop(self, workload: Workload) -> None:
        fresh = self.task.correctness_sets + 2 * self.options.rounds + 1  # the timed rounds' fresh and replay sets
        slots = [self.slot_id(workload.name, i) for i in range(fresh)]
        for worker in (self.trusted, self.cand):
            if worker is not None and worker.alive:
                try:
                    worker.request({"op": "drop", "slots": slots}, 60)
                except (RequestFailed, WorkerFault):
                    pass
        self.inputs.pop(workload.name, None)
        self.expected.pop(workload.name, None)


class InfraError(RuntimeError):
    """A fault of the harness or the GPU itself: never scored against the candidate."""

    def __init__(self, message: str, reason: str = "harness_error"):
        super().__init__(message)
        self.reason = reason


def workload_dict(w: Workload) -> dict[str, Any]:
    return {"name": w.name, "split": w.split, "dtype": w.dtype, "params": dict(w.params), "note": w.note}


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
        raise FileNotFoundError(f"no candidate file {candidate}")
    return Evaluation(task, candidate, options).run()
