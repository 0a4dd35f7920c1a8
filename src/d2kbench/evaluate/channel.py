"""The private channel between the evaluator and its workers.

Messages are length-prefixed JSON on a pipe that only the parent and one worker hold (never the
worker's stdout). Tensors travel beside them as raw-byte files in a per-evaluation spool folder
(on /dev/shm where there is one), so gigabyte inputs cost a memory copy, not a pipe transfer.
The receiver checks each tensor's description against the file's size and never unpickles.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch

_HEADER = struct.Struct("<Q")
MAX_MESSAGE = 64 << 20


class ChannelClosed(EOFError):
    """The other end closed the pipe (its process exited or died)."""


class ProtocolError(ValueError):
    """A message that does not follow the protocol."""


def write_message(fd: int, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()
    _write_all(fd, _HEADER.pack(len(data)) + data)


def read_message(fd: int) -> dict[str, Any]:
    (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size))
    if size > MAX_MESSAGE:
        raise ProtocolError(f"message of {size} bytes exceeds the {MAX_MESSAGE}-byte limit")
    try:
        message = json.loads(_read_exact(fd, size))
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"message is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError("message is not a JSON object")
    return message


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise ChannelClosed("the other end closed the channel")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def to_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ProtocolError(f"unknown dtype {name!r}")
    return dtype


def spool_root() -> Path:
    """Where tensor files are written: memory-backed where the machine has /dev/shm."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(os.environ.get("TMPDIR", "/tmp"))


def private_folder(prefix: str, root: Path | None = None) -> Path:
    """A new folder `<prefix><pid>.<pid namespace>-<random>` under `root` (the temporary folder by default), once
    the folders of that prefix left by processes of this namespace that died are removed: a process killed by
    SIGKILL cleans nothing up, and a spool under /dev/shm holds memory. (A folder of another pid namespace, a
    container sharing the folder, is never touched: its pids mean nothing here.)"""
    root = Path(root or tempfile.gettempdir())
    namespace = pid_namespace()
    for old in root.glob(f"{prefix}*.{namespace}-*"):
        pid = old.name[len(prefix):].split(".", 1)[0]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}.{namespace}-", dir=root))


def pid_namespace() -> str:
    """This process's pid namespace (its inode), or "0" where /proc does not say."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists (it may belong to another uid: a sandboxed worker asking of its parent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def pack_value(value: Any, spool: Path) -> dict[str, Any]:
    """Describe one argument or result; tensors are written to a file in `spool`."""
    if isinstance(value, torch.Tensor):
        path = spool / f"{uuid.uuid4().hex}.bin"
        flat = value.detach().contiguous().reshape(-1).view(torch.uint8)
        if flat.numel():
            # Copy straight into the mapped file: one copy, no staging buffer (tofile is several times slower).
            mapped = np.memmap(path, dtype=np.uint8, mode="w+", shape=(flat.numel(),))
            torch.from_numpy(mapped).copy_(flat)
            mapped.flush()
            del mapped
        else:
            path.touch()
        return describe_tensor(value, path.name)
    if isinstance(value, (bool, int, float)) or value is None:
        return {"scalar": value}
    raise ProtocolError(f"cannot send a {type(value).__name__}: only tensors, numbers, booleans and None")


def describe_tensor(value: torch.Tensor, name: str) -> dict[str, Any]:
    """The description of a tensor whose bytes are the file `name` of the spool."""
    return {"tensor": name, "dtype": dtype_name(value.dtype), "shape": list(value.shape),
            "strides": list(value.stride()), "type": type(value).__name__}


def link_value(value: torch.Tensor, source: Path, spool: Path) -> dict[str, Any] | None:
    """Describe `value`, whose bytes are the file `source`, by a hard link to it in `spool`: no copy. The file
    is made read-only first (for a reader under another uid, who cannot change that). None where the file
    cannot be linked (gone, another filesystem): the caller copies instead."""
    path = spool / f"{uuid.uuid4().hex}.bin"
    try:
        os.chmod(source, 0o444)
        os.link(source, path)
    except OSError:
        return None
    return describe_tensor(value, path.name)


def unpack_value(desc: dict[str, Any], spool: Path, *, consume: bool = True, mapped: bool = False) -> Any:
    """The value a `pack_value` description stands for (tensors land on the CPU, contiguous).

    With `mapped` the tensor is a private copy-on-write mapping of the file (no copy at all: gigabyte
    inputs cost nothing until read). Only for files from a trusted writer: a mapping may still see
    later writes to the file, so files from the candidate's worker are read into fresh memory.
    """
    if "scalar" in desc:
        return desc["scalar"]
    name = str(desc.get("tensor", ""))
    if not name or "/" in name or name.startswith("."):
        raise ProtocolError(f"bad tensor file name {name!r}")
    dtype = to_dtype(str(desc["dtype"]))
    shape = [int(s) for s in desc["shape"]]
    path = spool / name
    itemsize = torch.empty((), dtype=dtype).element_size()
    numel = int(np.prod(shape)) if shape else 1
    size = path.stat().st_size
    if size != numel * itemsize:
        raise ProtocolError(f"tensor file {name} holds {size} bytes, expected {numel * itemsize}")
    if size == 0:
        if consume:
            path.unlink(missing_ok=True)
        return torch.empty(shape, dtype=dtype)
    if mapped:
        raw = np.memmap(path, dtype=np.uint8, mode="c", shape=(size,))
    else:
        raw = np.fromfile(path, dtype=np.uint8)
    if consume:
        path.unlink(missing_ok=True)
    return torch.from_numpy(raw).view(dtype).reshape(shape)
