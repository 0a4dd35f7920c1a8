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


def _newton_schulz_gram(X: torch.Tensor) -> torch.Tensor:
    """`_newton_schulz` in float64, its five steps carried in the m x m Gram space (m = min(M, N)).

    Each step's B = b A + c A A is a polynomial in A = X X^T, so with Q = a I + B the step is
    X' = Q X, and A' = Q X X^T Q = Q Q A (Q commutes with A). Then X_5 = Q_4 ... Q_0 X_0: two
    [m, m] x [m, n] products (A_0 and the last) and 17 m x m ones, against ten of the first kind and
    five of the second step by step. The same arithmetic in exact terms; in float64 the two forms agree
    to about 1e-12 of the output's RMS (tests/test_muon_oracle.py)."""
    a, b, c = NS_COEFFS
    transposed = X.size(-2) > X.size(-1)
    if transposed:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + NORM_EPS)
    A = X @ X.mT
    eye = torch.eye(A.size(-1), dtype=A.dtype, device=A.device)
    M = None  # Q_k ... Q_0
    for step in range(NS_STEPS):
        A2 = A @ A
        Q = a * eye + b * A + c * A2
        M = Q if M is None else Q @ M
        if step < NS_STEPS - 1:
            A = Q @ (a * A + b * A2 + c * (A2 @ A))  # Q (Q A)
    X = M @ X
    if transposed:
        X = X.mT
    return X


def gram_form_is_cheaper(m: int, n: int) -> bool:
    """Whether the Gram-space form takes fewer FLOPs than the five steps (m <= n): 4m^2n + 34m^3
    against 5 (4m^2n + 2m^3), true once n > 1.5 m."""
    return 4 * m * m * n + 34 * m ** 3 < 5 * (4 * m * m * n + 2 * m ** 3)


def oracle(G: torch.Tensor) -> torch.Tensor:
    """The same five steps in float64 from the workload-dtype input, in whichever of the two exact
    forms costs less (`_newton_schulz_gram` for wide matrices).

    float64 rather than float32: the float32 workloads' tolerance is set from the error of the
    float32 reference, which a float32 oracle would report as zero; float64 also keeps the oracle
    free of TF32 if a process enables it. The cost: step by step, 4.4e13 float64 FLOPs on the largest
    workload (8192 x 28672), about 0.7 s on the H200; the Gram form does it in 2.6e13. The evaluator
    runs the oracle on five input sets per workload, so this is most of muon's evaluation time."""
    X = G.to(torch.float64)
    m, n = sorted(X.shape[-2:])
    if gram_form_is_cheaper(m, n):
        return _newton_schulz_gram(X)
    return _newton_schulz(X, torch.float64)


_compiled = None


def comparator_prepare(G: torch.Tensor) -> tuple:
    global _compiled
    if _compiled is None:
        _compiled = torch.compile(reference, dynamic=False)
    return (G,)


def comparator(G: torch.Tensor) -> torch.Tensor:
    return _compiled(G)
