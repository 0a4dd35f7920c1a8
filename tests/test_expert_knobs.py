"""Expert code paths that a tuning knob turns on, kept correct while they are off: the sweep on the H200 decides
whether they ship (bench/sweep.py --set NAME=...), so they must pass the task's checks as they stand."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from d2kbench.evaluate.evaluator import EvalOptions, evaluate
from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task
from tests.conftest import ACCEPTED_SPILLS, ROOT
from tests.test_tasks import DEVICE_TRITON, compile_report_with, compiled

KNOBS = [
    ("attn_decode_paged_gqa", "PREFETCH_PAGE_IDS = True", "PREFETCH_PAGE_IDS = False"),
    # No waves to fill: one split per (sequence, KV head), stage 1 writes the output (qwen3_8b_lvar's path on the
    # H200, which no cpu workload takes as shipped).
    ("attn_decode_paged_gqa", "WAVES = 8 ", "WAVES = 0 "),
    # the merge in one head-dim part (as shipped the D = 64 cpu workload takes two; the others are at the floor)
    ("attn_decode_paged_gqa", "MERGE_SPLIT_HEAD_DIM = True", "MERGE_SPLIT_HEAD_DIM = False"),
    # splits taken at run time, one-tile chunks: several per program, and programs left with none (the interpreter
    # runs a grid's programs in turn, so the first takes every chunk), on all three cpu workloads
    ("attn_decode_paged_gqa", "DYNAMIC_SPLIT_MIN_PROGRAMS = 16\nDYNAMIC_CHUNK_TILES = 4",
     "DYNAMIC_SPLIT_MIN_PROGRAMS = 2\nDYNAMIC_CHUNK_TILES = 1"),
    # every cpu workload takes the static splits, whose scores are transposed as shipped: the mma.sync tiles
    ("attn_decode_paged_gqa", 'SWAP_AB_DOTS = "static"', 'SWAP_AB_DOTS = "none"'),
    # by_waves takes wide symmetric tiles on every cpu shape (one wave each) and band ones on the profile workload
    # one warp for the one-group tiles of small problems, as before (the cpu workloads' tiles are small too)
    ("quant_per_token_group_fp8", "MIN_WARPS = 2", "MIN_WARPS = 1"),
    ("muon_newton_schulz", 'SYM_TILES = "by_waves"', 'SYM_TILES = "square"'),
    ("muon_newton_schulz", 'SYM_TILES = "by_waves"', 'SYM_TILES = "band"'),
    # the composed plan's Q X products on the one-tile kernel instead of the persistent TMA one (as shipped
    # cpu_wide_f32 takes the TMA kernel for both, cpu_tall_f16 for its second, cpu_batch_f16 for none)
    ("muon_newton_schulz", "MM_TMA = True", "MM_TMA = False"),
    # the composed runs with R stored and a Z added in the epilogue (as shipped only an fp16 input's: cpu_tall_f16;
    # cpu_wide_f32's fp32 state stores P)
    ("muon_newton_schulz", "STORE_P = True", "STORE_P = False"),
    # the symmetric launches' grids of exactly their tiles (every cpu shape takes wide tiles; band and square below)
    ("muon_newton_schulz", "SYM_EXACT_GRID = False", "SYM_EXACT_GRID = True"),
    # each symmetric result stored once (every cpu shape takes wide tiles; band and square below)
    ("muon_newton_schulz", "SYM_STORE_ONCE = False", "SYM_STORE_ONCE = True"),
]
# Where each cpu workload takes the knob's path alike, one of them is enough (the interpreter's muon is slow): the
# symmetric tiles are the same on the wide and the tall matrix (its transpose), so one float32 and one batched run.
ONE_WORKLOAD = {'SYM_TILES = "square"': ("cpu_wide_f32",), 'SYM_TILES = "band"': ("cpu_batch_f16",),
                "MM_TMA = False": ("cpu_wide_f32",), "STORE_P = False": ("cpu_wide_f32",),
                "SYM_EXACT_GRID = True": ("cpu_batch_f16",),
                # the composed float16 run, R stored (test_store_once_reads_only_what_it_stores runs the others)
                "SYM_STORE_ONCE = True": ("cpu_tall_f16",)}
# Production tiles only (muon's large configuration; the cpu shapes, m < 128, take the tiny one): the interpreter
# would run the shipped code again, so these are compiled for sm_90 and not evaluated on the cpu. Other code paths
# only: another tile size or stage count (MM_BLOCK_N, SYM_BLOCK_K, ...) is a sweep's to compile and time.
SM90_ONLY_KNOBS = [
    # the shipped rule's choice on every cpu shape (test_muons_wave_rule_takes_wide_tiles_where_they_were_faster)
    ("muon_newton_schulz", 'SYM_TILES = "by_waves"', 'SYM_TILES = "wide"'),
    # the merge launched after the split kernel drains (the interpreter has no PDL: it runs these launches either way)
    ("attn_decode_paged_gqa", "MERGE_PDL = True", "MERGE_PDL = False"),
    # the shipped split counts on every cpu workload (3, 2, 3): its own counts are the scored shapes' test below
    ("attn_decode_paged_gqa", 'SPLIT_RULE = "waves"', 'SPLIT_RULE = "whole_waves"'),
    # a bf16 input's square state in bf16 (the interpreter has no bf16: no cpu workload is one)
    ("muon_newton_schulz", "STATE_FP16 = True", "STATE_FP16 = False"),
    # the scales by an IEEE division (run in the interpreter by test_the_quants_codes_are_the_oracles_bit_for_bit)
    ("quant_per_token_group_fp8", "SCALE_PRODUCT = True", "SCALE_PRODUCT = False"),
]


def expert_variant(task, tmp_path, *replacements: tuple[str, str], name: str = "expert_variant"):
    """The task's expert.py with each (shipped, other) text replaced, each shipped text there exactly once, written to
    tmp_path as `name`.py (a test that needs two variants names one); its path."""
    source = task.expert_path.read_text()
    for shipped, other in replacements:
        assert source.count(shipped) == 1, f"{shipped!r} is no longer in expert.py exactly once"
        source = source.replace(shipped, other)
    variant = tmp_path / f"{name}.py"
    variant.write_text(source)
    return variant


@pytest.mark.parametrize(("task_id", "shipped", "other"), KNOBS, ids=[k[2] for k in KNOBS])
def test_the_other_setting_passes_the_cpu_workloads(task_id, shipped, other, tmp_path):
    task = find_task(task_id)
    variant = expert_variant(task, tmp_path, (shipped, other))
    result = evaluate(task, variant, EvalOptions(device="cpu", workloads=ONE_WORKLOAD.get(other)))
    assert result.verdict == "pass", f"{result.reason}: {result.detail}"
    assert len(result.workloads) == len(ONE_WORKLOAD.get(other) or task.split("cpu"))


@pytest.mark.parametrize(("task_id", "shipped", "other"), KNOBS + SM90_ONLY_KNOBS,
                         ids=[k[2] for k in KNOBS + SM90_ONLY_KNOBS])
def test_the_other_setting_compiles_for_sm90(task_id, shipped, other, tmp_path):
    """What the interpreter does not check: the variant lowers for the H200 (atomics' semantics, cache modifiers,
    shared memory) on the task's profile workload, spilling no more than the shipped expert is allowed to."""
    task = find_task(task_id)
    variant = expert_variant(task, tmp_path, (shipped, other))
    kernels = compiled(task, variant)
    assert kernels, "the variant launched no Triton kernel"
    for k in kernels:
        assert k["ok"], f"{k['kernel']}: {k.get('error')}"
        allowed = ACCEPTED_SPILLS.get((task_id, k["kernel"]), 0)
        assert k.get("spill_store_bytes", 0) <= allowed, f"{k['kernel']} spills registers"


