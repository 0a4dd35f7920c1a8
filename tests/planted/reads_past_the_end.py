"""Planted: the last, partial block is loaded and stored without a mask (n200: 56 elements past the end)."""
import torch
import triton
import triton.language as tl


@triton.jit
def axpy_kernel(x_ptr, y_ptr, z_ptr, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs).to(tl.float32)
    y = tl.load(y_ptr + offs).to(tl.float32)
    tl.store(z_ptr + offs, (alpha * x + y).to(z_ptr.dtype.element_ty))


def run(x, y, alpha):
    z = torch.empty_like(x)
    axpy_kernel[(triton.cdiv(x.numel(), 64),)](x, y, z, alpha, BLOCK=64)
    return z
