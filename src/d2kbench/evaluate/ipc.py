"""Input sets handed from the trusted worker to the candidate's device to device, by legacy CUDA IPC, instead
of through spool files (about 0.7 GB/s for attention's 17 GB: docs/perf/evaluator.md).

The exporter copies the tensor into a block of its own (`cuMemAlloc`), never exports the tensor itself: an
importer's mapping is writable (bench/results/2026-12-03-h200-owed-2, call1), and through the trusted
worker's own inputs a candidate could change what the reference is timed on. The block is never freed: it
lives as long as the exporter (one trusted worker per evaluation), so no later allocation of the trusted
worker can share an address with a mapping the candidate kept. The importer clones the block into memory of
its own and closes the mapping at once.

Results can go the other way, to the parent (`EvalOptions.device_outputs`): a worker exports each output for
one reply into a block it frees at its next request (`export_copy(..., owned=...)`, `free_blocks`). The parent
is trusted, so no mapping it could keep matters; it clones each at once, after checking that the block really
holds the bytes the description claims (a short block from the candidate's worker would make the clone read
past it in the evaluator's own process).
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import torch

from d2kbench.evaluate.channel import ProtocolError, describe_tensor, to_dtype
from d2kbench.evaluate.cuda_driver import driver

HANDLE_BYTES = 64


class IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HANDLE_BYTES)]


class RawPointer:
    """A device pointer as `__cuda_array_interface__` (bytes), for torch.as_tensor without a copy."""

    def __init__(self, pointer: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (pointer, False),
                                         "version": 3}


def require_driver() -> ctypes.CDLL:
    """libcuda, or a RuntimeError that says it is missing."""
    cuda = driver()
    if cuda is None:
        raise RuntimeError("no CUDA driver (libcuda.so.1) on this machine")
    return cuda


def check_result(result: int, what: str) -> None:
    """Raise unless a driver call returned CUDA_SUCCESS."""
    if result != 0:
        raise RuntimeError(f"{what} failed (CUresult {result})")


def export_copy(value: torch.Tensor, owned: list[int] | None = None) -> dict[str, Any]:
    """A copy of `value` (a CUDA tensor) in a block of its own: its description with the handle. The block is
    never freed, unless `owned` is given: its address is appended there, for `free_blocks` to free later."""
    flat = value.detach().contiguous().reshape(-1).view(torch.uint8)
    desc = {k: v for k, v in describe_tensor(value, "").items() if k != "tensor"}
    nbytes = flat.numel()
    if nbytes == 0:
        return {**desc, "ipc": "", "nbytes": 0}
    pointer = ctypes.c_uint64()
    check_result(require_driver().cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(nbytes)), "cuMemAlloc")
    torch.as_tensor(RawPointer(pointer.value, nbytes), device=value.device).copy_(flat)
    torch.cuda.synchronize(value.device)  # the importer reads it from another process, on its own streams
    if owned is not None:
        owned.append(pointer.value)
    handle = IpcHandle()
    check_result(require_driver().cuIpcGetMemHandle(ctypes.byref(handle), pointer), "cuIpcGetMemHandle")
    return {**desc, "ipc": bytes(handle).hex(), "nbytes": nbytes}


def free_blocks(owned: list[int]) -> None:
    """Free the blocks `export_copy` listed in `owned` (their importer has cloned them) and empty the list."""
    while owned:
        check_result(require_driver().cuMemFree_v2(ctypes.c_uint64(owned.pop())), "cuMemFree")


def block_bytes(pointer: int) -> int:
    """The bytes from `pointer` to the end of the allocation it lies in (`cuMemGetAddressRange`)."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    check_result(require_driver().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size),
                                                          ctypes.c_uint64(pointer)), "cuMemGetAddressRange")
    return base.value + size.value - pointer


def is_exported(desc: dict[str, Any]) -> bool:
    return "ipc" in desc


def import_clone(desc: dict[str, Any], device: torch.device, check_size: bool = False) -> torch.Tensor:
    """The exported tensor `desc` describes, cloned into this process's memory on `device` (contiguous). With
    `check_size` (an exporter not trusted), the block must hold the bytes the description claims."""
    dtype = to_dtype(str(desc["dtype"]))
    shape = [int(s) for s in desc["shape"]]
    nbytes = int(desc["nbytes"])
    if nbytes != torch.empty((), dtype=dtype).element_size() * math.prod(shape):
        raise ProtocolError(f"exported tensor of {nbytes} bytes cannot have shape {shape} and dtype {dtype}")
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype, device=device)
    try:
        handle = IpcHandle.from_buffer_copy(bytes.fromhex(str(desc["ipc"])))
    except ValueError as exc:
        raise ProtocolError(f"bad IPC handle: {exc}") from None
    with torch.cuda.device(device):
        torch.zeros(1, device=device)  # the primary context, current on this thread
        pointer = ctypes.c_uint64()
        opener = getattr(require_driver(), "cuIpcOpenMemHandle_v2", None) or require_driver().cuIpcOpenMemHandle
        check_result(opener(ctypes.byref(pointer), handle, ctypes.c_uint(1)), "cuIpcOpenMemHandle")  # lazy peer access
        try:
            held = block_bytes(pointer.value) if check_size else nbytes
            if held < nbytes:
                raise ProtocolError(f"the exported block holds {held} bytes, not the {nbytes} its description claims")
            mapped = torch.as_tensor(RawPointer(pointer.value, nbytes), device=device)
            own = mapped.clone()
            torch.cuda.synchronize(device)
            del mapped
        finally:
            check_result(require_driver().cuIpcCloseMemHandle(pointer), "cuIpcCloseMemHandle")
    return own.view(dtype).reshape(shape)
