"""Out-of-bounds memory accesses caught in Triton's CPU interpreter, as compute-sanitizer catches them on a GPU.

The interpreter reads and writes host memory at whatever address a kernel computes: a load past the end of a tensor
returns whatever lies there, a store corrupts it, and neither fails (on the GPU the same kernel may fault or corrupt
silently). `install()` checks every load, store and atomic of an interpreted launch before it happens: each element
the mask leaves on must lie inside the storage of a tensor the launch was given (positional, keyword, in a tuple or
a TensorDescriptor). An address outside all of them is then looked up among every live CPU tensor, so that a kernel
that loads pointers from a table (a grouped GEMM's array of matrices) is not flagged; outside those too, the access
is recorded and the launch stopped with `OutOfBoundsAccess`, naming the kernel, the program, the operation and the
argument it strayed from. Limits: an access that strays into another live tensor is not caught, and a candidate
that clears the record from its own process hides it here (not on the GPU, where the timed runs happen). Workers
call `install()` only when they run kernels through the interpreter; `take()` hands the parent what was recorded.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

_MAX_RECORDED = 8  # the first accesses are the informative ones; a runaway loop would otherwise record thousands


class OutOfBoundsAccess(RuntimeError):
    """An interpreted kernel accessed memory outside every tensor it could have been given."""


@dataclass
class _Launch:
    """The storages one interpreted launch was given: sorted, merged [start, end) byte ranges and their names."""

    kernel: str
    starts: np.ndarray
    ends: np.ndarray
    names: list[str]
    live: tuple[np.ndarray, np.ndarray] | None = None  # every live CPU tensor's, found on a miss


_launches: list[_Launch] = []
_recorded: list[str] = []


def take() -> list[str]:
    """What was recorded since the last call (a line per access), cleared."""
    found = list(_recorded)
    _recorded.clear()
    return found


def install() -> bool:
    """Check the interpreter's memory operations; False (nothing changed) where this Triton lacks the hooks."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return False
    executor, builder = getattr(interpreter, "GridExecutor", None), getattr(interpreter, "InterpreterBuilder", None)
    hooks = ("_init_args_hst", "__call__")
    ops = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")
    if executor is None or builder is None or not all(hasattr(executor, h) for h in hooks) \
            or not all(hasattr(builder, op) for op in ops):
        return False
    if getattr(executor.__call__, "_d2k_bounds", False):
        return True
    _wrap_launch(executor)
    _wrap_memory_ops(builder)
    return True


def _wrap_launch(executor: type) -> None:
    init_args, call = executor._init_args_hst, executor.__call__

    def init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        named = [*zip(self.arg_names, args_hst, strict=False), *kwargs_hst.items()]
        _launches.append(_launch_of(getattr(self.fn, "__name__", "kernel"), named))
        return args_hst, kwargs_hst

    def launch(self, *args, **kwargs):
        depth = len(_launches)
        try:
            return call(self, *args, **kwargs)
        finally:
            del _launches[depth:]

    launch._d2k_bounds = True
    executor._init_args_hst, executor.__call__ = init_args_hst, launch


def _wrap_memory_ops(builder: type) -> None:
    load, store = builder.create_masked_load, builder.create_masked_store
    rmw, cas = builder.create_atomic_rmw, builder.create_atomic_cas

    def masked_load(self, ptrs, mask, other, *args, **kwargs):
        _check(self, "a load", ptrs, mask)
        return load(self, ptrs, mask, other, *args, **kwargs)

    def masked_store(self, ptrs, value, mask, *args, **kwargs):
        _check(self, "a store", ptrs, mask)
        return store(self, ptrs, value, mask, *args, **kwargs)

    def atomic_rmw(self, op, ptr, val, mask, *args, **kwargs):
        _check(self, "an atomic", ptr, mask)
        return rmw(self, op, ptr, val, mask, *args, **kwargs)

    def atomic_cas(self, ptr, cmp, val, *args, **kwargs):
        _check(self, "an atomic", ptr, None)
        return cas(self, ptr, cmp, val, *args, **kwargs)

    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
    builder.create_atomic_rmw, builder.create_atomic_cas = atomic_rmw, atomic_cas


