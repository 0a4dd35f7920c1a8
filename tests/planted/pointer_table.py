"""Planted, correct: x and y reached through a table of their addresses (a grouped GEMM's pattern), which the
interpreter's bounds check must not take for stray accesses."""
import torch
import triton
import triton.language as tl


@triton.jit
def axpy_kernel(table_ptr, z_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x_ptr = tl.load(table_ptr).to(tl.pointer_type(z_ptr.dtype.element_ty))
    y_ptr = tl.load(table_ptr + 1).to(tl.pointer_type(z_ptr.dtype.element_ty))
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    tl.store(z_ptr + offs, (alpha * x + y).to(z_ptr.dtype.element_ty), mask=mask)


def run(x, y, alpha):
    z = torch.empty_like(x)
    table = torch.tensor([x.data_ptr(), y.data_ptr()], dtype=torch.int64, device=x.device)
    axpy_kernel[(triton.cdiv(x.numel(), 64),)](table, z, alpha, x.numel(), BLOCK=64)
    return z
