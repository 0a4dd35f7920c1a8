"""Planted (GPU only): patches CUDA events in its own process to report half of every elapsed time, the timer
the evaluator's worker reads. The patch is reached by spelled-out names (the static scan is off for this one in
bench/gpu_integrity.py: the parent's wall clock must catch it alone). Each call repeats the axpy so that the
hidden half (about 0.5 ms) is well above the check's minimum."""

import torch
import triton
import triton.language as tl

_event = getattr(torch.cuda, "Ev" + "ent")
_elapsed = getattr(_event, "elapsed" + "_time")
setattr(_event, "elapsed" + "_time", lambda self, end: 0.5 * _elapsed(self, end))

REPEATS = 200


@triton.jit
def axpy_kernel(x_ptr, y_ptr, z_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    tl.store(z_ptr + offs, (alpha * x + y).to(z_ptr.dtype.element_ty), mask=mask)


def run(x, y, alpha):
    z = torch.empty_like(x)
    for _ in range(REPEATS):
        axpy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, z, alpha, x.numel(), BLOCK=1024)
    return z
