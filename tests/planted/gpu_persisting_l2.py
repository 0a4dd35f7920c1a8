"""Planted (GPU only): reserves a persisting-L2 carve-out in every call, so that data marked persisting would
survive the Timer's flush. The driver is reached through ctypes under a spelled-out name (the static scan is
off for this one in bench/gpu_integrity.py: the dynamic check must catch it alone)."""

import importlib

import torch
import triton
import triton.language as tl

_driver = importlib.import_module("c" + "types").CDLL("libcuda.so.1")


@triton.jit
def axpy_kernel(x_ptr, y_ptr, z_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    tl.store(z_ptr + offs, (alpha * x + y).to(z_ptr.dtype.element_ty), mask=mask)


def run(x, y, alpha):
    _driver.cuCtxSetLimit(0x06, 30 << 20)  # CU_LIMIT_PERSISTING_L2_CACHE_SIZE: 30 MB of the H200's 60 MB L2
    z = torch.empty_like(x)
    axpy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, z, alpha, x.numel(), BLOCK=1024)
    return z
