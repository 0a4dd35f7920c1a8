"""Would muon's second segment start from a Gram matrix made in the square state? An emulation of the roundings.

    PYTHONPATH=src python3 bench/diag/muon_reanchor_emulation.py      (CPU, seconds)

The shipped composed plan (3 + 2 steps, expert.py): A_0 = X_0 X_0^T, three steps composed into Q_3, X_3 = Q_3 X_0
stored, then A_0' = X_3 X_3^T and two steps composed into Q', X_5 = Q' X_3. The re-anchored variant (costed in
docs/perf/optimizer.md, thirty-fifth session) forms A_3 = Q_3 (Q_3 A_0) in the square state instead of X_3 and
its Gram matrix, composes Q' from it, and applies Q' Q_3 to X_0 once. Every rounding as the expert's kernels make
it: bf16 X, the square state stored in fp16 with P = a I + b A + c A^2 stored whole, the last Q of a run stored in
X's type, every product accumulated in fp32. Prints each form's error against the float64 oracle (relative
Frobenius norm) beside the bf16 reference's, on the task's own momentum-like inputs.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from d2kbench.tasks.optimizer.muon_newton_schulz import reference as ref

NS_A, NS_B, NS_C = ref.NS_COEFFS
SHAPES = [(4, 768, 2048), (1, 1024, 3584), (2, 300, 900)]  # (batch, m, n): the batch's matrices among them
SEEDS = (1, 2)


def stored(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x rounded to the storage type `dtype`, computed on in fp32."""
    return x.to(dtype).to(torch.float32)


def compose(state: torch.Tensor, steps: int, last_dtype: torch.dtype) -> torch.Tensor:
    """Q = P_{steps-1} ... P_0 from the fp16 state, as expert._compose with P stored; the last product in last_dtype."""
    eye = torch.eye(state.shape[-1])
    q = None
    for k in range(steps):
        p = stored(NS_C * state @ state + NS_B * state + NS_A * eye, torch.float16)
        if k < steps - 1:
            state = stored(p @ stored(p @ state, torch.float16), torch.float16)  # A <- P (P A)
        q = p if q is None else stored(p @ q, last_dtype if k == steps - 1 else torch.float16)
    return q


def normalised_gram(g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x0 = stored(g, torch.bfloat16)
    inv = 1.0 / (x0.norm(dim=(-2, -1), keepdim=True) + ref.NORM_EPS)
    return x0, inv, stored(x0 @ x0.mT * inv * inv, torch.float16)


def shipped(g: torch.Tensor) -> torch.Tensor:
    x0, inv, a0 = normalised_gram(g)
    x3 = stored(compose(a0, 3, torch.bfloat16) @ x0 * inv, torch.bfloat16)
    return stored(compose(stored(x3 @ x3.mT, torch.float16), 2, torch.bfloat16) @ x3, torch.bfloat16)


def reanchored(g: torch.Tensor) -> torch.Tensor:
    x0, inv, a0 = normalised_gram(g)
    q3 = compose(a0, 3, torch.float16)
    a3 = stored(q3 @ stored(q3 @ a0, torch.float16), torch.float16)
    q5 = stored(compose(a3, 2, torch.float16) @ q3, torch.bfloat16)
    return stored(q5 @ x0 * inv, torch.bfloat16)


def relative_error(x: torch.Tensor, oracle: torch.Tensor) -> float:
    return float((x.double() - oracle).norm() / oracle.norm())


def main() -> None:
    print("| batch x m x n | seed | bf16 reference | shipped (3 + 2) | re-anchored |\n|---|---|---|---|---|")
    for batch, m, n in SHAPES:
        workload = SimpleNamespace(params={"B": batch, "batched": batch > 1, "M": m, "N": n}, dtype="bfloat16")
        for seed in SEEDS:
            (g,) = ref.make_inputs(workload, seed, "cpu")
            g = g if batch > 1 else g.unsqueeze(0)
            oracle = ref.oracle(g)
            errors = [relative_error(f(g).float(), oracle) for f in (ref.reference, shipped, reanchored)]
            print(f"| {batch}x{m}x{n} | {seed} | " + " | ".join(f"{e:.2e}" for e in errors) + " |", flush=True)


if __name__ == "__main__":
    main()
