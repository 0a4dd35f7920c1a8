"""Planted (GPU only): a kernel that never ends (the loop bound is read from memory, never reached)."""

import torch
import triton
import triton.language as tl


@triton.jit
def spin_kernel(x_ptr, z_ptr, n):
    i = 0
    acc = tl.load(x_ptr)
    while i < n:  # n is an int32 maximum and i restarts: the loop never exits
        acc = acc * 0.5 + 1.0
        i = (i + 1) % 1024
    tl.store(z_ptr, acc)


def run(x, y, alpha):
    z = torch.empty_like(x)
    spin_kernel[(1,)](x, z, 2**31 - 1)
    return z
