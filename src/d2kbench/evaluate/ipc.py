"""Input sets handed from the trusted worker to the candidate's device to device, by legacy CUDA IPC, instead
of through spool files (about 0.7 GB/s for attention's 17 GB: docs/perf/evaluator.md).

The exporter copies the tensor into a block of its own (`cuMemAlloc`), never exports the tensor itself: an
importer's mapping is writable (bench/results/2026-12-03-h200-owed-2, call1), and through the trusted
worker's own inputs a candidate could change what the reference is timed on. Input blocks are lent
(`InputLending`): a set is copied into blocks just before the candidate's worker needs it, and once the
parent says the requests that imported it are over, its blocks take later sets. They are never freed to the
driver: they live as long as the exporter (one trusted worker per evaluation), so no later allocation of the
trusted worker can share an address with a mapping the candidate kept; a kept mapping gives the candidate
later sets' bytes that it is about to be handed anyway, and its writes there reach only its own copies. The
importer clones the block into memory of its own and closes the mapping at once.

Results can go the other way, to the parent (`EvalOptions.device_outputs`): a worker exports each output for
one reply into a block it frees at its next request (`export_copy(..., owned=...)`, `free_blocks`). The parent
is trusted, so no mapping it could keep matters; it clones each at once, after checking that the block really
holds the bytes the description claims (a short block from the candidate's worker would make the clone read
past it in the evaluator's own process).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
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


def allocate(nbytes: int) -> int:
    """A device block of `nbytes` (`cuMemAlloc`, outside torch's allocator): its address."""
    pointer = ctypes.c_uint64()
    check_result(require_driver().cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(nbytes)), "cuMemAlloc")
    return pointer.value


def bare_description(value: torch.Tensor) -> dict[str, Any]:
    """A tensor's description (dtype, shape, strides) with no file: what travels where its bytes do not."""
    return {k: v for k, v in describe_tensor(value, "").items() if k != "tensor"}


def export_into(value: torch.Tensor, pointer: int) -> dict[str, Any]:
    """`value` (a CUDA tensor) copied into the block at `pointer` (at least its size): its description with the
    block's handle."""
    flat = value.detach().contiguous().reshape(-1).view(torch.uint8)
    desc = bare_description(value)
    torch.as_tensor(RawPointer(pointer, flat.numel()), device=value.device).copy_(flat)
    torch.cuda.synchronize(value.device)  # the importer reads it from another process, on its own streams
    handle = IpcHandle()
    check_result(require_driver().cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(pointer)),
                 "cuIpcGetMemHandle")
    return {**desc, "ipc": bytes(handle).hex(), "nbytes": flat.numel()}


def empty_export(value: torch.Tensor) -> dict[str, Any]:
    """The description of an exported tensor of no bytes (no block, no handle)."""
    return {**bare_description(value), "ipc": "", "nbytes": 0}


def export_copy(value: torch.Tensor, owned: list[int] | None = None) -> dict[str, Any]:
    """A copy of `value` (a CUDA tensor) in a block of its own: its description with the handle. The block is
    never freed, unless `owned` is given: its address is appended there, for `free_blocks` to free later."""
    nbytes = value.numel() * value.element_size()
    if nbytes == 0:
        return empty_export(value)
    pointer = allocate(nbytes)
    if owned is not None:
        owned.append(pointer)
    return export_into(value, pointer)


class InputLending:
    """The trusted worker's blocks for input sets lent to the candidate's worker. `lend` copies a set's tensors
    into free blocks (the smallest that holds each, a new one where none does) under a new lend id; `release`
    takes lends back once the parent says their importers are done. Blocks are never freed (the module's
    docstring says why): `held_bytes` is what they take of the card."""

    def __init__(self, allocator: Callable[[int], int] = allocate,
                 exporter: Callable[[torch.Tensor, int], dict[str, Any]] = export_into):
        self.allocator, self.exporter = allocator, exporter
        self.free: list[tuple[int, int]] = []  # (bytes, address), smallest first
        self.lent: dict[int, list[tuple[int, int]]] = {}
        self.held_bytes = 0
        self.next_id = 1

    def lend(self, values: list[Any]) -> dict[str, Any]:
        """The CUDA tensors among `values` copied into lent blocks: `{"id", "inputs"}`, one description per value
        (None for the values that are not CUDA tensors: they travel as they always do)."""
        blocks: list[tuple[int, int]] = []
        descs: list[dict[str, Any] | None] = []
        for value in values:
            if not (isinstance(value, torch.Tensor) and value.is_cuda):
                descs.append(None)
                continue
            nbytes = value.numel() * value.element_size()
            if nbytes == 0:
                descs.append(empty_export(value))
                continue
            block = self.take(nbytes)
            blocks.append(block)
            descs.append(self.exporter(value, block[1]))
        lend_id, self.next_id = self.next_id, self.next_id + 1
        self.lent[lend_id] = blocks
        return {"id": lend_id, "inputs": descs}

    def take(self, nbytes: int) -> tuple[int, int]:
        """The smallest free block of at least `nbytes`, or a new one of exactly that."""
        for k, (size, _) in enumerate(self.free):
            if size >= nbytes:
                return self.free.pop(k)
        self.held_bytes += nbytes
        return nbytes, self.allocator(nbytes)

    def release(self, lend_ids: list[int]) -> None:
        """Lends whose importers are done: their blocks free for later lends. Ids this lending never made or
        already took back (a replaced worker's) are refused: the parent's record and the worker's disagree."""
        unknown = [i for i in lend_ids if i not in self.lent]
        if unknown:
            raise KeyError(f"no outstanding lends {unknown}")
        for lend_id in lend_ids:
            self.free += self.lent.pop(lend_id)
        self.free.sort()


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
