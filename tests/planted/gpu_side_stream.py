"""Planted (GPU only): does the work on a second stream, so the caller's stream looks idle. The stream
class is reached by a spelled-out name so that a plain name scan misses it."""

import torch
import triton
import triton.language as tl

_side = getattr(torch.cuda, "Str" + "eam")()


@triton.jit
def axpy_kernel(x_ptr, y_ptr, z_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    tl.store(z_ptr + offs, (alpha * x + y).to(z_ptr.dtype.element_ty), mask=mask)


def run(x, y, alpha):
    z = torch.empty_like(x)
    axpy_kernel[(1,)](x, y, z, alpha, 0, BLOCK=64)  # a token launch on the caller's stream
    getattr(_side, "wait_" + "stream")(torch.cuda.current_stream())
    with getattr(torch.cuda, "str" + "eam")(_side):
        axpy_kernel[(triton.cdiv(x.numel(), 64),)](x, y, z, alpha, x.numel(), BLOCK=64)
    return z
