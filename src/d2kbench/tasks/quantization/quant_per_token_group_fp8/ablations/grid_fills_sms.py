"""Calibration ablation of the expert: property `grid_fills_sms` removed.

Identical to expert.py except that the tile shape no longer depends on the device: the launcher
neither reads the SM count nor shrinks the tile for small M, so every problem uses the full tile
budget (and the warps that go with it) even when that leaves most SMs idle. Every other design
property is kept (tall tiles for column-major scales, wide ones for row-major scales). Expected
cost on the H200: decode-sized batches run on a handful of programs.

Made from expert.py with sha256 c6bd67744ad7d4da (tests/test_judge_ablations.py).
"""

import torch
import triton
import triton.language as tl

EPS = 1e-10

# Tile budget: groups per program. 16 groups of 128 bf16 = 4 KB read, 2 KB written per
# program, 32 values per thread with 2 warps: enough bytes in flight per thread to hide
# DRAM latency without spilling, and small programs keep the last wave short. On the H200
# 16 matched 32 on row-major scales (101.4 vs 101.7 us) and gained 3% on column-major ones
# (bench/results/2026-12-04-h200-owed-10, quant.log).
TILE_GROUPS = 16
# Widest tile along a row in row-major mode (the rest of the budget goes to rows). Real K
# (7168, 18432, 3072) have group counts per row divisible by it, so no lane is masked.
MAX_ROW_GROUPS = 8
# Groups along a row in column-major mode. The scale stores stay contiguous down each group
# column whatever the width, as long as the tile keeps at least 8 rows (one 32-byte sector).
# Two columns of 8 rows: 67.5 us on [4096, 18432] against 69.1 us for one column of 16.
MAX_COL_GROUPS = 2
# Elements handled per warp before another warp is worth adding.
ELEMS_PER_WARP = 1024
MAX_WARPS = 4
# The fewest warps a program gets. The small problems' one-group tiles (M=8: 448 programs of 128 elements) take two
# warps, as Inductor's fastest config for the same launch does (bench/results/2026-12-05-owed-24 call7), halving each
# thread's chain for a cross-warp max through shared memory: on the H200 M=8 went 4.8 -> 4.6 us (four warps: the
# same), the large row-major workload unchanged (its tiles take two warps already; bench/results/2026-12-05-owed-25
# call1, quant_min_warps, set by bench/pick_knobs.py).
MIN_WARPS = 2
# The scales amax / 448, correctly rounded either way: False, an IEEE division (div.rn.f32, with its slow-path branch);
# True, amax times the rounded constant 1/448 and one FMA of correction, as the codes' quotients are made. On the
# H200 the large workloads 1.5% (row-major, 85.5 -> 84.2 us) and 1.2% (column-major, 56.4 -> 55.7) faster, M=8 the
# same 4.4 us (ncu: 115k -> 109k instructions, 3.07 us either way; bench/results/2026-12-06-owed-26 calls 1 and 4,
# quant_scale_product, set by bench/pick_knobs.py).
SCALE_PRODUCT = True
# The small problems' tiles of one row's run of whole groups with row-major scales (M=8: one group a tile) are
# contiguous in memory, their scales too, and always full: their offsets are the program id times the tile, without
# the division by the tiles per row that put about 40 dependent instructions (an integer division's reciprocal and
# its corrections) before M=8's only load (sm_90 SASS: the load the 47th instruction, then the 11th), and no masks.
# On an H100, M=8 faster round by round in 88 of 120 rounds over four processes, slower in 6 (median 3%); ncu 3.46 ->
# 3.26 us, 109k -> 73k instructions (bench/results/2026-12-06-owed-27 calls 1, 2 and 4). Set by the pick rule's
# round-by-round test (bench/pick_knobs.py; its whole-spread test alone, 11% on this 4.5 us replay, kept it off);
# the H200's sweep is owed (bench/sweeps.sh).
FLAT_TILES = True


