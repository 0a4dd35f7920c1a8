"""Planted: stores far outside every allocation, an illegal memory access on the GPU (`crash/cuda_error`);
in the interpreter its bounds check stops the store (`crash/out_of_bounds`)."""

import torch
import triton
import triton.language as tl


@triton.jit
def axpy_kernel(x_ptr, y_ptr, z_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    tl.store(z_ptr + offs + (1 << 40), (alpha * x + y).to(z_ptr.dtype.element_ty), mask=mask)


def run(x, y, alpha):
    z = torch.empty_like(x)
    axpy_kernel[(triton.cdiv(x.numel(), 64),)](x, y, z, alpha, x.numel(), BLOCK=64)
    return z
