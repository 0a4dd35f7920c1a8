"""Planted (GPU only): a cache keyed by the inputs' contents that works new contents out ahead.

As gpu_content_cache.py, and it also keeps every input tensor it was called with: each call fingerprints them all
and computes the outputs of any contents it has not seen, so a set written in place over a slot it holds is
worked out by whichever call comes first after the write, and that slot's own call is served from the cache.
When the fresh input set was put in place before a batch, an untimed warm-up call did that work and the fresh
call was fast (a pass). Expected now that the fresh set is written after the warm-up and called first:
integrity/input_cache.
"""
import torch
import triton
import triton.language as tl

REPEAT = 64  # the honest path's cost, in launches of the axpy
SAMPLES = 64  # elements of each input in the fingerprint

_outputs = {}
_held = {}  # (x address, y address) -> (x, y, alpha): every input set this process was called with


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


def _key(x, y, alpha):
    n = x.numel()
    f = torch.empty(2 * SAMPLES, dtype=torch.float32, device=x.device)
    fingerprint_kernel[(1,)](x, y, f, n, max(1, n // SAMPLES), SAMPLES=SAMPLES)
    return (tuple(f.tolist()), float(alpha), n, x.dtype)


def _work_out(x, y, alpha, key):
    n = x.numel()
    z = torch.empty_like(x)
    for _ in range(REPEAT):
        axpy_kernel[(triton.cdiv(n, 256),)](x, y, z, alpha, n, BLOCK=256)
    _outputs[key] = z.clone()


def run(x, y, alpha):
    _held[(x.data_ptr(), y.data_ptr())] = (x, y, alpha)
    for hx, hy, halpha in _held.values():  # new contents in any slot held: worked out now
        key = _key(hx, hy, halpha)
        if key not in _outputs:
            _work_out(hx, hy, halpha, key)
    return _outputs[_key(x, y, alpha)].clone()