@triton.jit
def _tile_offsets(tile, n_group_blocks, n_rows, n_cols, groups_per_row,
                  GROUP_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr):
    """Rows, group columns and element offsets of tile `tile` (tiles in row-major order), and which of its groups
    exist ([rows, groups]). A tile index past the last tile has every row out of range: no group exists."""
    pid_m = tile // n_group_blocks
    pid_g = tile % n_group_blocks
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    gcols = pid_g * BLOCK_G + tl.arange(0, BLOCK_G)  # [BLOCK_G]
    lanes = tl.arange(0, GROUP_SIZE)  # [GROUP_SIZE]
    # [BLOCK_M, BLOCK_G, GROUP_SIZE] element offsets; int64 rows so M*K may exceed 2^31. The
    # innermost axis is a whole contiguous group, so loads and stores vectorise (16 bytes).
    row_off = rows.to(tl.int64)[:, None, None] * n_cols
    col_off = (gcols * GROUP_SIZE)[None, :, None] + lanes[None, None, :]
    return rows, gcols, row_off + col_off, (rows < n_rows)[:, None] & (gcols < groups_per_row)[None, :]


@triton.jit
def _quotient_by_reciprocal(num, den, inv):
    """num / den correctly rounded, given inv = 1/den correctly rounded, without a division: the product num * inv,
    corrected by the residual num - product * den (exact in an FMA) times inv (Markstein's theorem: with the
    reciprocal and the product each correctly rounded, the corrected quotient is the correctly rounded one)."""
    quotient = num * inv
    return tl.fma(tl.fma(-quotient, den, num), inv, quotient)


@triton.jit
def _quantize_tile(x, offs, s_offs, groups_ok, q_ptr, s_ptr, eps,
                   POW2_SCALE: tl.constexpr, SCALE_BY_PRODUCT: tl.constexpr):
    """Codes and scales of one loaded tile (x in float32; the lanes of missing groups hold 0)."""
    FP8_MAX: tl.constexpr = 448.0
    # Per-group absmax in registers, clamped below so an all-zero group gets a finite scale.
    amax = tl.maximum(tl.max(tl.abs(x), axis=2), eps)  # [BLOCK_M, BLOCK_G]
    if SCALE_BY_PRODUCT:
        # amax / 448 from the rounded constant 1/448, as the codes' quotients below; exact for every float32 amax
        # from eps up (checked exhaustively: tests/test_expert_knobs.py).
        FP8_MAX_INV: tl.constexpr = 1.0 / 448.0
        scale = _quotient_by_reciprocal(amax, FP8_MAX, FP8_MAX_INV)
    else:
        scale = tl.math.div_rn(amax, FP8_MAX)
    if POW2_SCALE:
        # Round up to a power of two on the bits (exact, unlike exp2(ceil(log2(s))) with
        # approximate log2): add a mantissa's worth minus one, then drop the mantissa.
        scale_bits = scale.to(tl.int32, bitcast=True)
        scale = ((scale_bits + 0x7FFFFF) & 0x7F800000).to(tl.float32, bitcast=True)

    # The correctly rounded quotient x / scale (the oracle's codes bit for bit) without an IEEE division per element
    # (div.rn.f32: a reciprocal, its refinement, a range check with a slow-path branch), which held the large
    # workloads at 82-85% of the copy rate: one division per group for the reciprocal, then the corrected product
    # per element. A power-of-two scale's reciprocal is exact, and so is the plain product. On the H200: row-major
    # [16384, 7168] 98.6 -> 86.1 us (97% of copy), column-major [4096, 18432] 65.4 -> 56.8 (95%), M=8 4.4 either way
    # (bench/results/2026-12-05-owed-25 call2).
    inv = tl.math.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)[:, :, None]
    if POW2_SCALE:
        y = x * inv
    else:
        y = _quotient_by_reciprocal(x, scale[:, :, None], inv)
    y = tl.clamp(y, -FP8_MAX, FP8_MAX)
    tl.store(q_ptr + offs, y.to(q_ptr.dtype.element_ty), mask=groups_ok[:, :, None])

    tl.store(s_ptr + s_offs, scale, mask=groups_ok)


