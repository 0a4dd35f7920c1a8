"""The evaluator's records: verdicts, reason codes, per-workload results, `EvalResult`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Precedence: the first stage that fails decides. `infra` (a harness or GPU fault) outranks all:
# such a result is retried and never scored against the model.
VERDICTS = ("infra", "error", "crash", "timeout", "integrity", "incorrect", "pass")

REASONS = {
    "error": ("import_error", "compile_error", "exception", "no_run", "sandbox_denied"),
    "crash": ("worker_died", "cuda_error", "out_of_memory", "process_limit", "out_of_bounds"),
    "timeout": ("load_timeout", "call_timeout", "cpu_time_limit"),
    "integrity": (
        "no_triton_launch", "aten_op", "alias", "not_plain_tensor", "input_mutated", "stale_output",
        "patched_timer", "below_physical_floor", "forged_result", "side_stream", "forbidden_code",
        "foreign_kernel", "persisting_l2", "malformed_result", "input_cache",
    ),
    "incorrect": (
        "nan", "mismatch", "shape", "dtype", "strides", "output_count", "check_failed", "timed_output_mismatch",
        "graph_replay_mismatch",
    ),
    "infra": ("harness_error", "worker_start_failed", "worker_lost", "gpu_contended", "device_memory"),
}


class InfraError(RuntimeError):
    """A fault of the harness or the GPU itself: never scored against the candidate."""

    def __init__(self, message: str, reason: str = "harness_error"):
        super().__init__(message)
        self.reason = reason


# The verdict when the sandbox stops a candidate (a limit it ran into, an access it was refused), or the
# protocol does (a reply it forged).
SANDBOX_VERDICTS = {  # reason: (verdict, what happened)
    "out_of_memory": ("crash", "the candidate ran out of its memory limit"),
    "process_limit": ("crash", "the candidate ran into its process limit (a fork bomb)"),
    "cpu_time_limit": ("timeout", "the candidate used up its CPU time"),
    "sandbox_denied": ("error", "the sandbox refused an access (a file, a signal or the network)"),
    "forged_result": ("integrity", "a message on the worker's reply pipe answered no request: the candidate's "
                                   "code wrote its own"),
    "malformed_result": ("integrity", "the worker's reply described results that cannot be read as described: "
                                      "the candidate's code changed what its worker sends"),
}


def out_of_bounds_detail(accesses: list) -> str:
    """The detail of crash/out_of_bounds: the interpreter's record of the stray accesses (`interp_bounds`)."""
    more = f" (and {len(accesses) - 2} more)" if len(accesses) > 2 else ""
    return ("an interpreted kernel accessed memory outside its tensors (on a GPU: an illegal address or silent "
            f"corruption): {'; '.join(str(a) for a in accesses[:2])}{more}")


@dataclass
class Finding:
    """One finding of the static scan: `forbidden` ones fail the candidate (integrity/forbidden_code)."""

    code: str
    line: int
    message: str
    forbidden: bool = False


@dataclass
class Failure:
    verdict: str
    reason: str
    detail: str
    workload: str | None = None

    def __post_init__(self) -> None:
        if self.reason not in REASONS.get(self.verdict, ()):
            raise ValueError(f"reason {self.reason!r} is not a {self.verdict!r} reason")

    def line(self) -> str:
        """One line for a person: verdict/reason, the workload and the detail."""
        return f"{self.verdict}/{self.reason} ({self.workload}): {self.detail}"


@dataclass
class Timing:
    """Median milliseconds of one function on one workload, with the spread of the samples."""

    median_ms: float
    min_ms: float
    max_ms: float
    samples: int
    graph_median_ms: float | None = None


@dataclass
class WorkloadResult:
    name: str
    split: str
    correct: bool | None = None
    errors: list[str] = field(default_factory=list)
    timings: dict[str, Timing] = field(default_factory=dict)  # candidate, reference, expert, comparator
    bytes: float | None = None
    flops: float | None = None
    speedup: float | None = None  # reference / candidate: the scored speedup
    speedup_vs_comparator: float | None = None
    fraction_of_expert: float | None = None  # expert / candidate
    sol_fraction: float | None = None  # max(bytes/BW, FLOPs/peak) / candidate time, measured ceilings
    achieved_tbps: float | None = None
    achieved_tflops: float | None = None
    # against the oracle on the first input set, per compared output: relative RMS error (fp8: share of codes off)
    error: dict[str, float] = field(default_factory=dict)
    reference_error: dict[str, float] = field(default_factory=dict)  # the same for the PyTorch reference
    # the copy probe before and after the timings, as shares of this GPU's measured copy bandwidth
    gpu_probe: list[float] = field(default_factory=list)
    # seconds the trusted worker waited, the candidate stopped, for GPU work queued before the stop to drain
    drained_s: float = 0.0
    # per timed call and function: the parent's wall clock over the event-timed batches less the kernel time the
    # worker reported for them (flush, launch and request overhead; a timer that under-reports shows up here)
    unaccounted_ms: dict[str, float] = field(default_factory=dict)
    # per timed round, the candidate's first call on the round's fresh input set against its calls on seen sets,
    # over the reference's same ratio (`integrity/input_cache` where their median is 1.5 or more)
    fresh_slowdown: list[float] = field(default_factory=list)
    # per function, per timed round: its first call on the fresh set (its batch's first timed call) and its other
    # calls' median (ms; `timing_guards.note_first_call`), the raw figures behind `fresh_slowdown`
    fresh_calls: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    # the same for the graph batches' first replays on each round's replay set (latency-bound workloads), judged in
    # place of `fresh_slowdown` where the graph replays are scored (`Evaluation.check_fresh_sets`)
    replay_fresh_slowdown: list[float] = field(default_factory=list)
    fresh_replays: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    # the comparator's Inductor kernels tuned before this workload's timed batches: each configuration's time by
    # Inductor and under the harness's timing, Inductor's pick and the one kept (`inductor_picks.KernelPick`)
    comparator_picks: list[dict[str, Any]] = field(default_factory=list)
    # ...and the seconds that tuning took: its first call (compiled, Inductor's autotune cache bypassed) and its batches
    comparator_tuning_s: dict[str, float] = field(default_factory=dict)


@dataclass
class EvalResult:
    task: str
    candidate: str
    verdict: str = "pass"
    reason: str | None = None
    detail: str = ""
    mode: str = "interpreter"  # interpreter (CPU, no timings) | gpu
    device: str = "cpu"
    seed: int | None = None
    workloads: list[WorkloadResult] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    log_tail: str = ""
    findings: list[Finding] = field(default_factory=list)  # the static scan of the candidate's source
    environment: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0
    phases_s: dict[str, float] = field(default_factory=dict)  # wall time per phase of the evaluation
    requests_s: dict[str, float] = field(default_factory=dict)  # per worker request op, and the parent's own work

    @property
    def correct(self) -> bool:
        return self.verdict == "pass"

    def add(self, failure: Failure) -> None:
        self.failures.append(failure)
        self.decide()

    def decide(self) -> None:
        """Set the verdict from the failures: the highest-precedence one decides."""
        if not self.failures:
            self.verdict, self.reason, self.detail = "pass", None, ""
            return
        first = min(self.failures, key=lambda f: VERDICTS.index(f.verdict))
        self.verdict, self.reason = first.verdict, first.reason
        where = f" (workload {first.workload})" if first.workload else ""
        self.detail = first.detail + where

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["correct"] = self.correct
        return out