MUON_OCCUPANCY = [
    # (replacements, symmetric-product programs per SM, most spill in bytes). As shipped the profile workload
    # (4096x14336) takes band tiles: wide tiles off the diagonal band and square ones on it, one launch, one program
    # per SM at the wide path's registers (bench/results/2026-12-04-h200-owed-19 calls 1-2).
    ((), 1, 512),
    # wide tiles (8192x28672's, bench/results/2026-12-04-h200-owed-18 call6): uncapped, one program per SM
    ((('SYM_TILES = "by_waves"', 'SYM_TILES = "wide"'),), 1, 512),
    # square tiles, the register cap and its alternatives swept on the H200 (bench/results/2026-12-04-h200-sweep-17):
    # the cap makes room for two programs, uncapped 8 warps leave one, 4 warps of 255 registers also fit two.
    ((('SYM_TILES = "by_waves"', 'SYM_TILES = "square"'),), 2, 512),
    ((('SYM_TILES = "by_waves"', 'SYM_TILES = "square"'), ("SYM_MAXNREG = 128", "SYM_MAXNREG = None")), 1, 0),
    ((('SYM_TILES = "by_waves"', 'SYM_TILES = "square"'), ("SYM_MAXNREG = 128", "SYM_MAXNREG = None"),
      ("SYM_WARPS = 8", "SYM_WARPS = 4")), 2, 1024),
]


OCCUPANCY_IDS = ["shipped", "wide", "square", "square_uncapped", "square_four_warps"]


@pytest.mark.parametrize(("replacements", "programs", "spill"), MUON_OCCUPANCY, ids=OCCUPANCY_IDS)
def test_muons_symmetric_products_fit_as_measured(replacements, programs, spill, tmp_path):
    """Each setting's sm_90 compile gives the symmetric products (their most limited launch) the programs per SM
    (sm_90 occupancy rules over registers and shared memory) and the spill that were timed. (The tile settings run
    the cpu workloads in the test above; the interpreter ignores register caps and warp counts.)"""
    task = find_task("muon_newton_schulz")
    variant = expert_variant(task, tmp_path, *replacements)
    sym = [k for k in compiled(task, variant) if k["kernel"] == "_sym_gemm_kernel"]
    assert sym and all(k["ok"] for k in sym)
    assert min(k["programs_per_sm"] for k in sym) == programs  # the launches whose registers limit them most
    assert max(k.get("spill_store_bytes", 0) for k in sym) <= spill


def test_muons_wave_rule_takes_wide_tiles_where_they_were_faster():
    """The symmetric products' tile rule on the H200's 132 SMs, for the scored shapes it was measured on
    (bench/results/2026-12-04-h200-owed-18 call6, owed-19 calls 1-2): wide tiles only where their grid needs no more
    waves than the square one's (8192x28672: 8 and 8), band tiles where it needs more (4096: 3 against 2; the batch:
    12 against 11); and the expert's programs per SM that the rule assumes are the ones its compile gives (the test
    above)."""
    module = load_module(find_task("muon_newton_schulz").expert_path, "test_wave_rule_expert")
    tiles = {(m, batch): module._sym_tile_shape(m, batch, 128, 132) for m, batch in [(4096, 1), (8192, 1), (768, 128)]}
    assert tiles == {(4096, 1): "band", (8192, 1): "wide", (768, 128): "band"}
    # the cpu workloads (tiny configuration, 16-row tiles) all take wide tiles: "wide" is evaluated as shipped there
    task = find_task("muon_newton_schulz")
    cpu_shapes = {(min(w.params["M"], w.params["N"]), w.params["B"]) for w in task.workloads if w.split == "cpu"}
    assert cpu_shapes and {module._sym_tile_shape(m, b, module._CONFIG_TINY["sym_block"], 132)
                          for m, b in cpu_shapes} == {"wide"}
    measured = {ids: programs for ids, (_, programs, _) in zip(OCCUPANCY_IDS, MUON_OCCUPANCY, strict=True)}
    assert (module._SQUARE_PROGRAMS_PER_SM, module._WIDE_PROGRAMS_PER_SM) == (measured["square"], measured["wide"])


