"""Nsight Compute (ncu) counters for one call of a candidate's `run`, inside the candidate's sandbox.

The candidate's worker is the evaluator's own (`WorkerProcess` under the evaluator's `Sandbox`)
with `ncu` in front of its command line: ncu launches the sandbox's entry point, which confines
itself (uid, netns, cgroup, rlimits, landlock) before it imports torch or the candidate. The worker
loads a small wrapper in place of the candidate: its `run` warms the candidate's `run` up, then calls
it once between cudaProfilerStart and cudaProfilerStop (`--profile-from-start off`), so ncu sees
the kernels of exactly one call. The trusted worker makes the inputs, as for `compile_report`.
Every failure becomes `NcuProfile.error`, one line: nothing here raises.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from d2kbench.evaluate import channel
from d2kbench.evaluate.evaluator import EvalOptions, Evaluation
from d2kbench.evaluate.sandbox import Plan, Sandbox, SandboxSettings
from d2kbench.evaluate.timing_guards import gpu_lock
from d2kbench.evaluate.workers import RequestFailed, WorkerFault, WorkerProcess
from d2kbench.suite import Task

TIMEOUT_S = 120.0
MAX_KERNELS = 50  # launches profiled at most; ncu replays each once per counter pass
# ncu's front end reaches the profiled process over loopback TCP on one of these ports (its defaults, stated):
# the sandbox lets the candidate's process bind and connect to these alone, in a namespace holding only lo
PORT, MAX_CONNECTIONS = 49152, 64
LOG_CHARS = 1 << 20  # the most of ncu's output read back
WARMUP_CALLS = 3
METRICS = {
    "duration": "gpu__time_duration.sum",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_bytes": "dram__bytes.sum",
    "memory_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "registers": "launch__registers_per_thread",
    "shared_static": "launch__shared_mem_per_block_static",
    "shared_dynamic": "launch__shared_mem_per_block_dynamic",
}
STALLS = ("barrier", "branch_resolving", "dispatch_stall", "drain", "imc_miss", "lg_throttle", "long_scoreboard",
          "math_pipe_throttle", "membar", "mio_throttle", "misc", "no_instruction", "not_selected",
          "short_scoreboard", "sleeping", "tex_throttle", "wait")
TO_US = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6, "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
TO_BYTES = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
            "Kibyte": 1024.0, "Mibyte": 1024.0**2, "Gibyte": 1024.0**3}
PERMISSION = ("the GPU's performance counters are open to admin users only (ERR_NVGPUCTRPERM), and the "
              "candidate runs unprivileged in its sandbox")
WRAPPER = '''"""ncu's view of the candidate: warm-up calls, then one call between cudaProfilerStart and Stop."""
from pathlib import Path

import torch

from d2kbench.evaluate.worker import load_module

_run = load_module(Path({path!r}), "solution").run


