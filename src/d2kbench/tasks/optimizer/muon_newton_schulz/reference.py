"""Muon's Newton-Schulz orthogonalisation (Keller Jordan's zeropower_via_newtonschulz5).

The reference runs the iteration in the workload dtype (bfloat16 in the scored workloads), as
Muon does; the oracle runs the same five steps in float64 (see `oracle`)."""

import torch

NS_COEFFS = (3.4445, -4.7750, 2.0315)
NS_STEPS = 5
NORM_EPS = 1e-7


SPIKES = 8          # rank of the dominant part of the synthetic momentum
SPIKE_TOP = 32.0    # its top singular value, in units of the noise's spectral edge


def make_inputs(workload, seed: int, device: str) -> tuple:
    """A momentum-like update: Gaussian noise plus a few dominant directions.

    Real Muon inputs (momenta of gradients) have a spread spectrum: a few large singular values
    over a noise bulk. The dominant part has rank SPIKES with singular values SPIKE_TOP,
    SPIKE_TOP/sqrt(2), ... times the noise's spectral edge (sqrt(m) + sqrt(n)), so the spread
    (top over bulk, about two orders of magnitude) is the same at every size."""
    p = workload.params
    dtype = getattr(torch, workload.dtype)
    batch = (p["B"],) if p["batched"] else ()
    m, n = p["M"], p["N"]
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    noise = torch.randn(batch + (m, n), generator=gen, device=device, dtype=torch.float32)
    u = torch.randn(batch + (m, SPIKES), generator=gen, device=device, dtype=torch.float32)
    v = torch.randn(batch + (SPIKES, n), generator=gen, device=device, dtype=torch.float32)
    u = u / u.norm(dim=-2, keepdim=True)
    v = v / v.norm(dim=-1, keepdim=True)
    sv = SPIKE_TOP * (m ** 0.5 + n ** 0.5) * 2.0 ** (-0.5 * torch.arange(SPIKES, device=device))
    g = noise + (u * sv) @ v
    return (g.to(dtype),)


def _newton_schulz(G: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    a, b, c = NS_COEFFS
    X = G.to(dtype)
    transposed = G.size(-2) > G.size(-1)
    if transposed:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + NORM_EPS)
    for _ in range(NS_STEPS):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if transposed:
        X = X.mT
    return X


def reference(G: torch.Tensor) -> torch.Tensor:
    """zeropower_via_newtonschulz5 as Muon runs it: every operation in the input's dtype."""
    return _newton_schulz(G, G.dtype)


def oracle(G: torch.Tensor) -> torch.Tensor:
    """The same five steps in float64 from the workload-dtype input.

    float64 rather than float32: the float32 workloads' tolerance is set from the error of the
    float32 reference, which a float32 oracle would report as zero; float64 also keeps the oracle
    free of TF32 if a process enables it. The cost is modest: 4.4e13 float64 FLOPs on the largest
    workload, about a second at the H200's float64 tensor-core rate."""
    return _newton_schulz(G.to(torch.float64), torch.float64)


_compiled = None


def comparator_prepare(G: torch.Tensor) -> tuple:
    global _compiled
    if _compiled is None:
        _compiled = torch.compile(reference, dynamic=False)
    return (G,)


def comparator(G: torch.Tensor) -> torch.Tensor:
    return _compiled(G)
