"""Input sets handed from the trusted worker to the candidate's device to device, by legacy CUDA IPC, instead
of through spool files (about 0.7 GB/s for attention's 17 GB: docs/perf/evaluator.md).

The exporter copies the tensor into a block of its own (`cuMemAlloc`), never exports the tensor itself: an
importer's mapping is writable (bench/results/2026-12-03-h200-owed-2, call1), and through the trusted
worker's own inputs a candidate could change what the reference is timed on. The block is never freed: it
lives as long as the exporter (one trusted worker per evaluation), so no later allocation of the trusted
worker can share an address with a mapping the candidate kept. The importer clones the block into memory of
its own and closes the mapping at once.
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


def export_copy(value: torch.Tensor) -> dict[str, Any]:
    """A copy of `value` (a CUDA tensor) in a block of its own, never freed: its description with the handle."""
    flat = value.detach().contiguous().reshape(-1).view(torch.uint8)
    desc = {k: v for k, v in describe_tensor(value, "").items() if k != "tensor"}
    nbytes = flat.numel()
    if nbytes == 0:
        return {**desc, "ipc": "", "nbytes": 0}
    pointer = ctypes.c_uint64()
    check_result(require_driver().cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(nbytes)), "cuMemAlloc")
    torch.as_tensor(RawPointer(pointer.value, nbytes), device=value.device).copy_(flat)
    torch.cuda.synchronize(value.device)  # the importer reads it from another process, on its own streams
    handle = IpcHandle()
    check_result(require_driver().cuIpcGetMemHandle(ctypes.byref(handle), pointer), "cuIpcGetMemHandle")
    return {**desc, "ipc": bytes(handle).hex(), "nbytes": nbytes}


def is_exported(desc: dict[str, Any]) -> bool:
    return "ipc" in desc


def import_clone(desc: dict[str, Any], device: torch.device) -> torch.Tensor:
    """The exported tensor `desc` describes, cloned into this process's memory on `device` (contiguous)."""
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
            mapped = torch.as_tensor(RawPointer(pointer.value, nbytes), device=device)
            own = mapped.clone()
            torch.cuda.synchronize(device)
            del mapped
        finally:
            check_result(require_driver().cuIpcCloseMemHandle(pointer), "cuIpcCloseMemHandle")
    return own.view(dtype).reshape(shape)
