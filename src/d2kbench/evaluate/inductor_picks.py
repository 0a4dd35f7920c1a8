"""The comparator's Inductor kernels, each run in the configuration the harness's own timing finds clearly fastest.

Inductor picks among a generated kernel's configurations at its first call, timing each launch alone (L2 cleared
between launches), and keeps the pick in a cache on disk for every later process. On a kernel of a few microseconds
the configurations' times under the harness's replays can differ by a third where Inductor's own timing sees noise
(quant's M=8: bench/results/2026-12-05-owed-24 call7), so "x the comparator" was a draw. `recording()` compiles with
Inductor's autotune cache bypassed, so that every process tunes, and keeps each configuration's launcher loaded;
`retune` then times the comparator with each configuration of each tuned kernel in turn, under the caller's timing,
and says what Inductor picked, what the harness kept, and why. Inductor's pick is replaced only by a configuration
whose every batch beat every batch of it: on a comparator of milliseconds a kernel's configurations differ by less
than the batches' own spread, and a pick by medians there followed the noise against Inductor's clear timing of the
kernel alone (muon's batch: bench/results/2026-12-06-owed-29).
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import torch

ROUNDS = 3  # batches per configuration, in alternating order (the harness's rounds' own protection from drift)
# A kernel is timed again only where its configurations could move the comparator by a share its batches resolve:
# Inductor's times of them (the kernel alone) spread by at least RESOLUTION of the comparator's time a call, less
# LAUNCH_HIDDEN_MS, what a launch's overhead can hide in Inductor's timing of a kernel shorter than it (quant's M=8:
# 14-16 us there for configurations of 4.4-6.0 us). On a comparator of milliseconds a pointwise kernel's
# configurations differ by less than its batches' spread (muon: bench/results/2026-12-06-owed-29).
RESOLUTION = 0.01
LAUNCH_HIDDEN_MS = 0.010


@dataclass
class KernelPick:
    """One Inductor kernel's configurations: Inductor's own times and pick, the harness's times and pick."""

    kernel: str
    inductor_ms: dict[str, float]  # configuration -> Inductor's timing of the kernel alone (inf: it skipped it)
    harness_ms: dict[str, float]  # configuration -> the comparator's median batch time with it (ms)
    inductor_pick: str
    kept: str
    note: str = ""  # why the harness did not time it, where it did not

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Untunable(RuntimeError):
    """This torch's Inductor lacks what `recording` patches: the comparator keeps Inductor's own picks."""


@contextmanager
def recording() -> Iterator[list[tuple[Any, dict[Any, float]]]]:
    """Within it, every kernel Inductor generates is tuned at its first call, whatever an earlier process's
    autotune cache says, and listed with every configuration's launcher and Inductor's time for it (the losers'
    launchers stay loaded: newer Inductors close them once tuned). Only the autotune cache is bypassed: a compiled
    graph found in Inductor's FX graph cache keeps all its configurations (the cache is written before any is
    tuned) and saves the compilation; where this Inductor has no `check_autotune_cache` to bypass, every cache is
    off."""
    import torch._inductor.config as inductor_config

    try:
        from torch._inductor.runtime import triton_heuristics
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner

        original = CachingAutotuner.benchmark_all_configs
    except (ImportError, AttributeError) as exc:
        raise Untunable(f"Inductor's CachingAutotuner.benchmark_all_configs not found in torch "
                        f"{torch.__version__}: {exc}") from exc
    tuned: list[tuple[Any, dict[Any, float]]] = []

    def benchmark_all_configs(self: Any, *args: Any, **kwargs: Any) -> dict[Any, float]:
        timings = original(self, *args, **kwargs)
        tuned.append((self, dict(timings)))
        return timings

    patches: dict[str, Any] = {"benchmark_all_configs": benchmark_all_configs}
    if "_close_static_launcher" in CachingAutotuner.__dict__:
        patches["_close_static_launcher"] = staticmethod(lambda launcher: None)
    if "_release_static_launchers_except" in CachingAutotuner.__dict__:
        patches["_release_static_launchers_except"] = lambda self, keep: None
    saved = {name: CachingAutotuner.__dict__[name] for name in patches}
    check_cache = getattr(triton_heuristics, "check_autotune_cache", None)
    for name, value in patches.items():
        setattr(CachingAutotuner, name, value)
    if check_cache is not None:
        triton_heuristics.check_autotune_cache = functools.partial(_without_autotune_cache, check_cache)
    try:
        with inductor_config.patch(force_disable_caches=check_cache is None):
            yield tuned
    finally:
        for name, value in saved.items():
            setattr(CachingAutotuner, name, value)
        if check_cache is not None:
            triton_heuristics.check_autotune_cache = check_cache


