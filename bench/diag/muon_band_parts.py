"""Where the time of one of muon's batched band launches goes (the forty-first session's question).

The batch (128 x 768x2048) spends about two thirds of its time in fourteen K = 768 symmetric products, each a band
launch of 21 programs a matrix: 6 wide 128x256 tiles, 9 square 128x128 tiles on the diagonal band and 6 empty slots
of the grouped order (a program that finds no tile and exits). ncu on an H100 (bench/results/2026-12-06-h100-owed-35
call2) counted the SMs idle 8.5% of such a launch's cycles at one program an SM, the tensor pipe at 44% and L2 at 62%:
nothing saturated. This script times the expert's launch beside a copy of its tile work driven by a host-made tile
table, so that one thing changes at a time:

  expert             the expert's own launch (`_Launcher.sym`), the calibration
  table              the same tiles, slots and order through the table (should equal the expert)
  no empties         the 6 empty slots a matrix left out
  squares last       no empties, every matrix's wide tiles first, then every matrix's band squares (the launch's
                     last wave holds the short tiles: a shorter tail)
  persistent         no empties, one program an SM walking the table (no program starts and ends between tiles;
                     the tiles' loops not flattened, so no epilogue overlaps the next tile's loads)
  TMA stores         no empties, the mirrored stores through TMA (host-made descriptors of the output): the program's
                     writes leave the SM as bulk copies from shared memory, so it ends before they reach memory
  upper only         no empties, each tile stored once (no mirrored store): what the mirror costs
  packed             no empties, SYM_STORE_ONCE's layout: operands read and the result stored on and above the diagonal
                     of block pairs only (three K loops a tile; the mirror only within a diagonal pair)
  no store           no empties, a scalar a program instead of the tile: what the epilogue's stores cost
  one K step         no empties, K = 64 instead of 768: what a program costs besides its main loop

Every variant that stores is checked against the expert's output (its stored part). Run on a GPU:
    PYTHONPATH=src python3 bench/diag/muon_band_parts.py [--reps 20] [--json FILE]
and on the CPU interpreter (a small batch, the tiny tiles; correctness only):
    TRITON_INTERPRET=1 PYTHONPATH=src python3 bench/diag/muon_band_parts.py --cpu
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task

EXPERT = load_module(find_task("muon_newton_schulz").expert_path, "muon_expert_for_band_parts")
_tile_dot = EXPERT._tile_dot
_store_mirrored = EXPERT._store_mirrored
_packed_split = EXPERT._packed_split
_mirrored = EXPERT._mirrored
WIDE, SQUARE, EMPTY = 0, 1, -1


@triton.jit
def _table_tile(l_ptr, r_ptr, c_ptr, sink_ptr, c_desc, ct_desc, b, pid, ti, tj, M, K,
                stride_lm, stride_lk, stride_rk, stride_rn, stride_cm, stride_cn,
                BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STORE: tl.constexpr,
                DOT_PRECISION: tl.constexpr):
    """The expert's _sym_tile without its epilogue's scaling: the product, then per STORE the mirrored stores (2),
    the same through TMA (3: the tile and its transpose through host-made descriptors of the [batch, M, M] output,
    whose writes leave the SM after the program's shared-memory copy), the upper stores only (1), one scalar (0, so
    that the product is still computed) or the packed layout, read and stored (4: SYM_STORE_ONCE)."""
    RATIO: tl.constexpr = BLOCK_N // BLOCK
    offs_i = ti * BLOCK + tl.arange(0, BLOCK)
    offs_j = tj * BLOCK_N + tl.arange(0, BLOCK_N)
    if STORE == 3:
        # Triton 3.6 otherwise zeroes the accumulator again on a path where the K loop runs no step, and ptxas then
        # serializes every wgmma (C7515; the upper-triangle ablation's fix, thirty-ninth session)
        tl.assume(K > 0)
    k_lo, k_hi = _packed_split(ti, tj, K, BLOCK, RATIO)
    acc = _tile_dot(l_ptr, r_ptr, offs_i, offs_j, M, M, K, k_lo, k_hi, stride_lm, stride_lk, stride_rk, stride_rn,
                    BLOCK, BLOCK_N, BLOCK_K, DOT_PRECISION, False, STORE == 4)
    if STORE == 3:
        tile = acc.to(c_desc.dtype)
        c_desc.store([b, ti * BLOCK, tj * BLOCK_N], tile.reshape(1, BLOCK, BLOCK_N))
        if _mirrored(ti, tj, RATIO, False):
            ct_desc.store([b, tj * BLOCK_N, ti * BLOCK], tl.trans(tile).reshape(1, BLOCK_N, BLOCK))
    elif STORE == 0:
        tl.store(sink_ptr + pid, tl.sum(tl.sum(acc, axis=1), axis=0))
    else:
        mirror = False
        if STORE >= 2:  # 2, or 4: the packed layout's
            mirror = _mirrored(ti, tj, RATIO, STORE == 4)
        _store_mirrored(c_ptr, acc.to(c_ptr.dtype.element_ty), offs_i, offs_j, ti, M, stride_cm, stride_cn,
                        BLOCK, mirror)


@triton.jit
def _table_row(l_ptr, r_ptr, c_ptr, sink_ptr, wide_desc, wide_t_desc, square_desc, table_ptr, t, M, K,
               stride_lb, stride_lm, stride_lk, stride_rb, stride_rk, stride_rn, stride_cb, stride_cm, stride_cn,
               BLOCK: tl.constexpr, BLOCK_K: tl.constexpr, STORE: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """Row t of the table: (matrix, tile row, tile column, kind), kind WIDE (BLOCK x 2 BLOCK), SQUARE
    (BLOCK x BLOCK) or EMPTY (nothing, as the expert's skipped slots)."""
    b = tl.load(table_ptr + 4 * t)
    ti = tl.load(table_ptr + 4 * t + 1)
    tj = tl.load(table_ptr + 4 * t + 2)
    kind = tl.load(table_ptr + 4 * t + 3)
    l_ptr += b.to(tl.int64) * stride_lb
    r_ptr += b.to(tl.int64) * stride_rb
    c_ptr += b.to(tl.int64) * stride_cb
    if kind == 0:
        _table_tile(l_ptr, r_ptr, c_ptr, sink_ptr, wide_desc, wide_t_desc, b, t, ti, tj, M, K,
                    stride_lm, stride_lk, stride_rk, stride_rn,
                    stride_cm, stride_cn, BLOCK, 2 * BLOCK, BLOCK_K, STORE, DOT_PRECISION)
    elif kind == 1:
        _table_tile(l_ptr, r_ptr, c_ptr, sink_ptr, square_desc, square_desc, b, t, ti, tj, M, K,
                    stride_lm, stride_lk, stride_rk, stride_rn,
                    stride_cm, stride_cn, BLOCK, BLOCK, BLOCK_K, STORE, DOT_PRECISION)


@triton.jit
def _table_kernel(l_ptr, r_ptr, c_ptr, sink_ptr, wide_desc, wide_t_desc, square_desc, table_ptr, M, K, num_rows,
                  stride_lb, stride_lm, stride_lk, stride_rb, stride_rk, stride_rn, stride_cb, stride_cm, stride_cn,
                  BLOCK: tl.constexpr, BLOCK_K: tl.constexpr, STORE: tl.constexpr, DOT_PRECISION: tl.constexpr,
                  PERSISTENT: tl.constexpr):
    """One table row a program, or (PERSISTENT) rows pid, pid + programs, ... a program."""
    if PERSISTENT:
        for t in range(tl.program_id(0), num_rows, tl.num_programs(0)):
            _table_row(l_ptr, r_ptr, c_ptr, sink_ptr, wide_desc, wide_t_desc, square_desc, table_ptr, t, M, K,
                       stride_lb, stride_lm, stride_lk,
                       stride_rb, stride_rk, stride_rn, stride_cb, stride_cm, stride_cn,
                       BLOCK, BLOCK_K, STORE, DOT_PRECISION)
    else:
        _table_row(l_ptr, r_ptr, c_ptr, sink_ptr, wide_desc, wide_t_desc, square_desc, table_ptr,
                   tl.program_id(0), M, K, stride_lb, stride_lm, stride_lk, stride_rb, stride_rk, stride_rn,
                   stride_cb, stride_cm, stride_cn, BLOCK, BLOCK_K, STORE, DOT_PRECISION)


def matrix_tiles(m: int, block: int, group: int, empties: bool) -> list[tuple[int, int, int]]:
    """One matrix's band launch as the expert orders it: _upper_tile's wide slots (OFFSET 1, grouped rows), then
    _band_tile's squares; (ti, tj, kind), the skipped slots as EMPTY when `empties`."""
    rows, cols = triton.cdiv(m, block), triton.cdiv(m, 2 * block)
    tiles = []
    for first in range(0, rows, group):
        n = min(group, rows - first)
        for local in range(n * (cols - first // 2 - 1)):
            ti, tj = first + local % n, first // 2 + 1 + local // n
            if tj >= ti // 2 + 1:
                tiles.append((ti, tj, WIDE))
            elif empties:
                tiles.append((0, 0, EMPTY))
    for q in range(3 * triton.cdiv(rows, 2)):
        k, r = divmod(q, 3)
        ti, tj = 2 * k + (r == 2), 2 * k + (r >= 1)
        if tj < rows:
            tiles.append((ti, tj, SQUARE))
        elif empties:
            tiles.append((0, 0, EMPTY))
    return tiles


def launch_table(batch: int, m: int, block: int, group: int, empties: bool, squares_last: bool,
                 device: torch.device) -> torch.Tensor:
    """The launch's table, [programs, 4] int32: matrix by matrix, or (squares_last) every matrix's wide tiles and
    then every matrix's squares."""
    tiles = matrix_tiles(m, block, group, empties)
    rows = [(b, *t) for b in range(batch) for t in tiles]
    if squares_last:
        rows = [r for r in rows if r[3] != SQUARE] + [r for r in rows if r[3] == SQUARE]
    return torch.tensor(rows, dtype=torch.int32, device=device)


VARIANTS = {  # label: (empties, squares last, STORE, K steps or None for all, persistent)
    "table": (True, False, 2, None, False),
    "no empties": (False, False, 2, None, False),
    "squares last": (False, True, 2, None, False),
    "persistent": (False, False, 2, None, True),
    "TMA stores": (False, False, 3, None, False),
    "upper only": (False, False, 1, None, False),
    "packed": (False, False, 4, None, False),
    "no store": (False, False, 0, None, False),
    "one K step": (False, False, 2, 1, False),
}


def run_variant(label: str, left: torch.Tensor, right: torch.Tensor, out: torch.Tensor, sink: torch.Tensor,
                cfg: dict, tables: dict, sms: int) -> None:
    empties, squares_last, store, k_steps, persistent = VARIANTS[label]
    table = tables[(empties, squares_last)]
    K = left.shape[2] if k_steps is None else k_steps * cfg["sym_block_k"]
    programs = min(table.shape[0], sms) if persistent else table.shape[0]
    block = cfg["sym_block"]
    descs = [TensorDescriptor(out, list(out.shape), list(out.stride()), [1, rows, cols])
             for rows, cols in ((block, 2 * block), (2 * block, block), (block, block))]
    _table_kernel[(programs,)](
        left, right, out, sink, *descs, table, left.shape[1], K, table.shape[0],
        *left.stride(), *right.stride(), *out.stride(),
        BLOCK=cfg["sym_block"], BLOCK_K=cfg["sym_block_k"], STORE=store,
        DOT_PRECISION="ieee" if left.dtype == torch.float32 else "tf32", PERSISTENT=persistent,
        num_warps=cfg["sym_warps"], num_stages=cfg["sym_wide_stages"])


def symmetric_batch(batch: int, m: int, dtype: torch.dtype, device: torch.device, seed: int) -> torch.Tensor:
    """Random symmetric matrices of the state's scale (entries about 1/sqrt(m))."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    a = torch.randn(batch, m, m, generator=gen) / m ** 0.5
    return ((a + a.transpose(1, 2)) / 2).to(dtype).to(device)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="interpreter: a small batch, tiny tiles, checks only")
    parser.add_argument("--reps", type=int, default=20, help="timed calls a variant a round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    device = torch.device("cpu" if args.cpu else "cuda")
    cfg = EXPERT._CONFIG_TINY if args.cpu else EXPERT._CONFIG_LARGE
    batch, m, dtype = (3, 96, torch.float32) if args.cpu else (128, 768, torch.float16)
    if args.cpu:  # the tiny tiles' grid would take wide tiles: the band is what is measured
        EXPERT.SYM_TILES = "band"
    left, right = (symmetric_batch(batch, m, dtype, device, s) for s in (1, 2))
    partials = torch.ones((batch, 1), device=device)
    launch = EXPERT._Launcher(dtype, device, batch, m, cfg, partials, 1)
    assert launch.sym_tiles == "band", launch.sym_tiles
    want = torch.empty_like(left)
    launch.sym(left, right, want)
    sms = 5 if args.cpu else launch.sms  # on the interpreter the persistent programs still walk several tiles
    tables = {(e, s): launch_table(batch, m, cfg["sym_block"], cfg["sym_group"], e, s, device)
              for e, s, *_ in VARIANTS.values()}
    sink = torch.empty(max(t.shape[0] for t in tables.values()), device=device)
    upper = torch.ones(m, m, dtype=torch.bool, device=device).triu()
    pairs = torch.arange(m, device=device) // (2 * cfg["sym_block"])
    pair_upper = pairs[:, None] <= pairs[None, :]  # what the packed layout stores
    checks = {}
    for label, (_, _, store, k_steps, _) in VARIANTS.items():
        if store == 0 or k_steps is not None:
            continue
        got = torch.full_like(left, float("nan"))
        # the packed layout's operands NaN where it stores nothing: a read there would show
        ins = [t.masked_fill(~pair_upper, float("nan")) for t in (left, right)] if store == 4 else (left, right)
        run_variant(label, *ins, got, sink, cfg, tables, sms)
        part = {1: upper, 4: pair_upper}.get(store, torch.ones_like(upper))
        err = ((got - want).abs()[:, part].max() / want.float().pow(2).mean().sqrt()).item()
        checks[label] = err
        print(f"check {label}: max |diff| / rms {err:.2e}")
        if not err < 1e-2:
            print(f"FAILED: {label} differs from the expert's launch")
            return 1
    if args.cpu:
        return 0

    from d2kbench.evaluate.timing import Timer
    timer = Timer(device)
    out = torch.empty_like(left)
    calls = {"expert": lambda: launch.sym(left, right, out)}
    calls.update({label: (lambda label=label: run_variant(label, left, right, out, sink, cfg, tables, sms))
                  for label in VARIANTS})
    times: dict[str, list[float]] = {label: [] for label in calls}
    for _ in range(args.rounds):
        for label, fn in calls.items():
            t, _ = timer.time(lambda slot, fn=fn: fn(), lambda slot: None, [0], args.reps, warmup=3, graph=False)
            times[label] += [x * 1e3 for x in t]
    print(f"\n# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"{batch} x {m}x{m} fp16, K {m}, {args.rounds} rounds of {args.reps}")
    base = statistics.median(times["expert"])
    print(f"{'variant':<14} {'programs':>8} {'median us':>10} {'vs expert':>9}")
    for label, t in times.items():
        programs = "" if label == "expert" else tables[VARIANTS[label][:2]].shape[0]
        print(f"{label:<14} {programs:>8} {statistics.median(t):>10.1f} {statistics.median(t) / base:>9.3f}")
    if args.json:
        args.json.write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                                             triton=triton.__version__, checks=checks, times_us=times), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
