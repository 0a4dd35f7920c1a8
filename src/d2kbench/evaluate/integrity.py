"""Checks that run inside a worker around one call of a candidate.

- `TritonLaunches` counts Triton kernel launches (JIT, interpreter, autotuner) and runs Triton's own
  launch path outside the op guard, since the interpreter copies tensors with aten ops.
- `OpGuard` is a TorchDispatchMode that lets only allocation, initialisation, view and copy ops of
  aten run inside the call, records every other op by name, and poisons fresh allocations so that
  elements the kernel never writes show up as NaN (floats) or 0xA5 bytes (integers).
- `aliasing` finds outputs that share memory with an input or with each other.
- `traced_call` lists the GPU kernels of one call (torch.profiler / CUPTI) and `kernel_findings`
  names those that are neither the candidate's Triton kernels nor torch's initialisation and copy
  kernels (a vendor library reached outside aten) and calls whose kernels ran on several streams.
- `late_writes` finds outputs that change after the caller's stream is synchronized: work left
  running on another stream or in a thread, which the stream's timing events would not see.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

ALLOCATION_OPS = frozenset(
    {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
)
ALLOWED_OPS = ALLOCATION_OPS | frozenset(
    {
        # initialisation
        "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
        "new_full", "fill", "fill_", "zero", "zero_", "scalar_tensor",
        # views
        "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "permute", "transpose",
        "transpose_", "t", "expand", "expand_as", "unsqueeze", "squeeze", "select", "slice", "narrow",
        "split", "split_with_sizes", "chunk", "unbind", "flatten", "unflatten", "view_as", "alias",
        "detach", "lift_fresh", "movedim", "diagonal", "view_as_real", "unfold", "_reshape_copy",
        # copies
        "clone", "copy", "copy_", "_to_copy", "contiguous", "_local_scalar_dense", "resolve_conj",
        "resolve_neg", "lift_fresh_copy",
    }
)


def op_name(func) -> str:
    return func.overloadpacket.__name__


def poison_(tensor: torch.Tensor) -> None:
    """Fill the whole storage of `tensor` with a pattern no correct kernel leaves behind."""
    with _disable_current_modes(), torch.no_grad():
        if tensor.untyped_storage().nbytes() == 0:
            return
        raw = torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage())
        if tensor.dtype == torch.bool:
            raw.fill_(1)
        elif tensor.is_floating_point() or tensor.is_complex():
            raw.fill_(0xFF)  # NaN in every IEEE and float8 format
        else:
            raw.fill_(0xA5)


class OpGuard(TorchDispatchMode):
    """Record aten ops outside the allowlist; poison fresh allocations when asked."""

    def __init__(self, poison: bool):
        super().__init__()
        self.poison = poison
        self.forbidden: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = op_name(func)
        if name not in ALLOWED_OPS:
            self.forbidden[name] += 1
        out = func(*args, **(kwargs or {}))
        if self.poison and name in ALLOCATION_OPS and isinstance(out, torch.Tensor):
            poison_(out)
        return out


# The profiler range around each Triton launch in interpreter mode, where the interpreter (and the harness's
# fp8 emulation, `interp_fp8`) run aten ops that are the kernel's, not torch work of the candidate's
LAUNCH_RANGE = "d2k::triton_launch"


class TritonLaunches:
    """Counts Triton launches while installed; Triton's launch path runs with the op guard off. In interpreter
    mode each launch is also a profiler range (`LAUNCH_RANGE`), so the kernel trace can leave its ops out."""

    def __init__(self) -> None:
        self.count = 0
        self.names: set[str] = set()  # the launched kernels' function names (their names on the GPU)
        self.compile_s = 0.0  # seconds spent compiling kernels or loading them from the cache (diagnostics)
        self._patched: list[tuple[type, str, object]] = []
        self.interpreted = os.environ.get("TRITON_INTERPRET") == "1"

    def install(self) -> None:
        from triton.runtime import autotuner, jit

        classes: list[tuple[type, bool]] = [
            (jit.JITFunction, True),
            (autotuner.Autotuner, False),
            (autotuner.Heuristics, False),
        ]
        try:
            from triton.runtime.interpreter import InterpretedFunction

            classes.append((InterpretedFunction, True))
        except ImportError:
            pass
        for cls, counts in classes:
            original = cls.run
            self._patched.append((cls, "run", original))
            cls.run = self._wrap(original, counts)
        compile_kernel = getattr(jit.JITFunction, "_do_compile", None)
        if compile_kernel is not None:
            self._patched.append((jit.JITFunction, "_do_compile", compile_kernel))
            jit.JITFunction._do_compile = self._timed(compile_kernel)

    def _timed(self, compile_kernel):
        launches = self

        @functools.wraps(compile_kernel)
        def do_compile(*args, **kwargs):
            start = time.perf_counter()
            try:
                return compile_kernel(*args, **kwargs)
            finally:
                launches.compile_s += time.perf_counter() - start

        return do_compile

    def _wrap(self, original, counts: bool):
        launches = self

        @functools.wraps(original)
        def run(*args, **kwargs):
            warmup = kwargs.get("warmup", False)
            if counts and not warmup:
                launches.count += 1
                launches.names.add(getattr(getattr(args[0], "fn", None), "__name__", "?"))
            with _disable_current_modes():
                if not launches.interpreted:
                    return original(*args, **kwargs)
                with torch.profiler.record_function(LAUNCH_RANGE):
                    return original(*args, **kwargs)

        return run

    def uninstall(self) -> None:
        for cls, attr, original in reversed(self._patched):
            setattr(cls, attr, original)
        self._patched.clear()


def _extent(t: torch.Tensor) -> tuple[int, int, int]:
    """(storage pointer, first byte, one past the last byte) that `t` can reach."""
    if t.numel() == 0:
        return (t.untyped_storage().data_ptr(), 0, 0)
    size = t.element_size()
    start = t.storage_offset() * size
    span = sum((s - 1) * st for s, st in zip(t.shape, t.stride(), strict=True)) * size + size
    return (t.untyped_storage().data_ptr(), start, start + span)


def aliasing(outputs: Iterable[torch.Tensor], inputs: Iterable[torch.Tensor]) -> list[str]:
    """Descriptions of outputs that overlap an input or another output in memory."""
    outs = [(f"output {i}", _extent(t)) for i, t in enumerate(outputs)]
    ins = [(f"input {i}", _extent(t)) for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)]
    found = []
    for k, (name, (ptr, lo, hi)) in enumerate(outs):
        if hi == lo:
            continue
        for other, (ptr2, lo2, hi2) in ins + outs[k + 1 :]:
            if ptr == ptr2 and lo < hi2 and lo2 < hi:
                found.append(f"{name} shares memory with {other}")
    return found


LATE_WORK_WAIT_S = 0.05  # how long deferred work gets to show itself after the call's stream is done


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8))


def late_writes(outputs: Iterable[object], inputs: list[object], written: Iterable[int],
                device: torch.device) -> list[str]:
    """The outputs (and inputs written in place) that change after the caller's stream is synchronized.

    The snapshots are copies enqueued on the current stream behind the call, so they see exactly what
    a consumer on that stream would; then deferred work gets `LATE_WORK_WAIT_S` and the whole device
    is synchronized, and whatever differs from its snapshot was written by work the call left behind.
    """
    watched = [(f"output {i}", t) for i, t in enumerate(outputs) if isinstance(t, torch.Tensor)]
    watched += [(f"input {i}", inputs[i]) for i in written if isinstance(inputs[i], torch.Tensor)]
    with _disable_current_modes(), torch.no_grad():
        snapshots = [t.clone() for _, t in watched]
        if device.type == "cuda":
            torch.cuda.current_stream(device).synchronize()
        time.sleep(LATE_WORK_WAIT_S)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return [name for (name, t), snap in zip(watched, snapshots, strict=True) if not same_bytes(snap, t)]


# The profiler records composite ops too (the guard sees what they decompose into), and the guard's
# own poisoning (`set_`): none of them computes.
PROFILED_ALLOWED_OPS = ALLOWED_OPS | frozenset(
    {"to", "type_as", "reshape_as", "item", "set_", "detach_", "is_same_size", "is_nonzero", "size", "stride"}
)

# torch's own kernels for the initialisation and copy ops that the op guard allows (its arithmetic
# kernels are foreign: they mean the guard was bypassed)
TORCH_HOUSEKEEPING = ("fill", "copy", "memset", "memcpy")


def traced_call(call: Callable[[], object], device: torch.device) -> tuple[object, list[dict] | None, str | None]:
    """Run `call` under torch.profiler; (its result, its kernels and aten ops, why there is no trace).

    Each kernel is {"name", "stream"}, each aten op {"name", "op": True}. On a GPU both; on the CPU (the
    interpreter) there are no kernels, but the dispatcher's aten ops still show a computation that ran
    with the op guard switched off. A profiler that cannot start is not the candidate's fault: the call
    then runs untraced and the reason comes back instead of the kernels.
    """
    from torch.profiler import ProfilerActivity, profile

    gpu = device.type == "cuda"
    try:
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] if gpu else [ProfilerActivity.CPU])
        prof.__enter__()
    except Exception as exc:  # noqa: BLE001 - any profiler failure means no trace, never a verdict
        return call(), None, f"{type(exc).__name__}: {exc}"
    try:
        out = call()
        if gpu:
            torch.cuda.synchronize(device)
    finally:
        prof.__exit__(None, None, None)
    with tempfile.NamedTemporaryFile(suffix=".json", dir=".") as trace:
        prof.export_chrome_trace(trace.name)
        events = json.loads(Path(trace.name).read_text()).get("traceEvents", [])
    kernels = [{"name": str(e.get("name", "")), "stream": (e.get("args") or {}).get("stream")}
               for e in events if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")]
    # aten ops as the dispatcher saw them: also those run with the Python dispatch modes switched off; on the
    # CPU not those inside an interpreted Triton launch (the kernel's own work)
    launches = [e for e in events if e.get("name") == LAUNCH_RANGE] if not gpu else []
    kernels += [{"name": str(e["name"]), "op": True} for e in events
                if e.get("cat") == "cpu_op" and str(e.get("name", "")).startswith("aten::")
                and not any(_inside(e, launch) for launch in launches)]
    return out, kernels, None


def _inside(event: dict, span: dict) -> bool:
    """Whether a trace event lies within another's time span, on the same thread."""
    start, end = float(event.get("ts", 0)), float(event.get("ts", 0)) + float(event.get("dur", 0))
    lo, hi = float(span.get("ts", 0)), float(span.get("ts", 0)) + float(span.get("dur", 0))
    return event.get("tid") == span.get("tid") and lo <= start and end <= hi


def kernel_findings(kernels: list[dict], triton_names: Iterable[str]) -> dict[str, list[str]]:
    """`foreign`: kernels that are not the candidate's Triton kernels nor torch housekeeping;
    `streams`: the streams the call's kernels ran on, when there are several; `ops`: aten ops
    outside the allowlist that the dispatcher ran (the op guard bypassed)."""
    names = tuple(triton_names)
    ops = sorted({k["name"].removeprefix("aten::") for k in kernels if k.get("op")} - PROFILED_ALLOWED_OPS)
    kernels = [k for k in kernels if not k.get("op")]
    foreign = sorted({k["name"] for k in kernels if not k["name"].startswith(names)
                      and not any(h in k["name"].lower() for h in TORCH_HOUSEKEEPING)})
    streams = sorted({str(k["stream"]) for k in kernels if k.get("stream") is not None})
    return {"foreign": foreign, "streams": streams if len(streams) > 1 else [], "ops": ops}