def _without_autotune_cache(check_cache: Callable[..., Any], configs: list[Any], filename: str | None,
                            inductor_meta: dict[str, Any]) -> Any:
    """Inductor's autotune-cache lookup, answered as with its caches off: every configuration kept, none read or
    written (an FX-cached graph's kernels carry the meta they were generated with, so the flag is set here)."""
    return check_cache(configs, filename, {**inductor_meta, "force_disable_caches": True})


def retune(tuned: list[tuple[Any, dict[Any, float]]], time_once: Callable[[], float],
           rounds: int = ROUNDS, comparator_ms: float | None = None) -> list[KernelPick]:
    """For each tuned kernel in turn (the others at their kept configuration), the comparator timed by `time_once`
    (one batch's median, ms) with each of the kernel's configurations that Inductor could time, `rounds` batches
    each in alternating order. The kernel keeps Inductor's pick unless some configurations' batches were all faster
    than all of the pick's (`_clearly_faster`); then the one of them with the lowest median. With `comparator_ms`
    (the comparator's time a call, where its batches are not graph replays), a kernel whose configurations cannot
    matter at that scale (`_too_close_to_matter`) keeps Inductor's pick untimed."""
    picks = []
    for autotuner, timings in tuned:
        (inductor_launcher,) = autotuner.launchers
        usable = [launcher for launcher, ms in timings.items() if math.isfinite(ms)]
        note = _too_close_to_matter([timings[launcher] for launcher in usable], comparator_ms)
        if note:
            usable = []
        samples: dict[Any, list[float]] = {launcher: [] for launcher in usable}
        if len(usable) > 1:
            for r in range(rounds):
                for launcher in usable if r % 2 == 0 else usable[::-1]:
                    autotuner.launchers = [launcher]
                    samples[launcher].append(time_once())
        medians = {launcher: statistics.median(s) for launcher, s in samples.items() if s}
        faster = _clearly_faster(samples, inductor_launcher)
        kept = min(faster, key=medians.get) if faster else inductor_launcher
        autotuner.launchers = [kept]
        picks.append(KernelPick(
            kernel=_kernel_name(autotuner),
            inductor_ms={describe(launcher.config): ms for launcher, ms in timings.items()},
            harness_ms={describe(launcher.config): ms for launcher, ms in medians.items()},
            inductor_pick=describe(inductor_launcher.config),
            kept=describe(kept.config),
            note=note,
        ))
    return picks


def _too_close_to_matter(inductor_ms: list[float], comparator_ms: float | None) -> str:
    """Why a kernel's configurations need no timing within the comparator (empty where they do): Inductor's times
    of them spread by less than RESOLUTION of the comparator's time a call, with LAUNCH_HIDDEN_MS to spare."""
    if comparator_ms is None or len(inductor_ms) < 2:
        return ""
    spread = max(inductor_ms) - min(inductor_ms)
    if spread + LAUNCH_HIDDEN_MS >= RESOLUTION * comparator_ms:
        return ""
    return (f"not timed: its configurations within {spread * 1e3:.1f} us of each other by Inductor's timing, "
            f"under {RESOLUTION:.0%} of the comparator's {comparator_ms:.2f} ms a call")


def _clearly_faster(samples: dict[Any, list[float]], pick: Any) -> list[Any]:
    """The configurations whose slowest batch beat the pick's fastest: a difference the batches' own spread cannot
    explain. (With three batches each, two equal configurations separate so by chance once in twenty.) None where
    the pick was not timed (the only configuration Inductor could time, or one it made after timing them)."""
    if not samples.get(pick):
        return []
    return [launcher for launcher, s in samples.items() if s and max(s) < min(samples[pick])]


def describe(config: Any) -> str:
    """A Triton configuration in a few words: its block sizes, warps and stages ("XBLOCK=8 warps=2 stages=1")."""
    if not hasattr(config, "kwargs"):
        return str(config)
    words = [f"{name}={value}" for name, value in config.kwargs.items()]
    return " ".join(words + [f"warps={config.num_warps}", f"stages={config.num_stages}"])


def _kernel_name(autotuner: Any) -> str:
    name = getattr(autotuner, "inductor_meta", {}).get("kernel_name")
    return name or getattr(getattr(autotuner, "fn", None), "__name__", type(autotuner).__name__)