def _tensors(name: str, value: Any):
    """(name, tensor) for each tensor an argument holds."""
    if isinstance(value, torch.Tensor):
        yield name, value
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            yield from _tensors(f"{name}[{i}]", item)
    elif isinstance(getattr(value, "base", None), torch.Tensor):  # a host TensorDescriptor, or a reinterpreted tensor
        yield (f"{name}.base" if hasattr(value, "block_shape") else name), value.base


def _ranges(named: list[tuple[str, torch.Tensor]]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The storages' byte ranges, sorted by start and merged where they overlap (views of one storage)."""
    spans = []
    for name, t in named:
        storage = t.untyped_storage()
        start, size = storage.data_ptr(), storage.nbytes()
        if size:
            spans.append((start, start + size, name))
    spans.sort()
    merged: list[list] = []
    for start, end, name in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end, name])
    return (np.array([s for s, _, _ in merged], dtype=np.uint64), np.array([e for _, e, _ in merged], dtype=np.uint64),
            [n for _, _, n in merged])


def _launch_of(kernel: str, arguments: list[tuple[str, Any]]) -> _Launch:
    starts, ends, names = _ranges([pair for name, value in arguments for pair in _tensors(name, value)])
    return _Launch(kernel, starts, ends, names)


def _live_ranges() -> tuple[np.ndarray, np.ndarray]:
    """Every live CPU tensor's storage (looked up once per launch, and only where an access missed its arguments)."""
    live = []
    for obj in gc.get_objects():
        try:
            # type(), not isinstance(): that reads __class__, which some deprecated module objects warn on
            if issubclass(type(obj), torch.Tensor) and obj.device.type == "cpu":
                live.append(("", obj))
        except Exception:  # noqa: BLE001, S112 - a tensor subclass that cannot say where it lives is not one
            continue
    starts, ends, _ = _ranges(live)
    return starts, ends


def _outside(addresses: np.ndarray, size: int, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which [address, address + size) lie in none of the sorted, disjoint ranges."""
    if not len(starts):
        return np.ones(addresses.shape, dtype=bool)
    i = np.searchsorted(starts, addresses, side="right").astype(np.int64) - 1
    inside = (i >= 0) & (addresses + np.uint64(size) <= ends[np.maximum(i, 0)])
    return ~inside


def _element_bytes(ptrs: Any) -> int:
    element = getattr(ptrs.dtype, "element_ty", None)
    if element is None or hasattr(element, "element_ty"):  # a pointer to pointers (a table of addresses)
        return 8
    return max(1, int(getattr(element, "primitive_bitwidth", 8)) // 8)


def _check(builder: Any, op: str, ptrs: Any, mask: Any) -> None:
    """Stop `op` ("a load", ...) if an element the mask leaves on lies outside the current launch's tensors."""
    if not _launches:
        return
    launch = _launches[-1]
    addresses = np.asarray(ptrs.data)
    if addresses.dtype.kind not in "iu":
        return
    addresses = addresses.astype(np.uint64, copy=False)
    if mask is not None:
        addresses = addresses[np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)]
    addresses = addresses.ravel()
    size = _element_bytes(ptrs)
    outside = _outside(addresses, size, launch.starts, launch.ends)
    if not outside.any():
        return
    if launch.live is None:
        launch.live = _live_ranges()
    stray = addresses[outside]
    stray = stray[_outside(stray, size, *launch.live)]
    if not len(stray):
        return  # inside other live tensors: a table of pointers, not a stray access
    message = (f"{launch.kernel}, program {tuple(int(i) for i in builder.grid_idx)}: {op} of {len(stray)} of its "
               f"{len(addresses)} active elements outside every tensor the launch was given "
               f"({_nearest(int(stray[0]), launch)})")
    if len(_recorded) < _MAX_RECORDED:
        _recorded.append(message)
    raise OutOfBoundsAccess(message)


def _nearest(address: int, launch: _Launch) -> str:
    """Where `address` lies relative to the launch's arguments, in words."""
    if not len(launch.starts):
        return "the launch was given no tensor"
    i = int(np.searchsorted(launch.starts, np.uint64(address), side="right")) - 1
    if i < 0:
        return f"the first, {int(launch.starts[0]) - address} bytes before `{launch.names[0]}`"
    past = address - int(launch.ends[i])
    if past < 0:
        return f"the first straddles the end of `{launch.names[i]}`"
    return f"the first, {past} bytes past the end of `{launch.names[i]}`"
