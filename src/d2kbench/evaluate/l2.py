"""The GPU's persisting-L2 carve-out (sm_80 and later): a process that reserves one and marks its inputs
persisting (a stream's access-policy window) keeps them in L2 across the Timer's flush, so its timed calls
skip their DRAM reads. Before each timed batch the worker zeroes the carve-out and demotes persisting
lines; after it, a non-zero carve-out is the candidate's doing (docs/threats.md). Through the CUDA driver,
which every CUDA process has loaded; None or a no-op where there is none."""

from __future__ import annotations

import ctypes

from d2kbench.evaluate.cuda_driver import driver

LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06  # CUlimit: CU_LIMIT_PERSISTING_L2_CACHE_SIZE


def persisting_l2_bytes() -> int | None:
    """The current context's persisting-L2 carve-out in bytes; None where the driver cannot say."""
    cuda = driver()
    if cuda is None:
        return None
    value = ctypes.c_size_t()
    if cuda.cuCtxGetLimit(ctypes.byref(value), ctypes.c_int(LIMIT_PERSISTING_L2_CACHE_SIZE)) != 0:
        return None
    return value.value


def clear_persisting_l2() -> None:
    """No carve-out, and every line that was persisting demoted to normal (then the flush evicts it)."""
    cuda = driver()
    if cuda is None:
        return
    cuda.cuCtxSetLimit(ctypes.c_int(LIMIT_PERSISTING_L2_CACHE_SIZE), ctypes.c_size_t(0))
    cuda.cuCtxResetPersistingL2Cache()