@triton.jit
def _quant_group_fp8_kernel(
    x_ptr,  # [M, K] contiguous, bf16 / fp16 / fp32
    q_ptr,  # [M, K] contiguous, float8_e4m3fn
    s_ptr,  # [M, K // GROUP_SIZE] float32, any strides (row- or column-major)
    n_rows,
    n_cols,
    stride_s_row,
    stride_s_group,
    eps,
    GROUP_SIZE: tl.constexpr,  # elements per group (a power of two)
    BLOCK_M: tl.constexpr,  # rows per tile
    BLOCK_G: tl.constexpr,  # groups per row per tile
    POW2_SCALE: tl.constexpr,  # round scales up to a power of two
    SCALE_BY_PRODUCT: tl.constexpr,  # scales as amax * (1/448) corrected, not divided (SCALE_PRODUCT)
    FLAT: tl.constexpr,  # one row's full run of groups a tile, row-major scales: offsets from pid (FLAT_TILES)
):
    groups_per_row = n_cols // GROUP_SIZE
    # 1D grid, tiles in row-major order: neighbouring programs read neighbouring memory
    # (and no grid-dimension limit for very many rows).
    n_group_blocks = tl.cdiv(groups_per_row, BLOCK_G)
    pid = tl.program_id(0)
    if FLAT:
        # The offsets from the program id alone (BLOCK_M is 1): a group's scale sits at its index in the flattened
        # [M * K / GROUP_SIZE] groups, and every group of the tile exists.
        groups = pid.to(tl.int64) * BLOCK_G + tl.arange(0, BLOCK_G)[None, :]  # [1, BLOCK_G]
        offs = (groups * GROUP_SIZE)[:, :, None] + tl.arange(0, GROUP_SIZE)[None, None, :]
        s_offs = groups
        ok = tl.full((BLOCK_M, BLOCK_G), 1, tl.int1)
    else:
        rows, gcols, offs, ok = _tile_offsets(pid, n_group_blocks, n_rows, n_cols, groups_per_row,
                                              GROUP_SIZE, BLOCK_M, BLOCK_G)
        # Scale stores: contiguous along the row (row-major, wide tile) or down the column
        # (column-major, tall tile).
        s_offs = rows[:, None] * stride_s_row + gcols[None, :] * stride_s_group
    # Single read of the tile; masked lanes read 0, which cannot raise a group's absmax.
    x = tl.load(x_ptr + offs, mask=ok[:, :, None], other=0.0)
    _quantize_tile(x.to(tl.float32), offs, s_offs, ok, q_ptr, s_ptr, eps, POW2_SCALE, SCALE_BY_PRODUCT)


def _tile_shape(n_rows, groups_per_row, column_major):
    """(rows, groups) per tile: tall for column-major scales, wide for row-major ones."""
    if column_major:
        block_g = min(MAX_COL_GROUPS, triton.next_power_of_2(groups_per_row))
    else:
        block_g = min(MAX_ROW_GROUPS, triton.next_power_of_2(groups_per_row))
    block_m = min(TILE_GROUPS // block_g, triton.next_power_of_2(n_rows))
    return block_m, block_g


def run(x, group_size, column_major, ue8m0):
    n_rows, n_cols = x.shape
    assert n_cols % group_size == 0, "K must be a multiple of group_size"
    assert group_size & (group_size - 1) == 0, "group_size must be a power of two"
    x = x.contiguous()
    groups_per_row = n_cols // group_size

    q = torch.empty((n_rows, n_cols), dtype=torch.float8_e4m3fn, device=x.device)
    if column_major:
        # DeepGEMM layout: scales of one group column are contiguous over the tokens.
        s = torch.empty((groups_per_row, n_rows), dtype=torch.float32, device=x.device).t()
    else:
        s = torch.empty((n_rows, groups_per_row), dtype=torch.float32, device=x.device)
    if n_rows == 0 or n_cols == 0:
        return q, s

    block_m, block_g = _tile_shape(n_rows, groups_per_row, column_major)
    tile_elems = block_m * block_g * group_size
    num_warps = max(MIN_WARPS, min(MAX_WARPS, tile_elems // ELEMS_PER_WARP))
    grid = (triton.cdiv(n_rows, block_m) * triton.cdiv(groups_per_row, block_g),)
    flat = FLAT_TILES and not column_major and block_m == 1 and groups_per_row % block_g == 0
    _quant_group_fp8_kernel[grid](
        x,
        q,
        s,
        n_rows,
        n_cols,
        s.stride(0),
        s.stride(1),
        EPS,
        GROUP_SIZE=group_size,
        BLOCK_M=block_m,
        BLOCK_G=block_g,
        POW2_SCALE=bool(ue8m0),
        SCALE_BY_PRODUCT=SCALE_PRODUCT,
        FLAT=flat,
        num_warps=num_warps,
        num_stages=1,
    )
    return q, s
