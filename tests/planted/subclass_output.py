"""Planted: computes alpha * x + y right, but returns it as a tensor subclass (whose values could be made
lazily, or differ when read through another path): outputs must be plain torch.Tensor objects."""
import torch
import triton
import triton.language as tl


@triton.jit
def axpy_kernel(x_ptr, y_ptr, z_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    tl.store(z_ptr + offs, (alpha * x + y).to(z_ptr.dtype.element_ty), mask=mask)


class Deferred(torch.Tensor):
    pass


def run(x, y, alpha):
    z = torch.empty_like(x)
    axpy_kernel[(triton.cdiv(x.numel(), 64),)](x, y, z, alpha, x.numel(), BLOCK=64)
    return z.as_subclass(Deferred)
