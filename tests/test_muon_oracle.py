"""muon's float64 oracle in its Gram-space form agrees with the five steps taken one by one; the roofline counts the
least work of the known forms."""

import pytest
import torch

from d2kbench.evaluate.taskcode import reference_module
from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task, roofline
from d2kbench.suite.schema import Workload

SHAPES = [(48, 112), (80, 40), (2, 40, 52), (3, 64, 200), (200, 700), (96, 150)]


@pytest.fixture(scope="module")
def ref():
    return reference_module(find_task("muon_newton_schulz"))


def momentum_like(shape, seed):
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(shape, generator=gen, dtype=torch.float64)
    return g + 30 * torch.randn(shape[:-1] + (1,), generator=gen, dtype=torch.float64) * torch.randn(
        shape[:-2] + (1, shape[-1]), generator=gen, dtype=torch.float64)  # a dominant rank-one part


@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_gram_form_equals_the_steps_in_float64(ref, shape):
    G = momentum_like(shape, seed=len(shape) * 1000 + shape[-1])
    steps = ref._newton_schulz(G, torch.float64)
    gram = ref._newton_schulz_gram(G)
    assert gram.shape == steps.shape
    rms = steps.pow(2).mean().sqrt()
    assert float((gram - steps).abs().max() / rms) < 1e-10
    # Not a fixed point that any input reaches: the outputs differ from the (normalised) input.
    assert float((steps - G / G.norm(dim=(-2, -1), keepdim=True)).abs().max() / rms) > 0.1


def test_oracle_takes_the_cheaper_form(ref):
    assert not ref.gram_form_is_cheaper(4096, 4096)      # square: step by step
    assert not ref.gram_form_is_cheaper(1000, 1200)
    assert ref.gram_form_is_cheaper(4096, 14336)         # the rectangular workloads
    assert ref.gram_form_is_cheaper(8192, 28672)
    assert ref.gram_form_is_cheaper(768, 2048)
    G = momentum_like((2, 40, 52), seed=3).to(torch.float32)
    wide = momentum_like((30, 100), seed=4).to(torch.float32)
    assert torch.equal(ref.oracle(G), ref._newton_schulz(G.to(torch.float64), torch.float64))
    assert torch.equal(ref.oracle(wide), ref._newton_schulz_gram(wide.to(torch.float64)))


@pytest.mark.parametrize(("m", "n"), [(4096, 4096), (4096, 14336), (8192, 28672), (768, 2048), (1000, 1200)])
def test_roofline_counts_no_more_work_than_any_plan_takes(m, n):
    """The task's FLOPs are the least work known (so the speed-of-light fraction cannot pass 1 for a known
    algorithm): the expert's own count of a single five-step segment, never more than its composed or step-by-step
    plans, and the step-by-step plan's where the matrix is square."""
    task = find_task("muon_newton_schulz")
    expert = load_module(task.expert_path, "muon_expert_for_roofline")
    workload = Workload(name="w", split="scored", dtype="bfloat16", params={"B": 2, "M": n, "N": m})  # tall
    _, flops = roofline(task, workload)
    per_matrix = flops / 2 - 2 * m * n  # less the norm
    assert per_matrix == expert._plan_flops(m, n, (5,))
    assert per_matrix <= min(expert._plan_flops(m, n, expert.COMPOSED_SEGMENTS),
                             expert._plan_flops(m, n, expert.PLAIN_SEGMENTS))
    if m == n:
        assert per_matrix == expert._plan_flops(m, n, expert.PLAIN_SEGMENTS)