def test_attentions_whole_wave_rule_on_the_scored_shapes():
    """The split counts of the scored workloads on the H200's 132 SMs: the single 128k-token sequence goes from 264
    splits (2.7 waves at three programs per SM) to 99 (one full wave), llama3_70b from 9 (2.9 waves) to 3 (one),
    llama3_8b and qwen3_8b_lvar keep theirs; and the programs per SM that the rule assumes are those of the split
    kernel's sm_90 compile on the profile workload (the 128k sequence)."""
    task = find_task("attn_decode_paged_gqa")
    module = load_module(task.expert_path, "test_attention_split_rule")
    shapes = {"llama3_8b": (64, 8, 4096), "llama3_70b": (16, 8, 32768), "qwen3_8b_lvar": (256, 8, 2048),
              "qwen3_235b_b1": (1, 4, 131072)}
    cpu = torch.device("cpu")  # sized as on an H200 (132 SMs)
    splits = {}
    for rule in ("waves", "whole_waves"):
        module.SPLIT_RULE = rule
        splits[rule] = {name: module._num_splits(b, hkv, length // 16, 16, cpu) for name, (b, hkv, length) in
                        shapes.items()}
    assert splits["waves"] == {"llama3_8b": 3, "llama3_70b": 9, "qwen3_8b_lvar": 1, "qwen3_235b_b1": 264}
    assert splits["whole_waves"] == {"llama3_8b": 3, "llama3_70b": 3, "qwen3_8b_lvar": 1, "qwen3_235b_b1": 99}
    split = [k for k in compiled(task, task.expert_path) if k["kernel"] == "_decode_split_kernel"]
    assert split and all(k["programs_per_sm"] == module.SPLIT_PROGRAMS_PER_SM for k in split)
    # as shipped the 128k sequence takes the dynamic split's one wave (at 99 programs a pair), not these splits
    assert split[0]["grid"] == [4, 1, 99] and split[0]["waves"] == 1.0


def test_the_whole_wave_rule_counts_in_the_occupancy_of_the_kernel_it_launches(tmp_path):
    """Without the page ids ahead the split kernel's mma.sync tiles are smaller (one K/V buffer) and more of its
    programs fit an SM: the rule's waves follow, giving the 128k sequence 132 splits, again one full wave (with the
    H200's Triton); with the transposed tiles (two wgmma buffers) three an SM, 99 splits."""
    task = find_task("attn_decode_paged_gqa")
    swapped = expert_variant(task, tmp_path, ("PREFETCH_PAGE_IDS = True", "PREFETCH_PAGE_IDS = False"),
                             ('SPLIT_RULE = "waves"', 'SPLIT_RULE = "whole_waves"'),
                             ("DYNAMIC_SPLIT_MIN_PROGRAMS = 16", "DYNAMIC_SPLIT_MIN_PROGRAMS = None"),
                             name="swapped")
    assert load_module(swapped, "test_whole_waves_swapped").SPLIT_PROGRAMS_PER_SM == 3
    split = [k for k in compiled(task, swapped) if k["kernel"] == "_decode_split_kernel"]
    assert [(k["programs_per_sm"], k["grid"], k["waves"]) for k in split] == [(3, [4, 1, 99], 1.0)]
    variant = expert_variant(task, tmp_path, ('SWAP_AB_DOTS = "static"', 'SWAP_AB_DOTS = "none"'),
                             ("PREFETCH_PAGE_IDS = True", "PREFETCH_PAGE_IDS = False"),
                             ('SPLIT_RULE = "waves"', 'SPLIT_RULE = "whole_waves"'),
                             # the static grid (the dynamic kernel without the page ids ahead fits five programs per SM)
                             ("DYNAMIC_SPLIT_MIN_PROGRAMS = 16", "DYNAMIC_SPLIT_MIN_PROGRAMS = None"))
    module = load_module(variant, "test_whole_waves_without_prefetch")
    assert module.SPLIT_PROGRAMS_PER_SM == 4
    report = compile_report_with(DEVICE_TRITON, task.id, variant)
    split = [k for k in report["kernels"] if k["kernel"] == "_decode_split_kernel"]
    assert [(k["programs_per_sm"], k["grid"], k["waves"]) for k in split] == [(4, [4, 1, 132], 1.0)], report["triton"]


def test_the_whole_wave_rule_fills_one_wave_on_the_128k_sequence(tmp_path):
    """What the compile report says of the rule's launch on the profile workload: 99 splits x 4 KV heads at three
    programs per SM, exactly one wave on 132 SMs."""
    task = find_task("attn_decode_paged_gqa")
    variant = expert_variant(task, tmp_path, ('SPLIT_RULE = "waves"', 'SPLIT_RULE = "whole_waves"'))
    split = [k for k in compiled(task, variant) if k["kernel"] == "_decode_split_kernel"]
    assert [(k["grid"], k["waves"]) for k in split] == [([4, 1, 99], 1.0)]


def interpreted(script: str, *args: str) -> subprocess.CompletedProcess:
    """`script` run by Python (with `args`) in a process of its own under Triton's interpreter (chosen as kernels are
    decorated, so not in this one), with the checkout's package."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)


EXACT_GRID_MAP = """
import torch
import triton
import triton.language as tl
from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task
expert = load_module(find_task("muon_newton_schulz").expert_path, "exact_grid_expert")
_upper_tile = expert._upper_tile


@triton.jit
def tiles_kernel(out_ptr, num_rows, num_cols, RATIO: tl.constexpr, GROUP: tl.constexpr, OFFSET: tl.constexpr):
    pid = tl.program_id(0)
    ti, tj = _upper_tile(pid, num_rows, num_cols, RATIO, GROUP, OFFSET, True)
    tl.store(out_ptr + 2 * pid, ti)
    tl.store(out_ptr + 2 * pid + 1, tj)


def upper_slots(rows, cols, ratio, group, offset):
    # _upper_tile's slots in its order, those its caller keeps (tj >= ti // ratio + offset)
    kept = []
    for first in range(0, rows, group):
        n = min(group, rows - first)
        for local in range(n * (cols - first // ratio - offset)):
            ti, tj = first + local % n, first // ratio + offset + local // n
            if tj >= ti // ratio + offset:
                kept.append((ti, tj))
    return kept


expert.SYM_EXACT_GRID = True
checked = 0
for ratio, offset in ((1, 0), (2, 0), (2, 1)):  # square, wide and band tiles
    for group in (2, 8):
        for rows in (1, 3, 6, 7, 12, 17, 20):  # partial groups, odd rows, several groups
            cols = triton.cdiv(rows, ratio)
            want = upper_slots(rows, cols, ratio, group, offset)
            count = expert._num_upper_programs(rows, cols, ratio, group, offset)
            assert count == len(want), (ratio, offset, group, rows, count, len(want))
            if not count:
                continue
            out = torch.full((count, 2), -1, dtype=torch.int32)
            tiles_kernel[(count,)](out, rows, cols, RATIO=ratio, GROUP=group, OFFSET=offset)
            assert [tuple(t) for t in out.tolist()] == want, (ratio, offset, group, rows)
            checked += 1
print("checked", checked)
"""


def test_the_exact_grid_maps_each_kept_tile_once_in_order():
    """SYM_EXACT_GRID's tile map on the interpreter: for square, wide and band tiles, groups of two and eight tile
    rows, 1-20 tile rows, program p takes the p-th tile that _upper_tile's grid keeps (its empty slots left out, the
    order the same), and the launcher counts exactly those programs."""
    done = interpreted(EXACT_GRID_MAP)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["checked", str(3 * 2 * 7 - 2)], done.stdout  # band: no tile under 3 rows


@pytest.mark.parametrize("tiles", ["band", "square"])
def test_the_exact_grid_passes_band_and_square_tiles(tiles, tmp_path):
    """SYM_EXACT_GRID on the tiles no cpu shape takes as shipped: band tiles on the float16 batch, square ones on the
    composed float32 shape."""
    task = find_task("muon_newton_schulz")
    variant = expert_variant(task, tmp_path, ("SYM_EXACT_GRID = False", "SYM_EXACT_GRID = True"),
                             ('SYM_TILES = "by_waves"', f'SYM_TILES = "{tiles}"'))
    workloads = ("cpu_batch_f16",) if tiles == "band" else ("cpu_wide_f32",)
    result = evaluate(task, variant, EvalOptions(device="cpu", workloads=workloads))
    assert result.verdict == "pass", f"{result.reason}: {result.detail}"
    assert len(result.workloads) == 1


STORE_ONCE_POISONED = """
import torch
from d2kbench.evaluate import interp_bounds
from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task
assert interp_bounds.install()  # every access inside the launch's tensors, as the evaluator's cpu workers check
expert = load_module(find_task("muon_newton_schulz").expert_path, "store_once_expert")
made = []


def poisoned_empty(*args, **kwargs):  # the expert's buffers NaN where nothing writes them
    t = torch.zeros(*args, **kwargs)
    if t.is_floating_point():
        t.fill_(float("nan"))
    made.append(t)
    return t


expert.torch.empty = poisoned_empty
pair = 2 * expert._CONFIG_TINY["sym_block"]
gen = torch.Generator().manual_seed(0)
composed, plain = (1, 40, 100), (2, 40, 52)  # both with a partial pair
for tiles, shape in (("wide", composed), ("band", composed), ("band", plain), ("square", plain)):
    g = torch.randn(*shape, generator=gen)
    expert.SYM_TILES = tiles
    expert.SYM_STORE_ONCE = False
    want = expert.run(g)
    expert.SYM_STORE_ONCE = True
    made.clear()
    got = expert.run(g)
    assert got.isfinite().all(), (tiles, shape)
    assert torch.allclose(got, want, atol=1e-5), (tiles, shape, (got - want).abs().max())
    # the Gram/state matrix A, written packed by every product that writes it: NaN exactly below the pair
    # diagonal
    state = [t for t in made if t.dim() == 4][0][0]
    i = torch.arange(shape[1])
    below = (i[:, None] // pair) > (i[None, :] // pair)
    assert torch.equal(state.isnan(), below.expand_as(state)), (tiles, shape)
    print(tiles, shape[0], "ok")
"""


def test_store_once_reads_only_what_it_stores():
    """SYM_STORE_ONCE on the interpreter with every buffer of the expert NaN until written: on wide, band and square
    tiles, the composed and the plain plan (band tiles both), the output is finite and equals the shipped layout's,
    and the state matrix A holds NaN exactly below the diagonal of block pairs (so no product wrote there, and none
    read it); no access leaves the launches' tensors (`interp_bounds`)."""
    done = interpreted(STORE_ONCE_POISONED)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(done.stdout.split("ok")) - 1 == 4, done.stdout


def test_the_band_parts_diagnosis_matches_the_experts_launch_on_the_interpreter():
    """bench/diag/muon_band_parts.py imports the expert's tile helpers: its cpu mode checks every storing variant
    against the expert's launch (the packed one with its operands NaN where that layout stores nothing)."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "diag" / "muon_band_parts.py"), "--cpu"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "check packed:" in done.stdout and "FAILED" not in done.stdout, done.stdout


RECIPROCAL_CODES = """
import sys
import torch
from pathlib import Path
from types import SimpleNamespace
from d2kbench.evaluate import interp_fp8
from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task
assert interp_fp8.install()  # the interpreter's own e4m3 casts misround (as the evaluator's cpu workers do)
task = find_task("quant_per_token_group_fp8")
module = load_module(Path(sys.argv[1]), "reciprocal_expert")
ref = load_module(task.reference_path, "reciprocal_reference")
gen = torch.Generator().manual_seed(3)
CODES = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).double()  # the positive e4m3 values
MIDPOINTS = (CODES[:-1] + CODES[1:]) / 2


def near_midpoints(rows, k, group):
    # Each group's first element its absmax A in [1, 2), the others e4m3 rounding midpoints times the group's scale
    # (A / 448, rounded) nudged by -1, 0 or +1 ulp: quotients where an unrounded x * (1/scale) picks the wrong code.
    amax = (1 + torch.rand(rows, k // group, 1, generator=gen, dtype=torch.float64)).float().double()
    scale = (amax / 448).float().double()
    x = (MIDPOINTS[torch.randint(0, len(MIDPOINTS), (rows, k // group, group), generator=gen)] * scale).float()
    nudge = torch.randint(-1, 2, x.shape, generator=gen)
    x = torch.where(nudge > 0, torch.nextafter(x, torch.tensor(float("inf"))), x)
    x = torch.where(nudge < 0, torch.nextafter(x, torch.tensor(float("-inf"))), x)
    x[:, :, 0] = amax[:, :, 0].float()
    return x.reshape(rows, k)


cases = [(near_midpoints(6, 1024, 128), False)]
for dtype, ue8m0 in (("float16", False), ("float32", True)):
    workload = SimpleNamespace(params=dict(M=6, K=1024, group=128, column_major=False, ue8m0=ue8m0), dtype=dtype)
    cases.append((ref.make_inputs(workload, 11, "cpu")[0], ue8m0))
for x, ue8m0 in cases:
    q, s = module.run(x, 128, False, ue8m0)
    want_q, want_s = ref.oracle(x, 128, False, ue8m0)
    assert torch.equal(s, want_s), (x.dtype, ue8m0)
    same = q.view(torch.uint8) == want_q.view(torch.uint8)
    assert bool(same.all()), (x.dtype, ue8m0, int((~same).sum()))
print("ok")
"""


@pytest.mark.parametrize(("corrected", "scale_product"), [(True, False), (True, True), (False, False)])
def test_the_quants_codes_are_the_oracles_bit_for_bit(corrected, scale_product, tmp_path):
    """The expert's codes through each group's reciprocal and the FMA correction are the correctly rounded
    quotients' (the task's check would let 0.1% of codes be a step off, so it cannot tell), on quotients within an
    ulp of e4m3 rounding midpoints and on the task's inputs; without the correction they are not. The scales too,
    bit for bit, divided or (SCALE_PRODUCT) by the corrected product."""
    expert = find_task("quant_per_token_group_fp8").expert_path
    corrected_codes = "y = _quotient_by_reciprocal(x, scale[:, :, None], inv)"
    source = expert.read_text()
    assert source.count(corrected_codes) == 1
    variant = tmp_path / "expert_variant.py"
    if not corrected:
        source = source.replace(corrected_codes, "y = x * inv")
    assert source.count("SCALE_PRODUCT = True\n") == 1
    source = source.replace("SCALE_PRODUCT = True\n", f"SCALE_PRODUCT = {scale_product}\n")
    variant.write_text(source)
    done = interpreted(RECIPROCAL_CODES, str(variant))
    if corrected:
        assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
    else:
        assert done.returncode != 0 and "AssertionError: (torch.float32, False," in done.stderr, done.stderr[-2000:]


def test_scales_by_the_corrected_product_are_amax_over_448_correctly_rounded_for_every_amax():
    """SCALE_PRODUCT's arithmetic, amax * RN(1/448) corrected by one FMA, against the correctly rounded quotient for
    every float32 mantissa at the lowest exponent an amax can have (eps = 1e-10 clamps it) and the highest: the
    operations scale exactly by powers of two between them, so that is every amax. (The FMA emulated in float64: the
    product is exact there and the residual is; a sum landing on a float32 midpoint, where rounding twice could
    differ from an FMA's once, is counted and must not occur.) Without the correction 55% are a step off."""
    inv = np.float32(1.0) / np.float32(448.0)
    assert inv == np.float32(1.0 / 448.0)  # the constant as Triton materialises the Python float
    mantissas = np.arange(1 << 23, dtype=np.uint32)
    for exponent in (int(np.frexp(np.float32(1e-10))[1]) + 126, 254):
        amax = ((np.uint32(exponent) << 23) | mantissas).view(np.float32)
        exact = (amax.astype(np.float64) / 448.0).astype(np.float32)
        product = (amax * inv).astype(np.float32)
        residual = amax.astype(np.float64) - product.astype(np.float64) * 448.0
        assert np.array_equal(residual.astype(np.float32).astype(np.float64), residual)  # the inner FMA is exact
        corrected64 = residual * np.float64(inv) + product.astype(np.float64)
        corrected = corrected64.astype(np.float32)
        up = np.nextafter(corrected, np.float32(np.inf)).astype(np.float64)
        down = np.nextafter(corrected, np.float32(-np.inf)).astype(np.float64)
        here = corrected.astype(np.float64)
        assert not np.any((corrected64 == (here + up) / 2) | (corrected64 == (here + down) / 2))
        assert np.array_equal(corrected, exact)
        assert np.mean(product != exact) > 0.5


FLAT_TILES_SCRIPT = """
import sys
import torch
from pathlib import Path
from types import SimpleNamespace
from d2kbench.evaluate import interp_fp8
from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task
assert interp_fp8.install()
task = find_task("quant_per_token_group_fp8")
flat = load_module(task.expert_path, "flat_shipped")
tiled = load_module(Path(sys.argv[1]), "flat_off")  # the kernel every other shape takes: the reference here
ref = load_module(task.reference_path, "flat_reference")


class Spy:
    # the kernel's launches, recording whether each took the flat tiles
    def __init__(self, kernel):
        self.kernel, self.flat = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.flat.append(kwargs["FLAT"])
            return self.kernel[grid](*args, **kwargs)
        return launch


spy = flat._quant_group_fp8_kernel = Spy(flat._quant_group_fp8_kernel)
# (M, K, column_major, ue8m0, dtype, flat expected): one-group tiles (M=3), two-group tiles over a row of four
# (M=1), a row of nine groups that one-row tiles of eight do not divide, column-major scales, a problem the
# interpreter's 8-program target gives two-row tiles
cases = [(3, 256, False, False, "float16", True), (1, 512, False, True, "float32", True),
         (2, 1152, False, False, "float32", False), (3, 256, True, False, "float16", False),
         (37, 1408, False, False, "float16", False)]
for m, k, column_major, ue8m0, dtype, expected in cases:
    workload = SimpleNamespace(params=dict(M=m, K=k, group=128, column_major=column_major, ue8m0=ue8m0), dtype=dtype)
    x = ref.make_inputs(workload, 5, "cpu")[0]
    q, s = flat.run(x, 128, column_major, ue8m0)
    assert spy.flat[-1] is expected, (m, k, column_major, spy.flat[-1])
    want_q, want_s = tiled.run(x, 128, column_major, ue8m0)
    assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8)) and torch.equal(s, want_s), (m, k)
    assert s.stride() == want_s.stride()
    oracle_q, oracle_s = ref.oracle(x, 128, column_major, ue8m0)
    assert torch.equal(s, oracle_s), (m, k)
print("ok")
"""


def test_flat_tiles_give_the_other_tiles_codes_and_scales_where_they_are_taken(tmp_path):
    """FLAT_TILES (offsets from the program id alone) on the shapes that take it, one-row tiles of whole groups with
    row-major scales, and those that must not (a row the tile does not divide, column-major scales, two-row tiles):
    codes and scales bit for bit the kernel's without it, scales the oracle's."""
    variant = expert_variant(find_task("quant_per_token_group_fp8"), tmp_path,
                             ("FLAT_TILES = True\n", "FLAT_TILES = False\n"))
    done = interpreted(FLAT_TILES_SCRIPT, str(variant))
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_flat_tiles_compile_for_sm90_on_the_m8_workload():
    """The flat path lowers for the H200 on the workload it is for (M=8: one group a program), without spills."""
    task = find_task("quant_per_token_group_fp8")
    kernels = compiled(task, task.expert_path, workload="dsv3_m8_k7168_row")
    assert kernels and all(k["ok"] for k in kernels), kernels
    assert [(k["constexprs"]["FLAT"], k["grid"], k.get("spill_store_bytes", 0)) for k in kernels] == \
        [("True", [448], 0)], kernels


TMA_BATCH = """
import torch
from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task
module = load_module(find_task("muon_newton_schulz").expert_path, "tma_batch_expert")
gen = torch.Generator().manual_seed(5)
batch, m, n = 3, 64, 80
left, right = (torch.randn(shape, generator=gen, dtype=torch.float16) for shape in ((batch, m, m), (batch, m, n)))
launch = module._Launcher(torch.float16, torch.device("cpu"), batch, m, module._CONFIG_TINY, torch.ones((batch, 1)), 1)
assert module._tma_ready(left, 32) and module._tma_ready(right, 32)
outs = {}
for tma in (False, True):
    module.MM_TMA = tma
    outs[tma] = torch.full((batch, m, n), float("nan"), dtype=torch.float16)
    launch.gemm(left, right, outs[tma])
assert torch.equal(outs[True], outs[False]), "the TMA kernel differs from _gemm_kernel"
torch.testing.assert_close(outs[True].float(), left.float() @ right.float(), atol=0.05, rtol=0.01)

"""


def test_muons_tma_kernel_walks_a_batch_as_the_one_tile_kernel_does():
    """The TMA kernel sees a batch as one tall matrix per operand: three matrices, N not a whole number of tiles,
    three persistent programs walking 18 tiles; its products equal _gemm_kernel's bit for bit (the same K order).
    In a process of its own: the interpreter is chosen as the kernels are decorated."""
    done = interpreted(TMA_BATCH)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("warp_specialize", [False, True])
def test_muons_tma_kernel_compiles_persistent_with_tma_loads(warp_specialize, tmp_path):
    """What MM_TMA is for, with the H200's Triton: TMA loads, wgmma, one persistent program per SM
    on the profile workload's 132-SM grid, no spill; as shipped not warp-specialized, and with MM_TMA_WARP_SPECIALIZE
    the specialization applied (registers traded between partitions; at 8 warps it is silently not applied and other
    descriptor forms crash one Triton's pass: bench/diag/hopper_ws_compile.py)."""
    task = find_task("muon_newton_schulz")
    variant = (expert_variant(task, tmp_path, ("MM_TMA_WARP_SPECIALIZE = False", "MM_TMA_WARP_SPECIALIZE = True"))
               if warp_specialize else None)
    report = compile_report_with(DEVICE_TRITON, "muon_newton_schulz", variant)
    kernels = [k for k in report["kernels"] if k["kernel"] == "_gemm_tma_kernel"]
    assert kernels, "the TMA kernel not taken"
    for k in kernels:
        assert k["ok"] and k["tma"] and k["wgmma"] and k["warp_specialized"] == warp_specialize, k
        assert (k["programs_per_sm"], k["grid"], k.get("spill_store_bytes", 0)) == (1, [132], 0), k


def test_the_merge_splits_the_head_dim_only_where_the_heads_leave_sms_idle():
    """MERGE_SPLIT_HEAD_DIM on the scored shapes (132 SMs): the single 128k-token sequence's 64 query heads take
    four 32-value parts of the head dim, and its 264 splits two steps of 256 instead of five of 64; every batch
    whose heads cover the SMs keeps one program per head, as without it."""
    module = load_module(find_task("attn_decode_paged_gqa").expert_path, "test_attention_merge_launch")
    cpu = torch.device("cpu")  # sized as on an H200
    module.MERGE_SPLIT_HEAD_DIM = False
    shipped = {heads: module._merge_launch(264, 128, heads, cpu) for heads in (64, 16 * 64, 64 * 32)}
    module.MERGE_SPLIT_HEAD_DIM = True
    split = {heads: module._merge_launch(264, 128, heads, cpu) for heads in (64, 16 * 64, 64 * 32)}
    assert shipped == {64: (128, 64, 4), 1024: (128, 64, 4), 2048: (128, 64, 4)}
    assert split == {64: (32, 256, 4), 1024: (128, 64, 4), 2048: (128, 64, 4)}
    assert module._merge_launch(3, 128, 64, cpu) == (32, 4, 1)  # few splits: a short step, one warp


@pytest.mark.parametrize("workload", ["llama3_8b_b64_l4k", "qwen3_235b_a22b_b1_l128k"])
def test_attentions_merge_compiles_as_a_programmatic_dependent_launch(workload):
    """The shipped MERGE_PDL with the H200's Triton, on the static splits and the dynamic wave: the split kernel lets
    the merge launch (griddepcontrol.launch_dependents) and the merge waits for its writes (griddepcontrol.wait).
    (Both paths' occupancy with it: the static splits' and the dynamic split kernel's tests below.)"""
    task = find_task("attn_decode_paged_gqa")
    kernels = compile_report_with(DEVICE_TRITON, task.id, workload=workload)["kernels"]
    assert {k["kernel"] for k in kernels} == {"_decode_split_kernel", "_merge_splits_kernel"}
    assert all(k["ok"] and k["dependent_launch"] for k in kernels), kernels


def test_dynamic_splits_fill_one_wave_where_the_pairs_are_few():
    """The dynamic split on the scored shapes (132 SMs, three programs per SM): the 128k-token sequence's four KV
    heads share the 396 slots (99 programs each), llama3_70b's 128 (sequence, KV head) pairs take three each, at
    DYNAMIC_SPLIT_MIN_PROGRAMS = 2; at 16 llama3_70b keeps its static grid; llama3_8b (512 pairs) and qwen3_8b_lvar
    (2048) fill the SMs without it and keep the static rule's grid."""
    module = load_module(find_task("attn_decode_paged_gqa").expert_path, "test_attention_dynamic_splits")
    cpu = torch.device("cpu")
    shapes = {"llama3_8b": (64, 8, 4096), "llama3_70b": (16, 8, 32768), "qwen3_8b_lvar": (256, 8, 2048),
              "qwen3_235b_b1": (1, 4, 131072)}
    module.DYNAMIC_SPLIT_MIN_PROGRAMS = None
    assert {name: module._dynamic_splits(b, hkv, length // 16, 16, cpu) for name, (b, hkv, length) in
            shapes.items()} == {"llama3_8b": 0, "llama3_70b": 0, "qwen3_8b_lvar": 0, "qwen3_235b_b1": 0}  # off
    module.DYNAMIC_SPLIT_MIN_PROGRAMS = 2
    assert {name: module._dynamic_splits(b, hkv, length // 16, 16, cpu) for name, (b, hkv, length) in
            shapes.items()} == {"llama3_8b": 0, "llama3_70b": 3, "qwen3_8b_lvar": 0, "qwen3_235b_b1": 99}
    module.DYNAMIC_SPLIT_MIN_PROGRAMS = 16
    assert {name: module._dynamic_splits(b, hkv, length // 16, 16, cpu) for name, (b, hkv, length) in
            shapes.items()} == {"llama3_8b": 0, "llama3_70b": 0, "qwen3_8b_lvar": 0, "qwen3_235b_b1": 99}
    module.DYNAMIC_SPLIT_MIN_PROGRAMS = 2
    assert module._dynamic_splits(1, 4, 20, 16, cpu) == 2  # at most one program a chunk: 320 tokens, two chunks


@pytest.mark.parametrize("swap", ['"static"', '"all"'])
def test_the_dynamic_split_kernel_keeps_the_occupancy_its_wave_is_counted_in(swap, tmp_path):
    """The dynamic split's one wave is sized at SPLIT_PROGRAMS_PER_SM programs per SM: its kernel (a while loop of
    chunks around the pipelined tile loop, a relaxed atomic per chunk) must compile to that occupancy without a
    spill, with the H200's Triton (as shipped the 128k sequence, the profile workload, takes it), with
    the mma.sync tiles as shipped and with the transposed ones (SWAP_AB_DOTS = "all": wgmma at two stages)."""
    task = find_task("attn_decode_paged_gqa")
    candidate = expert_variant(task, tmp_path, ('SWAP_AB_DOTS = "static"', f"SWAP_AB_DOTS = {swap}"))
    module = load_module(candidate, f"test_dynamic_occupancy_{swap}")
    assert module.DYNAMIC_SPLIT_MIN_PROGRAMS is not None
    report = compile_report_with(DEVICE_TRITON, task.id, candidate)
    split = [k for k in report["kernels"] if k["kernel"] == "_decode_split_kernel"]
    assert [(k["ok"], k["programs_per_sm"], k["grid"], k["waves"], k["wgmma"]) for k in split] == \
        [(True, module.SPLIT_PROGRAMS_PER_SM, [4, 1, 99], 1.0, swap == '"all"')], report["triton"]
    assert all(k.get("spill_store_bytes", 0) == 0 for k in split), split


def test_the_static_splits_run_their_dots_on_wgmma_at_three_programs_an_sm():
    """As shipped, llama3_8b's static splits take the transposed tiles: both dots wgmma, two stages, three programs
    an SM (as the mma.sync tiles at three stages), no spill, with the H200's Triton; the merge is unchanged."""
    task = find_task("attn_decode_paged_gqa")
    report = compile_report_with(DEVICE_TRITON, task.id, task.expert_path, workload="llama3_8b_b64_l4k")
    split = [k for k in report["kernels"] if k["kernel"] == "_decode_split_kernel"]
    assert [(k["ok"], k["wgmma"], k["num_stages"], k["programs_per_sm"], k.get("spill_store_bytes", 0))
            for k in split] == [(True, True, 2, 3, 0)], report["triton"]


def test_transposed_tiles_pass_the_dynamic_split(tmp_path):
    """SWAP_AB_DOTS on the dynamic path with one-tile chunks: the transposed numerator carried over several chunks a
    program and turned back once, and programs that took no chunk (an empty state: lse -inf)."""
    task = find_task("attn_decode_paged_gqa")
    variant = expert_variant(task, tmp_path, ("DYNAMIC_SPLIT_MIN_PROGRAMS = 16\nDYNAMIC_CHUNK_TILES = 4",
                                              "DYNAMIC_SPLIT_MIN_PROGRAMS = 2\nDYNAMIC_CHUNK_TILES = 1"),
                             ('SWAP_AB_DOTS = "static"', 'SWAP_AB_DOTS = "all"'))
    result = evaluate(task, variant, EvalOptions(device="cpu"))
    assert result.verdict == "pass", f"{result.reason}: {result.detail}"
    assert len(result.workloads) == len(task.split("cpu"))


@pytest.mark.parametrize("self_diagonal", ["True", "False"], ids=["one_panel_as_shipped", "two_panels"])
def test_self_products_on_band_tiles(self_diagonal, tmp_path):
    """SYM_SELF_DIAGONAL (on as shipped, off for the H200's sweep) on band tiles, whose square tiles hold the
    diagonal (every cpu shape takes wide tiles as shipped, which have none): the Gram matrices and the A A products
    of the composed plan (float32) and of the step by step one (a float16 batch), and the tall input's transposed
    view (its left panel strided)."""
    task = find_task("muon_newton_schulz")
    variant = expert_variant(task, tmp_path, ("SYM_SELF_DIAGONAL = True", f"SYM_SELF_DIAGONAL = {self_diagonal}"),
                             ('SYM_TILES = "by_waves"', 'SYM_TILES = "band"'))
    result = evaluate(task, variant, EvalOptions(device="cpu"))
    assert result.verdict == "pass", f"{result.reason}: {result.detail}"
    assert len(result.workloads) == len(task.split("cpu"))


def test_self_products_keep_the_band_launches_pipelined():
    """The shipped expert's band launches on the profile workload, compiled for sm_90 with the device's Triton: the
    diagonal tiles' own K loop (one operand loaded) at one program an SM, wgmma that ptxas leaves pipelined (the
    knob's first form, one accumulator from either of two loops, had every wgmma of the kernel serialized: 4-14%
    slower on an H100, bench/results/2026-12-07-h100-owed-38 call1), and no spill beyond the one allowed."""
    if not DEVICE_TRITON:
        pytest.skip("D2K_DEVICE_TRITON not set (make test sets it)")
    task = find_task("muon_newton_schulz")
    assert "\nSYM_SELF_DIAGONAL = True\n" in task.expert_path.read_text()
    report = compile_report_with(DEVICE_TRITON, task.id)
    sym = [k for k in report["kernels"] if k["kernel"] == "_sym_gemm_kernel"]
    assert sym and all(k["ok"] and k["wgmma"] and k["programs_per_sm"] == 1 for k in sym), report["triton"]
    assert not [k["wgmma_serialized"] for k in sym if "wgmma_serialized" in k]
    allowed = ACCEPTED_SPILLS[("muon_newton_schulz", "_sym_gemm_kernel")]
    assert max(k.get("spill_store_bytes", 0) for k in sym) <= allowed


DYNAMIC_AGAIN = """
import torch
from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task
task = find_task("attn_decode_paged_gqa")
ref = load_module(task.reference_path, "dyn_ref")
module = load_module(task.expert_path, "dyn_expert")
module.DYNAMIC_SPLIT_MIN_PROGRAMS, module.DYNAMIC_CHUNK_TILES = 2, 1
workload = task.workload("cpu_g4_f16_ragged")
for seed in (1, 2, 3):  # fresh inputs each call: a count left over would skip chunks and give a wrong output
    inputs = ref.make_inputs(workload, seed, "cpu")
    assert module._dynamic_splits(3, 2, inputs[3].shape[1], 16, torch.device("cpu")) >= 2
    got = module.run(*inputs)
    torch.testing.assert_close(got.float(), ref.reference(*inputs).float(), atol=2e-3, rtol=2e-3)
    counters = module._CHUNK_COUNTERS[torch.device("cpu")]
    assert counters.tolist() == [0] * 6, counters  # zeroed by the merge for the next call
print("ok")
"""


def test_dynamic_splits_leave_their_counters_zero_for_the_next_call():
    proc = interpreted(DYNAMIC_AGAIN)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


EMPTY_FIRST_BLOCK = """
import torch
from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task
module = load_module(find_task("attn_decode_paged_gqa").expert_path, "empty_block_expert")
gen = torch.Generator().manual_seed(3)
heads, slots, d = 4, 8, 16  # two KV heads of two query heads, one sequence
part_o = torch.randn((1, heads, slots, d), generator=gen)
lse = torch.randn((1, heads, slots), generator=gen) * 4
lse[:, :, :3] = float("-inf")  # the first two-slot block holds nothing, the second only its slot 3
part_o[:, :, :3] = 0.0
counters = torch.tensor([5, 7], dtype=torch.int32)
o = torch.full((1, heads, d), float("nan"))
module._merge_splits_kernel[(heads, 1, 1)](
    part_o, lse, torch.tensor([1000], dtype=torch.int32), o, counters, slots, 2, 2,
    part_o.stride(0), part_o.stride(1), part_o.stride(2), lse.stride(0), lse.stride(1), o.stride(0), o.stride(1),
    D_BLOCK=d, TILE=64, SPLIT_BLOCK=2, WAIT_PRIMARY=False, DYNAMIC=True)
w = torch.softmax(lse[0] * 0.6931471805599453, dim=-1)  # 2^lse normalised; the empty slots weigh 0
torch.testing.assert_close(o[0], torch.einsum("hs,hsd->hd", w, part_o[0]))
assert counters.tolist() == [0, 0], counters
print("ok")
"""


def test_the_merge_of_dynamic_splits_weighs_empty_slots_zero_even_a_whole_first_block():
    """The interpreter runs a grid's programs in turn, so on the cpu workloads the first program takes every chunk
    and the merge's first block is never empty: here the merge alone, with the first two-slot block and one more slot
    empty (lse -inf), must give the weighted merge of the rest, not NaN (-inf - -inf), and zero the counters."""
    proc = interpreted(EMPTY_FIRST_BLOCK)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_muons_state_type_and_stored_p_follow_the_inputs_precision():
    """A bf16 input's square state is fp16 (finer at the same bytes) and its composed runs store P whole; an fp16
    input's state is fp16 too but keeps R (P's identity part rounded to fp16 cost it accuracy on cpu_tall_f16);
    float32 stays float32 and stores P. STORE_P False keeps R everywhere, STATE_FP16 False a bf16 state."""
    module = load_module(find_task("muon_newton_schulz").expert_path, "state_rule_expert")
    bf16, fp16, fp32 = torch.bfloat16, torch.float16, torch.float32
    assert [module._state_dtype(d) for d in (bf16, fp16, fp32)] == [fp16, fp16, fp32]
    assert [module._stores_p(module._state_dtype(d), d) for d in (bf16, fp16, fp32)] == [True, False, True]
    module.STATE_FP16 = False
    assert module._state_dtype(bf16) == bf16 and not module._stores_p(bf16, bf16)
    module.STORE_P = False
    assert not module._stores_p(fp16, bf16) and not module._stores_p(fp32, fp32)
