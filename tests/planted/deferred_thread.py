"""Planted: returns at once and lets a thread write the output later (deferred work the caller's
stream never waits for). The import is spelled so that a plain name scan misses it."""

import importlib
import time

import torch
import triton
import triton.language as tl

_threads = importlib.import_module("thread" + "ing")


@triton.jit
def _axpy(x_ptr, y_ptr, z_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(z_ptr + offs, alpha * x + y, mask=mask)


def run(x, y, alpha):
    z = torch.empty_like(x)
    n = x.numel()

    def later():
        time.sleep(0.01)
        _axpy[(triton.cdiv(n, 128),)](x, y, z, alpha, n, BLOCK=128)

    _axpy[(1,)](x, y, z, alpha, 0, BLOCK=128)  # a real launch that does nothing, to pass the launch check
    _threads.Thread(target=later).start()
    return z
