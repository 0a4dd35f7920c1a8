"""Muon's composed plan with the expert's roundings, against variants of it, emulated on the CPU.

    PYTHONPATH=src python3 bench/diag/muon_rounding_emulation.py      (CPU, about a minute)

Every rounding as the expert's kernels make it: bf16 X, the square state stored in fp16 with P = a I + b A + c A^2
stored whole, the last Q of a run stored in X's type, every product accumulated in fp32, and every symmetric product
stored as its kernel stores it (128-row blocks on and above the diagonal as computed, those below mirrored). Prints
the error against the float64 oracle (relative Frobenius norm) of the bf16 reference, of the shipped plan and of:
- re-anchored: the second segment's Gram matrix formed in the square state, A_3 = Q_3 (Q_3 A_0), instead of from a
  stored X_3, and Q' Q_3 applied to X_0 once (costed in docs/perf/optimizer.md, thirty-fifth session);
- self-diagonal: the diagonal blocks of every A A product computed as A[rows, :] A[rows, :]^T (`SYM_SELF_DIAGONAL`).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from d2kbench.tasks.optimizer.muon_newton_schulz import reference as ref

NS_A, NS_B, NS_C = ref.NS_COEFFS
BLOCK = 128  # the symmetric kernels' row tile
SHAPES = [(4, 768, 2048), (1, 1024, 3584), (2, 300, 900)]  # (batch, m, n): the batch's matrices among them
SEEDS = (1, 2)


def stored(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x rounded to the storage type `dtype`, computed on in fp32."""
    return x.to(dtype).to(torch.float32)


def mirrored(full: torch.Tensor) -> torch.Tensor:
    """A symmetric product as its kernel stores it: blocks on and above the diagonal as computed, below mirrored."""
    out = full.clone()
    m = full.shape[-1]
    for i in range(0, m, BLOCK):
        for j in range(i + BLOCK, m, BLOCK):
            out[..., j:j + BLOCK, i:i + BLOCK] = full[..., i:i + BLOCK, j:j + BLOCK].mT
    return out


def square(a: torch.Tensor, self_diagonal: bool) -> torch.Tensor:
    """A A, its diagonal blocks from A's row panels alone where `self_diagonal`."""
    full = a @ a
    if self_diagonal:
        for i in range(0, a.shape[-1], BLOCK):
            rows = a[..., i:i + BLOCK, :]
            full[..., i:i + BLOCK, i:i + BLOCK] = rows @ rows.mT
    return full


def compose(state: torch.Tensor, steps: int, last_dtype: torch.dtype, self_diagonal: bool = False) -> torch.Tensor:
    """Q = P_{steps-1} ... P_0 from the fp16 state, as expert._compose with P stored; the last product in last_dtype."""
    eye = torch.eye(state.shape[-1])
    q = None
    for k in range(steps):
        p = stored(mirrored(NS_C * square(state, self_diagonal) + NS_B * state + NS_A * eye), torch.float16)
        if k < steps - 1:  # A <- P (P A)
            state = stored(mirrored(p @ stored(mirrored(p @ state), torch.float16)), torch.float16)
        q = p if q is None else stored(mirrored(p @ q), last_dtype if k == steps - 1 else torch.float16)
    return q


def normalised_gram(g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x0 = stored(g, torch.bfloat16)
    inv = 1.0 / (x0.norm(dim=(-2, -1), keepdim=True) + ref.NORM_EPS)
    return x0, inv, stored(mirrored(x0 @ x0.mT * inv * inv), torch.float16)


def shipped(g: torch.Tensor, self_diagonal: bool = False) -> torch.Tensor:
    x0, inv, a0 = normalised_gram(g)
    x3 = stored(compose(a0, 3, torch.bfloat16, self_diagonal) @ x0 * inv, torch.bfloat16)
    a3 = stored(mirrored(x3 @ x3.mT), torch.float16)
    return stored(compose(a3, 2, torch.bfloat16, self_diagonal) @ x3, torch.bfloat16)


def reanchored(g: torch.Tensor) -> torch.Tensor:
    x0, inv, a0 = normalised_gram(g)
    q3 = compose(a0, 3, torch.float16)
    a3 = stored(mirrored(q3 @ stored(mirrored(q3 @ a0), torch.float16)), torch.float16)
    q5 = stored(mirrored(compose(a3, 2, torch.float16) @ q3), torch.bfloat16)
    return stored(q5 @ x0 * inv, torch.bfloat16)


def self_diagonal(g: torch.Tensor) -> torch.Tensor:
    return shipped(g, self_diagonal=True)


def relative_error(x: torch.Tensor, oracle: torch.Tensor) -> float:
    return float((x.double() - oracle).norm() / oracle.norm())


def main() -> None:
    forms = (ref.reference, shipped, reanchored, self_diagonal)
    print("| batch x m x n | seed | bf16 reference | shipped (3 + 2) | re-anchored | self-diagonal |\n"
          "|---|---|---|---|---|---|")
    for batch, m, n in SHAPES:
        workload = SimpleNamespace(params={"B": batch, "batched": batch > 1, "M": m, "N": n}, dtype="bfloat16")
        for seed in SEEDS:
            (g,) = ref.make_inputs(workload, seed, "cpu")
            g = g if batch > 1 else g.unsqueeze(0)
            oracle = ref.oracle(g)
            errors = [relative_error(f(g).float(), oracle) for f in forms]
            print(f"| {batch}x{m}x{n} | {seed} | " + " | ".join(f"{e:.3e}" for e in errors) + " |", flush=True)


if __name__ == "__main__":
    main()
