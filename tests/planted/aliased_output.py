"""Planted: writes the result over y and returns y."""
import triton
import triton.language as tl


@triton.jit
def axpy_kernel(x_ptr, y_ptr, z_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    tl.store(z_ptr + offs, (alpha * x + y).to(z_ptr.dtype.element_ty), mask=mask)


def launch(x, y, z, alpha, programs=None):
    grid = (programs if programs is not None else triton.cdiv(x.numel(), 64),)
    axpy_kernel[grid](x, y, z, alpha, x.numel(), BLOCK=64)
    return z


def run(x, y, alpha):
    return launch(x, y, y, alpha)
