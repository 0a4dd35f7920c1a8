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
from functools import cache
from typing import Any

import torch

from d2kbench.evaluate.channel import ProtocolError, describe_tensor, to_dtype

HANDLE_BYTES = 64


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HANDLE_BYTES)]


class _Raw:
    """A device pointer as `__cuda_array_interface__` (bytes), for torch.as_tensor without a copy."""

    def __init__(self, pointer: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (pointer, False),
                                         "version": 3}


@cache
def _driver() -> Any:
    return ctypes.CDLL("libcuda.so.1")


def _check(result: int, what: str) -> None:
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
    _check(_driver().cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(nbytes)), "cuMemAlloc")
    torch.as_tensor(_Raw(pointer.value, nbytes), device=value.device).copy_(flat)
    torch.cuda.synchronize(value.device)  # the importer reads it from another process, on its own streams
    handle = _Handle()
    _check(_driver().cuIpcGetMemHandle(ctypes.byref(handle), pointer), "cuIpcGetMemHandle")
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
        handle = _Handle.from_buffer_copy(bytes.fromhex(str(desc["ipc"])))
    except ValueError as exc:
        raise ProtocolError(f"bad IPC handle: {exc}") from None
    with torch.cuda.device(device):
        torch.zeros(1, device=device)  # the primary context, current on this thread
        pointer = ctypes.c_uint64()
        opener = getattr(_driver(), "cuIpcOpenMemHandle_v2", None) or _driver().cuIpcOpenMemHandle
        _check(opener(ctypes.byref(pointer), handle, ctypes.c_uint(1)), "cuIpcOpenMemHandle")  # lazy peer access
        try:
            mapped = torch.as_tensor(_Raw(pointer.value, nbytes), device=device)
            own = mapped.clone()
            torch.cuda.synchronize(device)
            del mapped
        finally:
            _check(_driver().cuIpcCloseMemHandle(pointer), "cuIpcCloseMemHandle")
    return own.view(dtype).reshape(shape)
