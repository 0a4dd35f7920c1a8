"""Calibration ablation of the expert: property `layout_matched_tiles` removed.

Identical to expert.py except that the tile shape ignores the scale layout: column-major scales
get the same short, wide tiles (several groups of a few rows) as row-major ones, so a program's
scale stores stride by M floats instead of landing on consecutive addresses of one column. The
column-major scale tensor is still allocated as [K/g, M] and written through its strides; every
other design property is kept. Expected cost on the H200: scattered 4-byte scale stores on the
column-major (DeepGEMM) workloads.
"""

import torch
import triton
import triton.language as tl

EPS = 1e-10

# Tile budget: groups per program. 16 groups of 128 bf16 = 4 KB read, 2 KB written per
# program, 32 values per thread with 2 warps: enough bytes in flight per thread to hide
# DRAM latency without spilling, and small programs keep the last wave short.
TILE_GROUPS = 16
# Widest tile along a row (the rest of the budget goes to rows). Real K
# (7168, 18432, 3072) have group counts per row divisible by it, so no lane is masked.
MAX_ROW_GROUPS = 8
# Elements handled per warp before another warp is worth adding.
ELEMS_PER_WARP = 1024
MAX_WARPS = 4
# Programs per SM we aim for when shrinking tiles on small problems.
PROGRAMS_PER_SM = 2
# Under the interpreter (CPU tensors) there is no SM count: pretend a tiny device so that
# small test inputs still spread over several programs along every axis.
INTERPRETER_TARGET_PROGRAMS = 8

_SM_COUNT = {}


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
):
    FP8_MAX: tl.constexpr = 448.0
    groups_per_row = n_cols // GROUP_SIZE
    # 1D grid, tiles in row-major order: neighbouring programs read neighbouring memory
    # (and no grid-dimension limit for very many rows).
    n_group_blocks = tl.cdiv(groups_per_row, BLOCK_G)
    pid = tl.program_id(0)
    pid_m = pid // n_group_blocks
    pid_g = pid % n_group_blocks

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    gcols = pid_g * BLOCK_G + tl.arange(0, BLOCK_G)  # [BLOCK_G]
    lanes = tl.arange(0, GROUP_SIZE)  # [GROUP_SIZE]
    row_ok = rows < n_rows
    group_ok = gcols < groups_per_row

    # [BLOCK_M, BLOCK_G, GROUP_SIZE] element offsets; int64 rows so M*K may exceed 2^31. The
    # innermost axis is a whole contiguous group, so loads and stores vectorise (16 bytes).
    row_off = rows.to(tl.int64)[:, None, None] * n_cols
    col_off = (gcols * GROUP_SIZE)[None, :, None] + lanes[None, None, :]
    offs = row_off + col_off
    mask = row_ok[:, None, None] & group_ok[None, :, None]

    # Single read of the tile; masked lanes read 0, which cannot raise a group's absmax.
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)

    # Per-group absmax in registers, clamped below so an all-zero group gets a finite scale.
    amax = tl.maximum(tl.max(tl.abs(x), axis=2), eps)  # [BLOCK_M, BLOCK_G]
    scale = tl.math.div_rn(amax, FP8_MAX)
    if POW2_SCALE:
        # Round up to a power of two on the bits (exact, unlike exp2(ceil(log2(s))) with
        # approximate log2): add a mantissa's worth minus one, then drop the mantissa.
        scale_bits = scale.to(tl.int32, bitcast=True)
        scale = ((scale_bits + 0x7FFFFF) & 0x7F800000).to(tl.float32, bitcast=True)

    # The correctly rounded quotient x / scale (the oracle's codes bit for bit): the group's reciprocal, the product,
    # and one FMA correcting it by the exact residual x - y0 * scale (Markstein's theorem).
    inv = tl.math.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)[:, :, None]
    y = x * inv
    if not POW2_SCALE:
        y = tl.fma(tl.fma(-y, scale[:, :, None], x), inv, y)
    y = tl.clamp(y, -FP8_MAX, FP8_MAX)
    tl.store(q_ptr + offs, y.to(q_ptr.dtype.element_ty), mask=mask)

    # Scale stores, through the scale tensor's strides.
    s_offs = rows[:, None] * stride_s_row + gcols[None, :] * stride_s_group
    tl.store(s_ptr + s_offs, scale, mask=row_ok[:, None] & group_ok[None, :])


def _target_programs(device):
    """How many programs the grid should have at least, to fill the device."""
    if device.type != "cuda":
        return INTERPRETER_TARGET_PROGRAMS
    index = device.index if device.index is not None else 0
    if index not in _SM_COUNT:
        _SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return PROGRAMS_PER_SM * _SM_COUNT[index]


def _tile_shape(n_rows, groups_per_row, target):
    """(rows, groups) per tile: a wide tile whatever the scale layout."""
    block_g = min(MAX_ROW_GROUPS, triton.next_power_of_2(groups_per_row))
    block_m = min(TILE_GROUPS // block_g, triton.next_power_of_2(n_rows))

    def programs(bm, bg):
        return triton.cdiv(n_rows, bm) * triton.cdiv(groups_per_row, bg)

    # Small problems: trade tile size for parallelism, rows first, then groups.
    while block_m > 1 and programs(block_m, block_g) < target:
        block_m //= 2
    while block_g > 1 and programs(block_m, block_g) < target:
        block_g //= 2
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

    block_m, block_g = _tile_shape(n_rows, groups_per_row, _target_programs(x.device))
    tile_elems = block_m * block_g * group_size
    num_warps = max(1, min(MAX_WARPS, tile_elems // ELEMS_PER_WARP))
    grid = (triton.cdiv(n_rows, block_m) * triton.cdiv(groups_per_row, block_g),)
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
        num_warps=num_warps,
        num_stages=1,
    )
    return q, s
