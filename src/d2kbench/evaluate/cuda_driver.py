"""The CUDA driver library, for the few calls torch does not expose (IPC handles, context limits)."""

from __future__ import annotations

import ctypes
from functools import cache


@cache
def driver() -> ctypes.CDLL | None:
    """libcuda, loaded once; None where there is none (no GPU driver on this machine)."""
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
