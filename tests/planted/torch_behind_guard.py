"""Planted: lets torch do the work with the dispatch modes switched off, so the op guard never sees the
ops; one token Triton launch. The traced call sees them: torch's kernels on the GPU (foreign_kernel),
the dispatcher's aten ops on the CPU (aten_op)."""

import torch
import triton
from torch.utils import _python_dispatch


@triton.jit
def token_kernel(x_ptr, n):
    pass


def run(x, y, alpha):
    token_kernel[(1,)](x, 0)
    with getattr(_python_dispatch, "_disable_" + "current_modes")():
        return torch.add(y, x, alpha=alpha)
