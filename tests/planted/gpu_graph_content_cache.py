"""Planted (GPU only): a cache of outputs kept on the device, keyed by the inputs' contents, that works inside a
captured CUDA graph.

One Triton kernel per call: each program reads a fingerprint of the inputs (a few elements of x and y) and
compares it with the one it stored the last time it ran on inputs at these addresses; the same, it copies the
output it kept then; else it computes (the honest path made slow, the axpy stored REPEAT times over, so that the
cache pays, as it would for a compute-bound kernel) and keeps output and fingerprint. No host decision, so a graph
captures the whole of it: every replay on contents the capture (or an earlier call) saw is a copy. Every checked
call sees new contents and computes; so does the graph recheck, whose sets were moved between the slots. The
cache per address is also what the rotation defeats in the events batches, at the price of one slow call per
slot and round. What only the replay sets show: the first replay on a set written after the captures computes,
the others copy (`replay_fresh_slowdown` 5.5-6.5 on the H200, honest experts' medians at most 1.10). Expected
on the GPU: `integrity/input_cache`. On the CPU, where nothing is timed, it passes.
"""
import torch
import triton
import triton.language as tl

REPEAT = 64  # the honest path's cost, in stores of the axpy
SAMPLES = 64  # elements of each input in the fingerprint
BLOCK = 1024

_caches = {}  # (x's address, size, dtype) -> (the outputs kept, one fingerprint per program)


@triton.jit
def cached_axpy_kernel(x_ptr, y_ptr, z_ptr, kept_ptr, fp_ptr, alpha, n, stride,
                       BLOCK: tl.constexpr, SAMPLES: tl.constexpr, REPEAT: tl.constexpr):
    pid = tl.program_id(0)
    s = tl.arange(0, SAMPLES)
    picks = (s * stride) % n
    fx = tl.load(x_ptr + picks).to(tl.float32)
    fy = tl.load(y_ptr + picks).to(tl.float32)
    fp = fp_ptr + pid * 2 * SAMPLES  # each program keeps its own: no program reads another's half-written state
    same = (fx == tl.load(fp + s)) & (fy == tl.load(fp + SAMPLES + s))
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if tl.sum(same.to(tl.int32), axis=0) == SAMPLES:
        tl.store(z_ptr + offs, tl.load(kept_ptr + offs, mask=mask), mask=mask)
    else:
        z = tl.zeros([BLOCK], dtype=z_ptr.dtype.element_ty)
        for _ in range(REPEAT):  # z may alias x or y as far as the compiler knows: every pass loads again
            x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
            y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
            z = (alpha * x + y).to(z_ptr.dtype.element_ty)
            tl.store(z_ptr + offs, z, mask=mask)
        tl.store(kept_ptr + offs, z, mask=mask)
        tl.store(fp + s, fx)
        tl.store(fp + SAMPLES + s, fy)


def run(x, y, alpha):
    n = x.numel()
    programs = triton.cdiv(n, BLOCK)
    key = (x.data_ptr(), n, x.dtype)
    if key not in _caches:  # NaN fingerprints match nothing: the first call computes
        _caches[key] = (torch.empty_like(x), torch.full((programs * 2 * SAMPLES,), float("nan"), device=x.device))
    kept, fp = _caches[key]
    z = torch.empty_like(x)
    cached_axpy_kernel[(programs,)](x, y, z, kept, fp, alpha, n, max(1, n // SAMPLES),
                                    BLOCK=BLOCK, SAMPLES=SAMPLES, REPEAT=REPEAT)
    return z
