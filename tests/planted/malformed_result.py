"""Planted: computes alpha * x + y right, but changes what its worker sends back: every tensor result is
described by a file name that leads out of the spool. The parent must refuse to read it and say why, without
its own evaluation failing."""
import torch
import triton
import triton.language as tl

from d2kbench.evaluate import channel

_pack = channel.pack_value


def _forged(value, spool):
    desc = _pack(value, spool)
    return {**desc, "tensor": "../" + desc["tensor"]} if "tensor" in desc else desc


vars(channel)["pack_value"] = _forged  # a dict write the static scan's patching rules do not name


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
    return z
