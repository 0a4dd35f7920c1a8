"""What keeps a workload's times honest: the GPU to the baselines alone, a quiet GPU before and after the timed
batches, the parent's wall clock against the candidate's reported times, and the candidate's first calls on input
sets it has not seen. A mixin of `evaluator.Evaluation`, whose state it reads.
"""

from __future__ import annotations

import fcntl
import statistics
import tempfile
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from d2kbench.evaluate import hardware
from d2kbench.evaluate.result import EvalResult, Failure, InfraError, WorkloadResult
from d2kbench.evaluate.workers import WorkerProcess
from d2kbench.suite import Workload

if TYPE_CHECKING:  # both import this module: the timing phase, and the evaluation that mixes this in
    from d2kbench.evaluate.evaluator import EvalOptions
    from d2kbench.evaluate.timing_phase import TimingRun

# A copy probe below this share of the GPU's measured copy bandwidth means the GPU is shared while timing.
CONTENDED_SHARE = 0.8

# The probe right after a baseline's batch may probe again for this long: after a batch of a 5 us kernel (the GPU
# mostly asleep in head starts) one probe read 75% on a quiet H200 and refused a clean evaluation as
# gpu_contended (bench/results/2026-12-03-h200-owed-7). The candidate is stopped and drained before the batch, so
# a share that recovers within this window was the GPU's own, not work beside the baseline.
SETTLE_S = 0.5

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


def unaccounted_ms(batches: list[tuple[float, list[float], int]]) -> float:
    """Per timed call: the batches' wall time (ms, the parent's clock) less the reported kernel times and the
    warm-up calls' (each taken at its batch's median)."""
    wall = sum(request_ms for request_ms, _, _ in batches)
    reported = sum(sum(times) + warmups * statistics.median(times) for _, times, warmups in batches)
    return (wall - reported) / sum(len(times) for _, times, _ in batches)


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


class TimingGuards:
    """The checks around the timed batches (`Evaluation` mixes it in; it calls the evaluation's `trusted_request`)."""

    # the evaluation's state it reads and sets (`Evaluation.__init__`)
    options: EvalOptions
    device: str
    cand: WorkerProcess | None
    ceilings: dict[str, float] | None
    batch_walls: dict[str, list[tuple[float, list[float], int]]]
    result: EvalResult

    def gpu_locked(self):
        """This evaluation's GPU locked against every other evaluator process's timing (`gpu_lock`)."""
        return gpu_lock(self.device)

    @contextmanager
    def gpu_to_trusted(self):
        """The GPU to the trusted worker alone, as the baselines are timed: under the GPU lock, the candidate's
        process group stopped (once it is started)."""
        with self.gpu_locked(), self.cand.paused() if self.cand is not None else nullcontext():
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
