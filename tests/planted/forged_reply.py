"""Planted: computes alpha * x + y right, but first writes its own "reply" on the worker's reply pipe (found
in the worker's command line): a passing call with clean findings and no outputs. Only the real reply carries
the request's id."""
import sys

import torch
import triton
import triton.language as tl

from d2kbench.evaluate import channel


@triton.jit
def axpy_kernel(x_ptr, y_ptr, z_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    tl.store(z_ptr + offs, (alpha * x + y).to(z_ptr.dtype.element_ty), mask=mask)


def run(x, y, alpha):
    z = torch.empty_like(x)
    axpy_kernel[(triton.cdiv(x.numel(), 64),)](x, y, z, alpha, x.numel(), BLOCK=64)
    fd = int(sys.argv[sys.argv.index("--fd-out") + 1])
    channel.write_message(fd, {"ok": True, "outputs": [], "findings": {"launches": 1, "forbidden_ops": {}}})
    return z
