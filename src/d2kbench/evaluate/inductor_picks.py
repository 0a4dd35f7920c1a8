"""The comparator's Inductor kernels, each run in the configuration the harness's own timing finds fastest.

Inductor picks among a generated kernel's configurations at its first call, timing each launch alone (L2 cleared
between launches), and keeps the pick in a cache on disk for every later process. On a kernel of a few microseconds
the configurations' times under the harness's replays can differ by a third where Inductor's own timing sees noise
(quant's M=8: bench/results/2026-12-05-owed-24 call7), so "x the comparator" was a draw. `recording()` compiles with
Inductor's caches off, so that every process tunes, and keeps each configuration's launcher loaded; `retune` then
times the comparator with each configuration of each tuned kernel in turn, under the caller's timing, keeps the
fastest, and says what Inductor picked, what the harness kept, and why.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import torch

ROUNDS = 3  # batches per configuration, in alternating order (the harness's rounds' own protection from drift)


@dataclass
class KernelPick:
    """One Inductor kernel's configurations: Inductor's own times and pick, the harness's times and pick."""

    kernel: str
    inductor_ms: dict[str, float]  # configuration -> Inductor's timing of the kernel alone (inf: it skipped it)
    harness_ms: dict[str, float]  # configuration -> the comparator's median batch time with it (ms)
    inductor_pick: str
    kept: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Untunable(RuntimeError):
    """This torch's Inductor lacks what `recording` patches: the comparator keeps Inductor's own picks."""


@contextmanager
def recording() -> Iterator[list[tuple[Any, dict[Any, float]]]]:
    """Within it, Inductor compiles without its caches and each kernel it tunes is listed, with every
    configuration's launcher and Inductor's time for it (the losers' launchers stay loaded: newer Inductors close
    them once tuned)."""
    import torch._inductor.config as inductor_config

    try:
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
    for name, value in patches.items():
        setattr(CachingAutotuner, name, value)
    try:
        with inductor_config.patch(force_disable_caches=True):
            yield tuned
    finally:
        for name, value in saved.items():
            setattr(CachingAutotuner, name, value)


def retune(tuned: list[tuple[Any, dict[Any, float]]], time_once: Callable[[], float],
           rounds: int = ROUNDS) -> list[KernelPick]:
    """For each tuned kernel in turn (the others at their kept configuration), the comparator timed by `time_once`
    (one batch's median, ms) with each of the kernel's configurations that Inductor could time, `rounds` batches
    each in alternating order; the kernel keeps the configuration of the lowest median."""
    picks = []
    for autotuner, timings in tuned:
        (inductor_launcher,) = autotuner.launchers
        usable = [launcher for launcher, ms in timings.items() if math.isfinite(ms)]
        samples: dict[Any, list[float]] = {launcher: [] for launcher in usable}
        if len(usable) > 1:
            for r in range(rounds):
                for launcher in usable if r % 2 == 0 else usable[::-1]:
                    autotuner.launchers = [launcher]
                    samples[launcher].append(time_once())
        medians = {launcher: statistics.median(s) for launcher, s in samples.items() if s}
        kept = min(medians, key=medians.get) if medians else inductor_launcher
        autotuner.launchers = [kept]
        picks.append(KernelPick(
            kernel=_kernel_name(autotuner),
            inductor_ms={describe(launcher.config): ms for launcher, ms in timings.items()},
            harness_ms={describe(launcher.config): ms for launcher, ms in medians.items()},
            inductor_pick=describe(inductor_launcher.config),
            kept=describe(kept.config),
        ))
    return picks


def describe(config: Any) -> str:
    """A Triton configuration in a few words: its block sizes, warps and stages ("XBLOCK=8 warps=2 stages=1")."""
    if not hasattr(config, "kwargs"):
        return str(config)
    words = [f"{name}={value}" for name, value in config.kwargs.items()]
    return " ".join(words + [f"warps={config.num_warps}", f"stages={config.num_stages}"])


def _kernel_name(autotuner: Any) -> str:
    name = getattr(autotuner, "inductor_meta", {}).get("kernel_name")
    return name or getattr(getattr(autotuner, "fn", None), "__name__", type(autotuner).__name__)
