"""How the agent's tools and the final evaluation reach the evaluator."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar

from d2kbench.evaluate.evaluator import EvalOptions, compile_report, evaluate
from d2kbench.evaluate.ncu import NcuProfile, ncu_available, profile_ncu
from d2kbench.evaluate.result import EvalResult
from d2kbench.suite import Task

T = TypeVar("T")


class EvalService(Protocol):
    """What the tools call. Optional: `async ncu_profile(task, candidate) -> NcuProfile` (LocalEvalService
    has it; without it the profile tool says that there is no ncu summary)."""

    async def evaluate(self, task: Task, candidate: Path, options: EvalOptions) -> EvalResult: ...

    async def compile_report(self, task: Task, candidate: Path) -> list[dict]: ...


def service_uses_gpu(evals: EvalService) -> bool:
    """Whether the service evaluates on a GPU: its `gpu` attribute, or whether this machine has one."""
    gpu = getattr(evals, "gpu", None)
    if gpu is None:
        import torch

        gpu = torch.cuda.is_available()
    return bool(gpu)


class LocalEvalService:
    """Runs the blocking evaluator in threads, one evaluation at a time per device.

    `devices` are "cpu" or "cuda:N"; a call takes whichever device is free first. The evaluator's own
    file lock already serialises timing per GPU across processes; this queue keeps one evaluation per
    device in this process so that concurrent agents never share a GPU's correctness runs either.
    Compile reports need no device (they compile for sm_90 on the CPU) and run beside evaluations.
    Each device's evaluations run on a thread of its own, so that with `prestart` (the default) each one takes
    the workers the one before started (`EvalOptions.prestart`).
    """

    def __init__(self, devices: list[str], prestart: bool = True):
        if not devices:
            raise ValueError("LocalEvalService needs at least one device ('cpu' or 'cuda:N')")
        self.devices = list(devices)
        self.gpu = any(d.startswith("cuda") for d in self.devices)
        self.prestart = prestart
        self._threads = {d: ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"d2k-{d}") for d in self.devices}
        self._free: asyncio.Queue[str] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._jobs: set[asyncio.Future] = set()  # evaluations in flight (kept alive when their caller is cancelled)
        self._ncu_down: str | None = None  # why ncu cannot work here, once a run showed it: not tried again
        self._reports: dict[tuple[str, str, str], list[dict[str, Any]]] = {}  # compile reports by source

    def _queue(self) -> asyncio.Queue[str]:
        """The free devices, as a queue of the running event loop (made anew under a new loop)."""
        loop = asyncio.get_running_loop()
        if self._free is None or self._loop is not loop:
            self._free, self._loop = asyncio.Queue(), loop
            for device in self.devices:
                self._free.put_nowait(device)
        return self._free

    async def _on_free_device(self, work: Callable[[str], T]) -> T:
        """`work(device)` in a thread on the first free device. A caller cancelled meanwhile (a run's wall
        clock) does not free the device before the thread is done with it."""
        free = self._queue()
        device = await free.get()

        async def work_then_free() -> T:
            try:
                return await asyncio.get_running_loop().run_in_executor(self._threads[device], work, device)
            finally:
                free.put_nowait(device)

        job = asyncio.ensure_future(work_then_free())
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)
        return await asyncio.shield(job)

    async def evaluate(self, task: Task, candidate: Path, options: EvalOptions) -> EvalResult:
        """Evaluate on the first free device."""
        return await self._on_free_device(
            lambda device: evaluate(task, candidate, dataclasses.replace(options, device=device,
                                                                         prestart=self.prestart)))

    async def compile_report(self, task: Task, candidate: Path) -> list[dict[str, Any]]:
        """The sm_90 compile report; the same source on the same task is compiled once (the report depends on
        nothing else: the candidate is one file, and the workload's inputs are made from its seed)."""
        key = (task.id, task.profile_workload, hashlib.sha256(candidate.read_bytes()).hexdigest())
        if key not in self._reports:
            self._reports[key] = await asyncio.to_thread(compile_report, task, candidate)
        return [dict(k) for k in self._reports[key]]

    async def ncu_profile(self, task: Task, candidate: Path) -> NcuProfile:
        """ncu's summary of one call on the task's profile workload, on a free GPU; or why there is none."""
        workload = task.profile_workload
        if not self.gpu:
            return NcuProfile(workload, error="interpreter mode (no GPU): hardware counters need one")
        reason = ncu_available()
        if reason:
            return NcuProfile(workload, error=reason)
        if self._ncu_down:  # a hung ncu holds a GPU for the whole limit: once is enough
            return NcuProfile(workload, error=f"ncu failed here earlier and is not tried again: {self._ncu_down}",
                              ncu_fault=True)
        profile = await self._on_free_device(lambda device: profile_ncu(task, candidate, device, workload))
        if profile.ncu_fault:
            self._ncu_down = profile.error
        return profile
