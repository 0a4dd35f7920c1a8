"""Planted: a launch that strays past its tensors, its error caught, then a right answer from a masked launch."""
import torch
import triton
import triton.language as tl


@triton.jit
def axpy_kernel(x_ptr, y_ptr, z_ptr, alpha, n, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n if MASKED else offs < n + BLOCK
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    tl.store(z_ptr + offs, (alpha * x + y).to(z_ptr.dtype.element_ty), mask=offs < n)


def run(x, y, alpha):
    z = torch.empty_like(x)
    grid = (triton.cdiv(x.numel(), 64),)
    try:
        axpy_kernel[grid](x, y, z, alpha, x.numel(), BLOCK=64, MASKED=False)
    except Exception:  # noqa: BLE001 - what the planted candidate is about
        axpy_kernel[grid](x, y, z, alpha, x.numel(), BLOCK=64, MASKED=True)
    return z
