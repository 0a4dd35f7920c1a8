"""Planted (GPU only): serves outputs from a cache keyed by the inputs' contents.

A Triton kernel reads a fingerprint of the inputs (a few elements of x and y); outputs computed before for the
same fingerprint come back as a copy. The honest path is made slow (the axpy launched 64 times over) so that the
cache pays, as it would for a compute-bound kernel. Every checked call and the stale check see contents never
seen and compute; the timed rounds see contents seen in the checks, except each round's fresh input set, which
it must work out in a timed call. Expected: integrity/input_cache (before the fresh sets, a pass with a fast
time). On the CPU, where nothing is timed, it passes.
"""
import torch
import triton
import triton.language as tl

REPEAT = 64  # the honest path's cost, in launches of the axpy
SAMPLES = 64  # elements of each input in the fingerprint

_outputs = {}


@triton.jit
def axpy_kernel(x_ptr, y_ptr, z_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
    tl.store(z_ptr + offs, (alpha * x + y).to(z_ptr.dtype.element_ty), mask=mask)


@triton.jit
def fingerprint_kernel(x_ptr, y_ptr, f_ptr, n, stride, SAMPLES: tl.constexpr):
    offs = tl.arange(0, SAMPLES)
    picks = (offs * stride) % n
    tl.store(f_ptr + offs, tl.load(x_ptr + picks).to(tl.float32))
    tl.store(f_ptr + SAMPLES + offs, tl.load(y_ptr + picks).to(tl.float32))


def run(x, y, alpha):
    n = x.numel()
    f = torch.empty(2 * SAMPLES, dtype=torch.float32, device=x.device)
    fingerprint_kernel[(1,)](x, y, f, n, max(1, n // SAMPLES), SAMPLES=SAMPLES)
    key = (tuple(f.tolist()), float(alpha), n, x.dtype)
    if key in _outputs:
        return _outputs[key].clone()
    z = torch.empty_like(x)
    for _ in range(REPEAT):
        axpy_kernel[(triton.cdiv(n, 256),)](x, y, z, alpha, n, BLOCK=256)
    _outputs[key] = z.clone()
    return z