def run(*inputs):
    for _ in range({warmup}):
        _run(*inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    try:
        out = _run(*inputs)
        torch.cuda.synchronize()
    finally:
        torch.cuda.profiler.stop()
    return out
'''


def stall_metric(reason: str) -> str:
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


@dataclass
class KernelSummary:
    """One profiled kernel launch; None where ncu gave no number."""

    name: str
    grid: str = ""
    block: str = ""
    duration_us: float | None = None
    dram_pct: float | None = None
    dram_bytes: float | None = None
    memory_pct: float | None = None  # the busiest memory unit (L1, L2 or DRAM), % of peak
    sm_pct: float | None = None
    occupancy_pct: float | None = None
    registers: int | None = None
    shared_bytes: int | None = None  # static + dynamic, per block
    top_stall: tuple[str, float] | None = None  # reason, cycles per issued instruction


@dataclass
class NcuProfile:
    """The kernels of one profiled call on `workload`, or why there are none (`error`)."""

    workload: str
    kernels: list[KernelSummary] = field(default_factory=list)
    error: str | None = None
    ncu_fault: bool = False  # the error is ncu's or the machine's, whatever the candidate: not worth retrying


class NcuFailure(RuntimeError):
    """A profiling run that gave no numbers; its message is the one line the agent sees."""

    def __init__(self, message: str, ncu_fault: bool = False):
        super().__init__(message)
        self.ncu_fault = ncu_fault


# Stages of a profiling run in which no code of the candidate's runs: a hang there is ncu's (it failed to
# attach to the process, which then waits for it at CUDA's start), never the candidate's.
NO_CANDIDATE_CODE = {"start": "starting", "inputs": "receiving its inputs (CUDA's start)"}
# ncu errors that say its own measurement failed, whatever the kernel (seen on the expert in the sandbox)
NCU_OWN_ERRORS = ("An error was reported by the counter measurement library",)


def stage_failure(stage: str, exc: Exception, ncu_output: str, worker_log: str) -> NcuFailure:
    """The failure of a profiling run that broke in `stage` ("start", "load", "inputs", "call" or "exit")."""
    message = failure_message(exc, ncu_output, worker_log)
    if isinstance(exc, WorkerFault) and exc.kind == "timeout" and stage in NO_CANDIDATE_CODE:
        return NcuFailure(f"{message}: the profiled process hung while {NO_CANDIDATE_CODE[stage]}, before any "
                          "code of yours ran there; ncu could not attach to it", ncu_fault=True)
    return NcuFailure(message, ncu_fault=message == PERMISSION or message.startswith(NCU_OWN_ERRORS))


def ncu_available() -> str | None:
    """None when ncu can run here (a CUDA GPU visible, `ncu` on PATH); else why not, in one line."""
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU is visible"
    if shutil.which("ncu") is None:
        return "ncu (Nsight Compute) is not on PATH"
    return None


def ncu_command(log_file: Path) -> list[str]:
    """ncu's command line up to the profiled program: one call's kernels, raw CSV written to `log_file`."""
    metrics = ",".join([*METRICS.values(), *map(stall_metric, STALLS)])
    return [shutil.which("ncu") or "ncu", "--profile-from-start", "off", "--target-processes", "application-only",
            "--clock-control", "none", "--port", str(PORT), "--max-connections", str(MAX_CONNECTIONS),
            "--launch-count", str(MAX_KERNELS), "--csv", "--page", "raw",
            "--print-units", "base", "--print-kernel-base", "function", "--metrics", metrics,
            "--log-file", str(log_file)]


# Where NVIDIA installs Nsight Compute outside a CUDA toolkit. The toolkit's `bin/ncu` may be a shell script that
# runs the newest version it finds, here or inside the toolkit (the H200's /usr/local/cuda-13.0/bin/ncu is one).
STANDALONE_ROOTS = (Path("/opt/nvidia/nsight-compute"),)


def install_folders(ncu: str | None = None) -> list[str]:
    """Where ncu's installation may lie: its prefix (the folder above `bin/ncu`), the targets of the links right
    under it (landlock follows a link to the folder it names), and the standalone roots that exist. On the H200,
    ncu's counter library, injected into the candidate's process, failed under landlock until /opt/nvidia could
    be read (bench/results/2026-12-03-h200-owed-4); its ncu is a launcher script, and /opt/nvidia/nsight-compute
    holds 2025.3.1, the version ncu reports (bench/results/2026-12-03-h200-ncu-paths)."""
    found = shutil.which(ncu or "ncu")
    if found is None:
        return []
    prefix = Path(found).resolve().parent.parent
    folders = {prefix, *(root for root in STANDALONE_ROOTS if root.is_dir())}
    for entry in prefix.iterdir():
        target = entry.resolve()
        if entry.is_symlink() and target.is_dir() and not target.is_relative_to(prefix):
            folders.add(target)
    return sorted(str(f) for f in folders)


class _NcuSandbox(Sandbox):
    """The evaluator's candidate sandbox, with ncu in front of the command that enters it. ncu's front end
    starts in a fresh network namespace with only loopback up, and the candidate's process stays in it
    (a namespace of its own would cut ncu off: the first GPU run hung until the limit), with TCP allowed
    to ncu's ports alone, and ncu's installation open to reading (`install_folders`)."""

    def __init__(self, ncu: list[str], task: Task, device: str, skip: Sequence[str] = (), grant: Sequence[str] = ()):
        reading = [f"ro:{folder}" for folder in install_folders(ncu[0])]
        super().__init__(SandboxSettings(), [Path(task.path)], device, range(PORT, PORT + MAX_CONNECTIONS), skip,
                         [*reading, *grant])
        self.ncu = ncu

    forkable = False  # ncu starts the process it profiles

    def command(self, plan: Plan) -> list[str]:
        loopback = [sys.executable, "-m", "d2kbench.evaluate.sandbox", "--loopback-netns", "--"]
        return [*loopback, *self.ncu, *super().command(plan)]


def profile_ncu(task: Task, candidate: Path | str, device: str = "cuda:0", workload: str | None = None,
                timeout_s: float = TIMEOUT_S, sandbox_skip: Sequence[str] = (),
                sandbox_grant: Sequence[str] = ()) -> NcuProfile:
    """ncu's summary of one call of the candidate's `run` on `workload` (default: the first scored one).
    `sandbox_skip` leaves sandbox mechanisms out, `sandbox_grant` opens paths to landlock: for a diagnosis on
    trusted code only."""
    name = workload or task.split("scored")[0].name
    reason = ncu_available() if device.startswith("cuda") else f"ncu needs a CUDA device, not {device}"
    if reason:
        return NcuProfile(name, error=reason)
    try:
        return NcuProfile(name, _profile(task, Path(candidate), device, name, timeout_s, sandbox_skip,
                                                 sandbox_grant))
    except NcuFailure as exc:
        return NcuProfile(name, error=str(exc), ncu_fault=exc.ncu_fault)
    except Exception as exc:  # a harness fault: still one line, never an exception out of the tool
        return NcuProfile(name, error=_one_line(f"profiling failed: {type(exc).__name__}: {exc}"))


def _profile(task: Task, candidate: Path, device: str, workload: str, timeout_s: float,
             skip: Sequence[str], grant: Sequence[str]) -> list[KernelSummary]:
    deadline = time.monotonic() + timeout_s

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise NcuFailure(f"profiling ran past its {timeout_s:.0f} s limit")
        return remaining

    ev = Evaluation(task, candidate, EvalOptions(device=device, time=False, load_timeout_s=timeout_s,
                                                 call_timeout_s=timeout_s))
    log = ev.work / "ncu.csv"
    ncu_dir = str(Path(shutil.which("ncu") or "ncu").resolve().parent)  # on PATH: the sandbox lets it be read
    env = {**ev.env, "PATH": os.pathsep.join([ncu_dir, ev.env.get("PATH", "")])}
    cand: WorkerProcess | None = None
    try:
        with gpu_lock(device):  # ncu replays kernels: nobody times on this GPU meanwhile
            trusted = ev.spawn("trusted")
            sandbox = _NcuSandbox(ncu_command(log), task, device, skip, grant)
            cand = WorkerProcess("candidate", device, ev.spool, ev.work, env, sandbox)
            ev.start_trusted(trusted)
            staged = cand.stage(candidate)
            wrapper = staged.with_name("d2k_ncu_wrapper.py")
            wrapper.write_text(WRAPPER.format(path=str(staged), warmup=WARMUP_CALLS))
            stage = "start"
            try:
                cand.wait_ready(left())
                stage = "load"
                cand.request({"op": "load", "path": str(wrapper), "written": list(task.written_inputs)}, left())
                stage = "inputs"
                ev.put_report_inputs(task.workload(workload), cand, left())
                stage = "call"
                cand.request({"op": "call", "fn": "run", "slot": 0}, left())
                stage = "exit"
                channel.write_message(cand.fd_req, {"op": "exit"})  # ncu prints its results once the worker exits
                cand.proc.wait(left())
            except subprocess.TimeoutExpired:
                raise NcuFailure(f"profiling ran past its {timeout_s:.0f} s limit") from None
            except (RequestFailed, WorkerFault, OSError) as exc:
                raise stage_failure(stage, exc, _read(log), cand.log_tail()) from None
        output = _read(log)
        kernels = parse_raw_csv(output)
        if not kernels:
            raise NcuFailure(failure_message(None, output, cand.log_tail()))
        return kernels
    finally:
        if cand is not None:
            cand.kill()
        ev.close()


def failure_message(exc: Exception | None, ncu_output: str, worker_log: str) -> str:
    """One line on why a profiling run gave no numbers: ncu's own error first, else the worker's."""
    if "ERR_NVGPUCTRPERM" in ncu_output + worker_log:
        return PERMISSION
    lines = ncu_output.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("==ERROR==")), None)
    if first is not None:  # ncu continues an error ending in ':' on the lines that follow
        detail = [lines[first].removeprefix("==ERROR==").strip()]
        for line in lines[first + 1:first + 4]:
            if not detail[-1].endswith(":") or line.startswith("=="):
                break
            detail.append(line.strip())
        return _one_line(" ".join(detail))
    if isinstance(exc, RequestFailed):
        return _one_line(f"solution.py failed under ncu: {exc.error}: {exc.message}")
    if isinstance(exc, WorkerFault) and exc.kind == "timeout":
        return _one_line(f"profiling timed out ({exc.detail})")
    if exc is not None:
        tail = worker_log.strip().splitlines()[-1:] or [""]
        return _one_line(f"the profiled worker failed ({exc}) {tail[0]}")
    return "ncu profiled no kernel (did run launch one on this workload?)"


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _read(path: Path) -> str:
    try:
        with open(path, errors="replace") as handle:
            return handle.read(LOG_CHARS)
    except OSError:
        return ""


# -- ncu's raw page, as CSV --------------------------------------------------------------------------
def parse_raw_csv(text: str) -> list[KernelSummary]:
    """The kernels of `ncu --csv --page raw` output: a header row, a units row, one row per launch.

    Lines that are not CSV (ncu's `==PROF==` messages) are skipped; numbers may carry thousands
    separators; `n/a` and missing metrics become None.
    """
    lines = [line for line in text.splitlines() if line.startswith('"')]
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        return []
    rows = list(csv.reader(lines[start:]))
    header, body = rows[0], rows[1:]
    units: dict[str, str] = {}
    if body and body[0] and not body[0][0]:  # the units row is blank under the ID column
        units = dict(zip(header, body[0], strict=False))
        body = body[1:]
    kernels = []
    for row in body:
        cells = dict(zip(header, row, strict=False))

        def value(metric: str, scale: dict[str, float] | None = None, cells: dict[str, str] = cells) -> float | None:
            return _scaled(cells.get(metric, ""), units.get(metric, ""), scale)

        static, dynamic = value(METRICS["shared_static"], TO_BYTES), value(METRICS["shared_dynamic"], TO_BYTES)
        stalls = {s: v for s in STALLS if (v := value(stall_metric(s))) is not None}
        top = max(stalls.items(), key=lambda kv: kv[1], default=None)
        registers = value(METRICS["registers"])
        kernels.append(KernelSummary(
            name=cells.get("Kernel Name", "?"),
            grid=cells.get("Grid Size", "").replace(" ", ""),
            block=cells.get("Block Size", "").replace(" ", ""),
            duration_us=value(METRICS["duration"], TO_US),
            dram_pct=value(METRICS["dram_pct"]),
            dram_bytes=value(METRICS["dram_bytes"], TO_BYTES),
            memory_pct=value(METRICS["memory_pct"]),
            sm_pct=value(METRICS["sm_pct"]),
            occupancy_pct=value(METRICS["occupancy_pct"]),
            registers=None if registers is None else int(registers),
            shared_bytes=None if static is None and dynamic is None else int((static or 0) + (dynamic or 0)),
            top_stall=top if top and top[1] > 0 else None,
        ))
    return kernels


def _scaled(text: str, unit: str, scale: dict[str, float] | None) -> float | None:
    """A cell as a number in the scale's base unit (None: no number, or a unit the scale does not know)."""
    try:
        number = float(text.strip().replace(",", ""))
    except ValueError:  # "", "n/a"
        return None
    if scale is None:
        return number
    unit = unit.split("/")[0]  # "byte/block" is bytes
    return number * scale[unit] if unit in scale else None
