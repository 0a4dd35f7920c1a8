"""Planted (GPU only): honest when called, but under CUDA graph capture it captures only a copy of the answer its
last call worked out for the same input pointer. The graph's replays are what latency-bound workloads are scored
on: they would copy whatever is cached, whatever the inputs hold by then (caught by `Timer.replay_recheck`)."""

import torch
import triton
import triton.language as tl

BLOCK = 1024
_answers: dict[int, torch.Tensor] = {}


@triton.jit
def axpy_kernel(x_ptr, y_ptr, z_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    tl.store(z_ptr + offs, (alpha * x + y).to(z_ptr.dtype.element_ty), mask=mask)


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def run(x, y, alpha):
    z = torch.empty_like(x)
    grid = (triton.cdiv(x.numel(), BLOCK),)
    answer = _answers.get(x.data_ptr())
    if answer is not None and torch.cuda.is_current_stream_capturing():
        copy_kernel[grid](answer, z, x.numel(), BLOCK=BLOCK)
        return z
    axpy_kernel[grid](x, y, z, alpha, x.numel(), BLOCK=BLOCK)
    _answers[x.data_ptr()] = z
    return z
