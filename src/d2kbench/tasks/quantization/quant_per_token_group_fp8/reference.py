"""Per-token-group FP8 quantisation: inputs, PyTorch baseline and comparator.

Semantics (SGLang / vLLM per_token_group_quant_fp8): for each group of `group_size`
consecutive elements of a row, amax = max(|x|) in fp32 clamped below at 1e-10,
s = amax / 448 (with UE8M0: s = 2**ceil(log2(s))), q = clamp(x / s, -448, 448) cast
to float8_e4m3fn. Scales are [M, K // group_size] float32, row-major or column-major
(strides (1, M), the layout DeepGEMM consumes).

The oracle computes the same thing exactly: float64 quotients rounded once to float32
(correctly rounded, since 53 >= 2 * 24 + 2 bits), so every scale and code is the correctly
rounded one. The baseline is not always: on CUDA, torch divides by a Python scalar as a
multiplication by its reciprocal, which leaves ~0.5% of scales one ulp high and moves the
codes that sit exactly on an e4m3 midpoint (bench/results/2026-12-03-h200-quant-diag).
"""

import torch

FP8_MAX = 448.0
EPS = 1e-10


def make_inputs(workload, seed: int, device: str):
    p = workload.params
    M, K, group = int(p["M"]), int(p["K"]), int(p["group"])
    dtype = getattr(torch, workload.dtype)
    g = torch.Generator(device=device)
    g.manual_seed(seed)

    x = torch.randn(M, K, generator=g, device=device, dtype=torch.float32)
    # Tokens differ in magnitude: per-row factors 2^[-6, 6].
    row_exp = (torch.randn(M, 1, generator=g, device=device) * 2.0).clamp(-6.0, 6.0)
    x = x * torch.exp2(row_exp)
    # Outlier channels (as in LLM activations): 1 in 64 columns 16x larger, so many groups
    # hold one large value and many small ones (large dynamic range inside a group).
    outlier = torch.rand(1, K, generator=g, device=device) < 1.0 / 64.0
    x = torch.where(outlier, x * 16.0, x)
    # A sprinkle of tiny values (2^-9 of their neighbours) that quantise to e4m3 subnormals
    # or to zero.
    tiny = torch.rand(M, K, generator=g, device=device) < 1.0 / 32.0
    x = torch.where(tiny, x * 2.0**-9, x)
    x = x.to(dtype)

    # Edge cases: the first group of row 0 entirely zero (amax clamps to eps); the last
    # group of the last row zero except one element (its code is +-448).
    x[0, :group] = 0
    last = x[M - 1, K - group :].clone()
    x[M - 1, K - group :] = 0
    keep = group // 3
    x[M - 1, K - group + keep] = torch.where(last[keep] != 0, last[keep], 1.0)
    return x, group, bool(p["column_major"]), bool(p["ue8m0"])


def reference(x, group_size, column_major, ue8m0):
    M, K = x.shape
    xg = x.view(M, K // group_size, group_size).float()
    amax = xg.abs().amax(dim=-1, keepdim=True).clamp(min=EPS)
    s = amax / FP8_MAX
    if ue8m0:
        s = torch.exp2(torch.ceil(torch.log2(s)))
    q = (xg / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(M, K)
    return q, _scale_layout(s.view(M, K // group_size), column_major)


def _scale_layout(s, column_major):
    """The [M, K // group_size] scales row-major, or in DeepGEMM's column-major layout: allocated
    [K // group_size, M] and transposed, strides (1, M) (also when M or K // group_size is 1, where
    .t().contiguous().t() would not change the strides)."""
    if not column_major:
        return s
    return torch.empty(s.shape[1], s.shape[0], dtype=s.dtype, device=s.device).t().copy_(s)


def _pow2_ceil(s):
    """The smallest power of two >= s, exactly (CUDA's log2 is not exact at powers of two)."""
    mantissa, exponent = torch.frexp(s)  # s = mantissa * 2**exponent, mantissa in [0.5, 1)
    return torch.where(mantissa == 0.5, s, torch.ldexp(torch.ones_like(s), exponent))


def oracle(x, group_size, column_major, ue8m0):
    M, K = x.shape
    xg = x.view(M, K // group_size, group_size).double()
    amax = xg.abs().amax(dim=-1, keepdim=True).clamp(min=EPS)
    s = (amax / FP8_MAX).float()  # one rounding of the exact quotient
    if ue8m0:
        s = _pow2_ceil(s)
    y = (xg / s.double()).float()
    q = y.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(M, K)
    return q, _scale_layout(s.view(M, K // group_size), column_major)


def derived(workload, inputs):
    return {"elt_bytes": float(inputs[0].element_size())}


def comparator_prepare(x, group_size, column_major, ue8m0):
    compiled = torch.compile(reference, dynamic=False)
    return compiled, x, group_size, column_major, ue8m0


def comparator(compiled, x, group_size, column_major, ue8m0):
    return compiled(x, group_size, column_major, ue8m0)
