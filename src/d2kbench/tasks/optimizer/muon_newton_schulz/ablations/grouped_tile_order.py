"""Calibration ablation of the expert: property `grouped_tile_order` removed.

Identical to expert.py except that program ids map to tiles in plain row-major order: the general
products (the one-tile kernel and the TMA kernel) take tile (t // column tiles, t % column tiles) and
the symmetric kernel enumerates the upper triangle (or, with band tiles, the wide tiles above the
diagonal band) row by row, with no grouping of tile rows for L2 reuse. Every other design property is
kept, the tile shapes' rule included. Expected cost on the H200: more L2 misses on the large
rectangular and square products, whose panels are re-read from HBM.

Made from expert.py with sha256 a3cf0b5846bac761 (tests/test_judge_ablations.py).
"""

import torch
import triton
import triton.language as tl

# Keller Jordan's quintic coefficients (fixed by the task) and the norm guard of the reference.
NS_A, NS_B, NS_C = 3.4445, -4.7750, 2.0315
NS_STEPS = 5
_NORM_EPS = tl.constexpr(1e-7)

# Segment plans (steps per segment).  The composed plan materialises the rectangular matrix
# once in between and rebuilds the Gram matrix from it: composing all five steps in one segment
# loses the small singular directions in the low-precision square state when the spectrum is
# spread (measured: errors 10x to 1000x+ the reference's).  The longer segment goes first: errors
# of early steps are partly corrected by the later ones, those of the last segment are not.
COMPOSED_SEGMENTS = (3, 2)
PLAIN_SEGMENTS = (1,) * NS_STEPS
# The composed plan is used when its work is at most this fraction of the plain plan's: near
# the break-even point its chain of small dependent launches is not worth it. The batch (128 x 768x2048, composed
# at 0.67) under the plain plan instead (0.62) was 27% slower on the H100: the composed plan's 768 x 768 products
# are memory-bound, yet the plain plan's 1.5x the FLOPs cost more (bench/results/2026-12-05-owed-24 call1).
COMPOSE_MAX_WORK_RATIO = 0.8

# Launch configurations.  Production tiles are 128-row tiles (a wgmma M per warpgroup on sm_90);
# tiny problems (the CPU interpreter tests) use small tiles so that every tiled axis still has
# several programs and ragged tails.  Each production choice below is a name, so that a sweep can set it
# (bench/sweep.py --set NAME=...); the figures are bench/results/2026-12-04-h200-sweep-17 (calls 1-2).
# Rectangular products: 128x256 tiles (half the loads of the left operand per FLOP), four stages (196 KB of
# shared memory): 128x256 3-6% faster than 128x128 on every workload, four stages then 2-4% faster than three
# on all but the batch (equal there).
MM_BLOCK_N = 256
MM_STAGES = 4
# Symmetric m x m products (about half of the time on 4096x14336 and two thirds on the 128 x 768 x 768 batch,
# where each product's K is only 768: ncu, bench/results/2026-12-04-h200-sweep-16 call7).
SYM_BLOCK_K = 64
SYM_STAGES = 3
# Square 128x128 tiles (two programs per SM under the register cap below) or wide 128x256 tiles (two column
# blocks: half the row-panel loads per FLOP, as the rectangular products, one program per SM at about 250
# registers; a wide tile straddling the diagonal computes a block below it and drops it). Wide tiles were 10%
# faster end to end on 8192x28672 (36031 -> 32480 us), but 4-15% slower on 4096x4096, 4096x14336 and the batch
# (bench/results/2026-12-04-h200-owed-18 call6): there their grids ran 3 waves against the square tiles' 2 (272
# wide tiles on 132 SMs against 528 square ones on 264 slots), 12 against 11 on the batch; 8192's ran 8 and 8.
# "band": wide tiles wholly above the diagonal band and square ones on it, one launch of one program per SM; it
# fills the wide grid's last wave: against square tiles 4342 -> 4153 us on 4096x14336, 2351 -> 2285 on 4096x4096,
# the batch 5076 -> 4992 and 5192 -> 4946; against wide tiles on 8192x28672 1% slower in two runs
# (bench/results/2026-12-04-h200-owed-19 calls 1-2). So "by_waves" takes wide tiles where their grid needs no more
# waves than the square one, band tiles elsewhere ("square", "wide", "band": always).
SYM_TILES = "by_waves"
SYM_WIDE_STAGES = 4  # 196 KB of shared memory, one program per SM anyway: 2-8% faster than 3 (call6)
# A register cap for the square tiles (None: the compiler's choice). Uncapped, a program takes 132 registers x 256
# threads, just over half of an SM's 65536, so one program ran per SM (ncu: 1 block per SM, 34.9 waves for 4608
# programs on the batch); at 128 two fit, as shared memory (98 KB each) already allowed, and one program's prologue
# and epilogue overlap the other's main loop, at the cost of a small spill (36 B; 432 B in the launch that also
# writes P_0). Measured: 4-11% faster (the batch most); 4 warps of 255 registers (SYM_WARPS, also two programs
# per SM) measured the same.
SYM_MAXNREG = 128
SYM_WARPS = 8
# A product whose right operand is its left one's transpose in value (X X^T through the transposed view, or a
# symmetric state matrix times itself: the Gram matrices and every P = a I + b A + c A^2) reads one panel for both
# operands on its square diagonal tiles: the tile is L[rows, :] L[rows, :]^T, the right operand the loaded left one
# transposed in shared memory (True). A band launch on the batch reads 36 panels a matrix, of which its six diagonal
# tiles then save six, and the batch's K = 768 products are bound by L2 traffic (ncu, bench/results/
# 2026-12-06-h100-owed-35 call2). Its first form, which merged the two K loops' accumulators into one epilogue, ran
# 4-14% slower on an H100 (bench/results/2026-12-07-h100-owed-38 call1): ptxas serialized every wgmma of the kernel
# (C7515), which the compile report now shows. The mended form (the diagonal tiles take their own tile call, with
# their own epilogue) ran the batch 2.0% faster on an H100 (4767.4 -> 4671.0 us, faster in 17 of 20 rounds; the
# rectangular and square ones within their rounds' spread, bench/results/2026-12-07-h100-owed-39 call1). False:
# each diagonal tile loads both panels.
SYM_SELF_DIAGONAL = True
# The composed plan's rectangular products Q X as a persistent kernel with TMA loads (MM_TMA): one program per SM
# walks the output tiles, its descriptors made in the kernel, 2-D (the form both Tritons compile under warp
# specialization; host-made and 3-D ones crash 3.9's pass: bench/diag/hopper_ws_compile.py), hence a scratch
# allocator. Operands the descriptors cannot take (a transposed view, rows not a multiple of 16 bytes) and the plain
# plan's products (a D epilogue) keep _gemm_kernel. Three stages of 128x256x64 tiles (four take 225 KB of the 227 KB
# a program may have).
# Warp-specialized (MM_TMA_WARP_SPECIALIZE; four warps: a producer warp issues the next tile's loads while the
# consumers do this tile's epilogue) it was timed faster (the batch 2.6% on the H100, bench/results/2026-12-06-owed-29
# calls 7-8; 3.8% on the H200, owed-22 call2) but is WRONG intermittently: in the evaluator (poisoned allocations,
# several workloads in one worker) the outputs of 4096x14336 and 8192x28672 were NaN in every element after
# 4096x4096 had run in the same worker, in one to five of every six evaluations, and zeroed scratch never freed
# failed as often (bench/results/2026-12-06-owed-30 calls 4-17): a race inside the specialized kernel, the form
# of triton-lang/triton#8311 (open). bench/diag/muon_tma_race.sh is the check; suite benches had passed it.
# Not specialized (shipped): eight warps (one warpgroup cannot hold a 128x256 fp32 tile), the tile loop flattened
# into the K loop so that software pipelining issues the next tile's loads during this tile's epilogue; 188-201
# registers, no spill, one program per SM on both Tritons. On the H100 (bench/results/2026-12-06-owed-31 call1, ten
# rounds against an A/A control of _gemm_kernel): the batch 3.1% faster (8 of 10 rounds), 4096x14336 1.8% (10 of 10);
# four of four race checks passed.
MM_TMA = True
MM_TMA_WARP_SPECIALIZE = False
MM_TMA_STAGES = 3
# The composed runs' step matrices P = a I + b A + c A^2 stored whole (True; where _stores_p allows it), so that
# the products P A, P (P A) and P Q read two operands and no added matrix: on the H100 the batch 4985 -> 4811 us
# (3.5%), faster in all sixteen rounds against the bf16 state with R stored timed beside it (bench/results/
# 2026-12-06-owed-30 call2; both with the specialized TMA kernel on); the other workloads within +-0.4% (call3). Or only
# R = P - a I stored, each product P Z formed as a Z + R Z with Z read again for the fp32 epilogue (False).
STORE_P = True
# The square state of a bf16 input in fp16 (True; _state_dtype) or in bf16 (False, the design until the thirtieth
# session): the same bytes and tensor-core rate, three more mantissa bits; the error against the float64 oracle
# 1.19e-2 -> 5.1e-3 on the batch, 8.4e-3 -> 4.3e-3 on 4096x14336 (bench/results/2026-12-06-owed-30 call7 and
# call15's checks), the square workload's (step by step) 7.0e-3 -> 6.5e-3.
STATE_FP16 = True
_CONFIG_LARGE = dict(
    sym_block=128, sym_block_k=SYM_BLOCK_K, sym_warps=SYM_WARPS, sym_stages=SYM_STAGES,
    sym_wide_stages=SYM_WIDE_STAGES,
    mm_block_m=128, mm_block_n=MM_BLOCK_N, mm_block_k=64, mm_warps=8, mm_stages=MM_STAGES,
    tma_ws_warps=4, tma_programs=None,  # one persistent program per SM; the specialized form's warps
    mm_tma_stages=MM_TMA_STAGES,
    norm_block=4096, norm_min_chunk=65536, norm_warps=8,
)
_CONFIG_TINY = dict(
    sym_block=16, sym_block_k=64, sym_warps=4, sym_stages=1, sym_wide_stages=1,
    mm_block_m=32, mm_block_n=32, mm_block_k=32, mm_warps=4, mm_stages=1,
    tma_ws_warps=4, tma_programs=3,  # so that the cpu shapes' programs walk several tiles
    mm_tma_stages=1,
    norm_block=256, norm_min_chunk=512, norm_warps=4,
)
_TINY_BELOW = 128          # m below this uses the tiny configuration
_MAX_NORM_PARTIALS = 1024  # partial sums per matrix; consumers reduce them in one vector load
_SQUARE_PROGRAMS_PER_SM, _WIDE_PROGRAMS_PER_SM = 2, 1  # sm_90 occupancy (tests/test_expert_knobs.py checks them)
_H200_SMS = 132  # the wave rule's SMs off the GPU: the sm_90 compile report then describes the H200's launches


# --------------------------------------------------------------------------------------------
# Frobenius norm: partial sums of squares, one per (chunk, matrix).
# --------------------------------------------------------------------------------------------
@triton.jit
def _sumsq_partials_kernel(
    x_ptr, partials_ptr, numel, chunk, stride_xb, num_partials,
    BLOCK: tl.constexpr,
):
    """partials[b, c] = sum of x^2 over elements [c*chunk, (c+1)*chunk) of matrix b (fp32).

    Deterministic (no atomics): the consumers add the partials in a fixed order."""
    cid = tl.program_id(0)
    b = tl.program_id(1)
    base = x_ptr + b.to(tl.int64) * stride_xb
    start = cid * chunk
    end = tl.minimum(start + chunk, numel)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(start, end, BLOCK):
        idx = off + tl.arange(0, BLOCK)
        x = tl.load(base + idx, mask=idx < end, other=0.0).to(tl.float32)
        acc += x * x
    tl.store(partials_ptr + b * num_partials + cid, tl.sum(acc, axis=0))


@triton.jit
def _inv_norm(partials_ptr, b, num_partials, PARTIALS_POW2: tl.constexpr):
    """1 / (||G_b||_F + eps) from the partial sums of squares (the reference's normalisation)."""
    idx = tl.arange(0, PARTIALS_POW2)
    part = tl.load(partials_ptr + b * num_partials + idx, mask=idx < num_partials, other=0.0)
    return 1.0 / (tl.sqrt(tl.sum(part, axis=0)) + _NORM_EPS)


# --------------------------------------------------------------------------------------------
# Shared tile helpers.
# --------------------------------------------------------------------------------------------
@triton.jit
def _tile_dot(
    l_ptr, r_ptr, rows, cols, M, N, K,
    stride_lm, stride_lk, stride_rk, stride_rn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_PRECISION: tl.constexpr, SELF: tl.constexpr,
):
    """fp32 accumulator of L[rows, :] @ R[:, cols] for rows < M, cols < N. SELF: R[:, cols] is L[rows, :]^T (a
    diagonal tile of a product whose right operand is the left one's transpose), so one panel is loaded for both
    operands, the right one a transposed view of the same shared-memory tile.

    Edges are masked (zero fill) rather than wrapped: the operand may be a transposed view, and
    a masked contiguous range keeps its contiguity for the vectorised, pipelined async copies."""
    offs_k = tl.arange(0, BLOCK_K)
    l_ptrs = l_ptr + rows[:, None] * stride_lm + offs_k[None, :] * stride_lk
    r_ptrs = r_ptr + offs_k[:, None] * stride_rk + cols[None, :] * stride_rn
    row_ok = rows[:, None] < M
    col_ok = cols[None, :] < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        lhs = tl.load(l_ptrs, mask=row_ok & (offs_k[None, :] < K - k0), other=0.0)
        if SELF:
            rhs = tl.trans(lhs)
        else:
            rhs = tl.load(r_ptrs, mask=(offs_k[:, None] < K - k0) & col_ok, other=0.0)
        acc = tl.dot(lhs, rhs, acc, input_precision=DOT_PRECISION)
        l_ptrs += BLOCK_K * stride_lk
        r_ptrs += BLOCK_K * stride_rk
    return acc


@triton.jit
def _epilogue(
    acc, offs_m, offs_n, M, N, d_ptr, stride_dm, stride_dn, scale, alpha, beta,
    HAS_D: tl.constexpr,
):
    """scale * (alpha * acc + beta * D), in fp32 registers before the cast to the storage type.

    With D the right operand this forms every product with P = a I + R as a M + R M: the large
    identity part of P is applied here in fp32 and is never rounded into a stored matrix."""
    out = acc * alpha
    if HAS_D:
        d_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        d = tl.load(d_ptr + offs_m[:, None] * stride_dm + offs_n[None, :] * stride_dn,
                    mask=d_mask, other=0.0)
        out += beta * d.to(tl.float32)
    return out * scale


@triton.jit
def _norm_scale(partials_ptr, b, num_partials, NORM_POWER: tl.constexpr,
                PARTIALS_POW2: tl.constexpr):
    """(1 / norm)^NORM_POWER for matrix b (1 when the operand is not the raw input)."""
    scale = 1.0
    if NORM_POWER > 0:
        inv = _inv_norm(partials_ptr, b, num_partials, PARTIALS_POW2)
        scale = inv
        if NORM_POWER > 1:
            scale = inv * inv
    return scale


@triton.jit
def _store_mirrored(c_ptr, tile, offs_i, offs_j, ti, M, stride_cm, stride_cn, BLOCK_M: tl.constexpr,
                    MIRROR):
    """Store the upper part of a tile of a symmetric matrix, row block ti, and mirror it below the diagonal.

    In units of BLOCK_M x BLOCK_M blocks: the tile's blocks on or above the diagonal are stored at (i, j), those
    strictly above it also transposed at (j, i); MIRROR says whether the tile has any of the latter. A square tile
    is wholly one or the other; a wide tile straddling the diagonal also holds blocks below it, computed and
    dropped."""
    col_block = offs_j // BLOCK_M
    mask = (offs_i[:, None] < M) & (offs_j[None, :] < M) & (col_block[None, :] >= ti)
    tl.store(c_ptr + offs_i[:, None] * stride_cm + offs_j[None, :] * stride_cn, tile, mask=mask)
    if MIRROR:
        mask_t = (offs_j[:, None] < M) & (offs_i[None, :] < M) & (col_block[:, None] > ti)
        tl.store(c_ptr + offs_j[:, None] * stride_cm + offs_i[None, :] * stride_cn,
                 tl.trans(tile), mask=mask_t)


@triton.jit
def _upper_tile(pid, num_cols, RATIO: tl.constexpr, OFFSET: tl.constexpr):
    """Map a program id onto a tile (ti, tj) on or above the diagonal of a tile grid whose tiles are RATIO row
    blocks wide, row by row: row ti holds the tiles (ti, ti // RATIO + OFFSET), ..., (ti, num_cols - 1) (OFFSET 1:
    the tiles wholly above the diagonal band)."""
    ti = pid * 0
    start = pid * 0
    while pid >= start + (num_cols - ti // RATIO - OFFSET):
        start += num_cols - ti // RATIO - OFFSET
        ti += 1
    return ti, ti // RATIO + OFFSET + (pid - start)


# --------------------------------------------------------------------------------------------
# Symmetric product: C = norm^-p * (alpha * L @ R + beta * D), with a symmetric result;
# optionally also C2 = C + gamma * I.  Used for X X^T (R = the transposed view of L) and for
# every square product of the state (all its matrices commute, so every product is symmetric).
# --------------------------------------------------------------------------------------------
@triton.jit
def _band_tile(q):
    """Square tile q of the diagonal band that a BAND grid's wide tiles leave: per pair of tile rows (2k, 2k+1)
    the tiles (2k, 2k), (2k, 2k + 1) and (2k + 1, 2k + 1)."""
    k = q // 3
    r = q % 3
    return 2 * k + (r == 2).to(tl.int32), 2 * k + (r >= 1).to(tl.int32)


@triton.jit
def _sym_tile(
    l_ptr, r_ptr, d_ptr, c_ptr, c2_ptr, partials_ptr, b, ti, tj,
    M, K, num_partials,
    stride_lm, stride_lk, stride_rk, stride_rn, stride_dm, stride_dn, stride_cm, stride_cn,
    alpha, beta, gamma,
    NORM_POWER: tl.constexpr, HAS_D: tl.constexpr, ADD_IDENTITY: tl.constexpr, HAS_IDENTITY_OUT: tl.constexpr,
    BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PARTIALS_POW2: tl.constexpr, DOT_PRECISION: tl.constexpr, SELF: tl.constexpr,
):
    """Tile (ti, tj) of BLOCK rows and BLOCK_N columns of matrix b (the pointers already at it): its product,
    epilogue and upper, mirrored stores. ADD_IDENTITY adds gamma I to the stored result (P = a I + R as one
    matrix); HAS_IDENTITY_OUT stores the result and, as a second output, the result plus gamma I. SELF: the tile
    is a square diagonal tile of a product whose right operand is the left one's transpose in value, computed from
    the left row panel alone (the caller decides: a runtime choice of loop in here would serialize the wgmma)."""
    RATIO: tl.constexpr = BLOCK_N // BLOCK
    offs_i = ti * BLOCK + tl.arange(0, BLOCK)
    offs_j = tj * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = _tile_dot(l_ptr, r_ptr, offs_i, offs_j, M, M, K,
                    stride_lm, stride_lk, stride_rk, stride_rn,
                    BLOCK, BLOCK_N, BLOCK_K, DOT_PRECISION, SELF)
    scale = _norm_scale(partials_ptr, b, num_partials, NORM_POWER, PARTIALS_POW2)
    out = _epilogue(acc, offs_i, offs_j, M, M, d_ptr, stride_dm, stride_dn, scale, alpha, beta,
                    HAS_D)
    mirror = (tj + 1) * RATIO - 1 > ti  # a block of the tile lies above the diagonal
    if ADD_IDENTITY:  # P = a I + b A + c A^2 stored whole (STORE_P)
        out += tl.where(offs_i[:, None] == offs_j[None, :], gamma, 0.0)
    _store_mirrored(c_ptr, out.to(c_ptr.dtype.element_ty), offs_i, offs_j, ti, M,
                    stride_cm, stride_cn, BLOCK, mirror)
    if HAS_IDENTITY_OUT:
        # the first factor of a composed run, P_0 = a I + R_0, starts the running product Q
        out += tl.where(offs_i[:, None] == offs_j[None, :], gamma, 0.0)
        _store_mirrored(c2_ptr, out.to(c2_ptr.dtype.element_ty), offs_i, offs_j, ti, M,
                        stride_cm, stride_cn, BLOCK, mirror)


@triton.jit
def _sym_gemm_kernel(
    l_ptr, r_ptr, d_ptr, c_ptr, c2_ptr, partials_ptr,
    M, K, num_partials, num_wide,
    stride_lb, stride_lm, stride_lk,
    stride_rb, stride_rk, stride_rn,
    stride_db, stride_dm, stride_dn,
    stride_cb, stride_cm, stride_cn,
    alpha, beta, gamma,
    NORM_POWER: tl.constexpr, HAS_D: tl.constexpr, ADD_IDENTITY: tl.constexpr, HAS_IDENTITY_OUT: tl.constexpr,
    BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    BAND: tl.constexpr, PARTIALS_POW2: tl.constexpr, DOT_PRECISION: tl.constexpr, SELF: tl.constexpr,
):
    """Upper tiles of BLOCK x BLOCK_N in row-major order. With BAND the first num_wide programs take the wide tiles
    wholly above the diagonal band and the others the band's square tiles: two code paths in one launch."""
    RATIO: tl.constexpr = BLOCK_N // BLOCK
    pid = tl.program_id(0)
    b = tl.program_id(1)  # batch is the slow grid axis: one matrix's tiles run together
    l_ptr += b.to(tl.int64) * stride_lb
    r_ptr += b.to(tl.int64) * stride_rb
    d_ptr += b.to(tl.int64) * stride_db
    c_ptr += b.to(tl.int64) * stride_cb
    c2_ptr += b.to(tl.int64) * stride_cb
    rows = tl.cdiv(M, BLOCK)
    band_tile = False  # a square tile of the band (BAND's last programs)
    if BAND:
        band_tile = pid >= num_wide
    if band_tile:
        ti, tj = _band_tile(pid - num_wide)
        # a diagonal tile of a self product takes a _sym_tile of its own, epilogue and stores included: one
        # accumulator merged from the two K loops makes ptxas serialize every wgmma of the kernel (C7515)
        if SELF and ti == tj and tj < rows:
            _sym_tile(l_ptr, r_ptr, d_ptr, c_ptr, c2_ptr, partials_ptr, b, ti, tj, M, K, num_partials,
                      stride_lm, stride_lk, stride_rk, stride_rn, stride_dm, stride_dn, stride_cm, stride_cn,
                      alpha, beta, gamma, NORM_POWER, HAS_D, ADD_IDENTITY, HAS_IDENTITY_OUT,
                      BLOCK, BLOCK, BLOCK_K, PARTIALS_POW2, DOT_PRECISION, True)
        elif tj < rows:
            _sym_tile(l_ptr, r_ptr, d_ptr, c_ptr, c2_ptr, partials_ptr, b, ti, tj, M, K, num_partials,
                      stride_lm, stride_lk, stride_rk, stride_rn, stride_dm, stride_dn, stride_cm, stride_cn,
                      alpha, beta, gamma, NORM_POWER, HAS_D, ADD_IDENTITY, HAS_IDENTITY_OUT,
                      BLOCK, BLOCK, BLOCK_K, PARTIALS_POW2, DOT_PRECISION, False)
    else:  # BAND's wide tiles start one column tile right of the diagonal's
        ti, tj = _upper_tile(pid, tl.cdiv(M, BLOCK_N), RATIO, BAND)
        _sym_tile(l_ptr, r_ptr, d_ptr, c_ptr, c2_ptr, partials_ptr, b, ti, tj, M, K, num_partials,
                  stride_lm, stride_lk, stride_rk, stride_rn, stride_dm, stride_dn, stride_cm, stride_cn,
                  alpha, beta, gamma, NORM_POWER, HAS_D, ADD_IDENTITY, HAS_IDENTITY_OUT,
                  BLOCK, BLOCK_N, BLOCK_K, PARTIALS_POW2, DOT_PRECISION, False)


# --------------------------------------------------------------------------------------------
# General product: C = norm^-p * (alpha * L @ R + beta * D) (rectangular output).
# Used for the rectangular updates X <- Q X and X <- a X + R X.
# --------------------------------------------------------------------------------------------
@triton.jit
def _row_major_tile(t, num_n):
    """Output tile (row, column) of linear index t, row by row."""
    return t // num_n, t % num_n


@triton.jit
def _gemm_kernel(
    l_ptr, r_ptr, d_ptr, c_ptr, partials_ptr,
    M, N, K, num_partials,
    stride_lb, stride_lm, stride_lk,
    stride_rb, stride_rk, stride_rn,
    stride_db, stride_dm, stride_dn,
    stride_cb, stride_cm, stride_cn,
    alpha, beta,
    NORM_POWER: tl.constexpr, HAS_D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PARTIALS_POW2: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    b = tl.program_id(1)
    tm, tn = _row_major_tile(tl.program_id(0), tl.cdiv(N, BLOCK_N))

    l_ptr += b.to(tl.int64) * stride_lb
    r_ptr += b.to(tl.int64) * stride_rb
    d_ptr += b.to(tl.int64) * stride_db
    c_ptr += b.to(tl.int64) * stride_cb

    offs_m = tm * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tn * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = _tile_dot(l_ptr, r_ptr, offs_m, offs_n, M, N, K,
                    stride_lm, stride_lk, stride_rk, stride_rn,
                    BLOCK_M, BLOCK_N, BLOCK_K, DOT_PRECISION, False)
    scale = _norm_scale(partials_ptr, b, num_partials, NORM_POWER, PARTIALS_POW2)
    out = _epilogue(acc, offs_m, offs_n, M, N, d_ptr, stride_dm, stride_dn, scale, alpha, beta,
                    HAS_D).to(c_ptr.dtype.element_ty)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, out, mask=mask)


@triton.jit
def _gemm_tma_kernel(
    l_ptr, r_ptr, c_ptr, partials_ptr,
    M, N, K, batch, num_partials,
    stride_cb, stride_cm, stride_cn,
    NORM_POWER: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PARTIALS_POW2: tl.constexpr, DOT_PRECISION: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
):
    """C[b] = norm^-p L[b] @ R[b] for contiguous L [batch, M, K] and R [batch, K, N]: persistent programs over
    (matrix, tile) in the row-major order of _gemm_kernel, TMA loads; the tile loop warp-specialized, or
    flattened into the K loop (WARP_SPECIALIZE False) so that the next tile's loads overlap this tile's epilogue.

    The descriptors see the batch as [batch * M, K] and [batch * K, N]: a row tile of L that runs past M reads
    the next matrix's rows into output rows that are never stored, and K is a whole number of K steps when
    batch > 1 (the launcher checks), so no K step of R reaches into the next matrix; past the last matrix the
    descriptors read zeros."""
    l_desc = tl.make_tensor_descriptor(l_ptr, shape=[batch * M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    r_desc = tl.make_tensor_descriptor(r_ptr, shape=[batch * K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    per_matrix = num_m * num_n
    for tile in tl.range(tl.program_id(0), per_matrix * batch, NUM_PROGRAMS, flatten=not WARP_SPECIALIZE,
                    warp_specialize=WARP_SPECIALIZE):
        b = tile // per_matrix
        tm, tn = _row_major_tile(tile % per_matrix, num_n)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(tl.cdiv(K, BLOCK_K)):
            lhs = l_desc.load([b * M + tm * BLOCK_M, ki * BLOCK_K])
            rhs = r_desc.load([b * K + ki * BLOCK_K, tn * BLOCK_N])
            acc = tl.dot(lhs, rhs, acc, input_precision=DOT_PRECISION)
        offs_m = tm * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tn * BLOCK_N + tl.arange(0, BLOCK_N)
        scale = _norm_scale(partials_ptr, b, num_partials, NORM_POWER, PARTIALS_POW2)
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        tl.store(c_ptr + b.to(tl.int64) * stride_cb + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
                 (acc * scale).to(c_ptr.dtype.element_ty), mask=mask)


def _tma_ready(t, block_k):
    """A [batch, rows, cols] operand the TMA kernel can take: contiguous, 16-byte rows and base, and (several
    matrices) rows a whole number of K steps."""
    batch, rows, cols = t.shape
    return (t.is_contiguous() and (cols * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0
            and (batch == 1 or rows % block_k == 0))


# --------------------------------------------------------------------------------------------
# Launcher.
# --------------------------------------------------------------------------------------------
def _num_upper_programs(num_rows, num_cols, ratio, offset=0):
    """Programs of _upper_tile's grid: each tile row's columns from its diagonal (plus offset) on."""
    return sum(num_cols - ti // ratio - offset for ti in range(num_rows))


def _sym_tile_shape(m, batch, block, sms):
    """The symmetric products' tiles (SYM_TILES): "square", "wide" or "band"; by_waves takes "wide" where the wide
    grid's tiles need no more waves at one program per SM than the square grid's at two, "band" elsewhere."""
    if SYM_TILES != "by_waves":
        return SYM_TILES
    rows = triton.cdiv(m, block)
    square = batch * _num_upper_programs(rows, rows, 1)
    wide = batch * _num_upper_programs(rows, triton.cdiv(m, 2 * block), 2)
    fits = triton.cdiv(wide, sms * _WIDE_PROGRAMS_PER_SM) <= triton.cdiv(square, sms * _SQUARE_PROGRAMS_PER_SM)
    return "wide" if fits else "band"


def _plan_flops(m, n, segments):
    """FLOPs per matrix of a segment plan, a symmetric product counted at half (one triangle).

    Per segment of `steps` steps: the Gram matrix X X^T (m^2 n), the square products (m^3 each:
    P in every step; in all but the last step the state update A' = P (P A), two products; in all
    but the first Q = P Q), and the rectangular product Q X (2 m^2 n)."""
    return sum(3 * m * m * n + (steps + 3 * (steps - 1)) * m ** 3 for steps in segments)


def _segment_plan(m, n):
    composed = _plan_flops(m, n, COMPOSED_SEGMENTS)
    plain = _plan_flops(m, n, PLAIN_SEGMENTS)
    return COMPOSED_SEGMENTS if composed <= COMPOSE_MAX_WORK_RATIO * plain else PLAIN_SEGMENTS


class _Launcher:
    def __init__(self, x_dtype, device, batch, m, cfg, partials, num_partials):
        self.cfg = cfg
        self.batch = batch
        self.m = m
        self.partials = partials
        self.num_partials = num_partials
        self.partials_pow2 = triton.next_power_of_2(num_partials)
        # fp32 problems keep full fp32 products (tf32 would be far less accurate than the
        # fp32 reference); half-precision inputs run on bf16/fp16 tensor cores
        self.precision = "ieee" if x_dtype == torch.float32 else "tf32"
        sms = (torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda"
               else _H200_SMS)
        self.sms = sms
        self.device = device
        self.sym_tiles = _sym_tile_shape(m, batch, cfg["sym_block"], sms)

    def sym(self, left, right, out, alpha=1.0, d=None, beta=0.0, norm_power=0,
            identity_out=None, gamma=0.0):
        """out = norm^-p (alpha left @ right + beta d) for a product known to be symmetric, plus gamma I unless
        identity_out is given, which then receives out + gamma I."""
        cfg, m = self.cfg, self.m
        # the right operand the left one's transpose in value: X X^T's transposed view, or a state matrix times itself
        # (every square matrix here is symmetric)
        self_product = SYM_SELF_DIAGONAL and right.data_ptr() == left.data_ptr() and right.stride() in (
            left.stride(), left.transpose(1, 2).stride())
        dd = out if d is None else d
        out2 = out if identity_out is None else identity_out
        block_m, square = cfg["sym_block"], self.sym_tiles == "square"
        block_n = block_m if square else 2 * block_m
        rows, cols = triton.cdiv(m, block_m), triton.cdiv(m, block_n)
        band = self.sym_tiles == "band"
        programs = _num_upper_programs(rows, cols, block_n // block_m, offset=int(band))
        num_wide = programs if band else 0  # (0 otherwise, unused: one specialization of the argument)
        if band:  # then the band's square tiles: three per pair of tile rows
            programs += 3 * triton.cdiv(rows, 2)
        _sym_gemm_kernel[(programs, self.batch)](
            left, right, dd, out, out2, self.partials,
            m, left.shape[2], self.num_partials, num_wide,
            *left.stride(), *right.stride(), *dd.stride(), *out.stride(),
            alpha, beta, gamma,
            NORM_POWER=norm_power, HAS_D=d is not None, ADD_IDENTITY=identity_out is None and gamma != 0.0,
            HAS_IDENTITY_OUT=identity_out is not None,
            BLOCK=block_m, BLOCK_N=block_n, BLOCK_K=cfg["sym_block_k"], BAND=band,
            PARTIALS_POW2=self.partials_pow2, DOT_PRECISION=self.precision, SELF=self_product,
            num_warps=cfg["sym_warps"], num_stages=cfg["sym_stages" if square else "sym_wide_stages"],
            **({"maxnreg": SYM_MAXNREG} if SYM_MAXNREG and square else {}),
        )

    def tma_programs(self, tiles):
        """The persistent grid of a TMA kernel over `tiles` tiles, its descriptors' scratch allocator set."""
        triton.set_allocator(self.scratch)
        return min(tiles, self.cfg["tma_programs"] or self.sms)

    def scratch(self, size, alignment, stream):
        """Global scratch for the tensor descriptors a kernel makes (Triton asks the allocator set for it)."""
        return torch.empty(size, dtype=torch.int8, device=self.device)

    def gemm(self, left, right, out, alpha=1.0, d=None, beta=0.0, norm_power=0):
        """out = norm^-p (alpha left @ right + beta d): the rectangular update."""
        cfg = self.cfg
        M, N, K = out.shape[1], out.shape[2], left.shape[2]
        if MM_TMA and d is None and alpha == 1.0 and _tma_ready(left, cfg["mm_block_k"]) \
                and _tma_ready(right, cfg["mm_block_k"]):
            programs = self.tma_programs(
                self.batch * triton.cdiv(M, cfg["mm_block_m"]) * triton.cdiv(N, cfg["mm_block_n"]))
            _gemm_tma_kernel[(programs,)](
                left, right, out, self.partials,
                M, N, K, self.batch, self.num_partials,
                *out.stride(),
                NORM_POWER=norm_power,
                BLOCK_M=cfg["mm_block_m"], BLOCK_N=cfg["mm_block_n"], BLOCK_K=cfg["mm_block_k"],
                PARTIALS_POW2=self.partials_pow2, DOT_PRECISION=self.precision,
                NUM_PROGRAMS=programs, WARP_SPECIALIZE=MM_TMA_WARP_SPECIALIZE,
                num_warps=cfg["tma_ws_warps" if MM_TMA_WARP_SPECIALIZE else "mm_warps"],
                num_stages=cfg["mm_tma_stages"],
            )
            return
        dd = out if d is None else d
        grid = (triton.cdiv(M, cfg["mm_block_m"]) * triton.cdiv(N, cfg["mm_block_n"]), self.batch)
        _gemm_kernel[grid](
            left, right, dd, out, self.partials,
            M, N, K, self.num_partials,
            *left.stride(), *right.stride(), *dd.stride(), *out.stride(),
            alpha, beta,
            NORM_POWER=norm_power, HAS_D=d is not None,
            BLOCK_M=cfg["mm_block_m"], BLOCK_N=cfg["mm_block_n"], BLOCK_K=cfg["mm_block_k"],
            PARTIALS_POW2=self.partials_pow2, DOT_PRECISION=self.precision,
            num_warps=cfg["mm_warps"], num_stages=cfg["mm_stages"],
        )


def _state_dtype(x_dtype):
    """The square state's storage type: fp16 for half-precision inputs (three more mantissa bits than bf16 at the
    same bytes and tensor-core rate; every square matrix is bounded: A's eigenvalues lie in [0, 1] after the
    norm, P's and Q's are at most a few tens), the input's dtype otherwise."""
    if x_dtype == torch.bfloat16 and STATE_FP16:
        return torch.float16
    return x_dtype


def _stores_p(state_dtype, x_dtype):
    """Whether a composed run stores its step matrices P whole (STORE_P): where rounding P's diagonal to the state's
    type costs less than X's own rounding, a bf16 input's fp16 state or an fp32 one (emulated on the batch's shape:
    4.83e-3 of the oracle's RMS against 4.81e-3 with R stored); an fp16 input's fp16 state keeps R (the interpreter on
    cpu_tall_f16: 8.6e-3 with P stored, 4.9e-3 with R)."""
    return STORE_P and (state_dtype == torch.float32 or torch.finfo(state_dtype).eps < torch.finfo(x_dtype).eps)


def _compose(launch, state, tmp, free, steps, x_dtype, p_stored):
    """Q = P_{s-1} ... P_0 of one composed run; returns Q's buffer, its last product written in x_dtype (the
    rectangular product's operand type). With `p_stored` each step matrix P_k = a I + b A_k + c A_k^2 is stored
    whole and every product with it is a plain product (no added matrix to read); otherwise only R_k = P_k - a I
    is, every product P Z is a Z + R Z with a Z added in the fp32 epilogue, and P_0 is written beside R_0 to start
    Q."""
    def times_p(f, z, out):  # out = P z, f being P or R
        if p_stored:
            launch.sym(f, z, out)
        else:
            launch.sym(f, z, out, d=z, beta=NS_A)

    q = None
    for k in range(steps):
        f = free.pop()  # P_k, or R_k
        if p_stored:
            launch.sym(state, state, f, alpha=NS_C, d=state, beta=NS_B, gamma=NS_A)
        elif k == 0:  # R_0, and P_0 = a I + R_0 as the start of Q
            q = free.pop()
            launch.sym(state, state, f, alpha=NS_C, d=state, beta=NS_B, identity_out=q, gamma=NS_A)
        else:
            launch.sym(state, state, f, alpha=NS_C, d=state, beta=NS_B)
        if k < steps - 1:
            times_p(f, state, tmp)  # P A
            times_p(f, tmp, state)  # A <- P (P A)
        if q is None:
            q = f  # Q = P_0, stored whole
            continue
        if k > 0:
            q_next = free.pop()
            times_p(f, q, q_next.view(x_dtype) if k == steps - 1 else q_next)  # Q <- P Q
            free.append(q)
            q = q_next
        free.append(f)
    return q


def run(G):
    batched = G.dim() == 3
    g = (G if batched else G.unsqueeze(0)).contiguous()
    batch, rows, cols = g.shape
    out = torch.empty_like(g)

    # Work on the wide orientation (m <= n) through views: the transposed problem reads G and
    # writes the output with swapped strides, no transposed copy is made.
    transposed = rows > cols
    x0 = g.transpose(1, 2) if transposed else g
    x_out = out.transpose(1, 2) if transposed else out
    m, n = x0.shape[1], x0.shape[2]
    cfg = _CONFIG_TINY if m < _TINY_BELOW else _CONFIG_LARGE

    # ---- Frobenius norm: partial sums, reduced by the first kernels that read G ----
    numel = rows * cols
    block = cfg["norm_block"]
    chunk = max(cfg["norm_min_chunk"], triton.cdiv(numel, _MAX_NORM_PARTIALS))
    chunk = triton.cdiv(chunk, block) * block
    num_partials = triton.cdiv(numel, chunk)
    partials = torch.empty((batch, num_partials), device=g.device, dtype=torch.float32)
    _sumsq_partials_kernel[(num_partials, batch)](
        g, partials, numel, chunk, g.stride(0), num_partials,
        BLOCK=block, num_warps=cfg["norm_warps"],
    )

    launch = _Launcher(g.dtype, g.device, batch, m, cfg, partials, num_partials)
    # Square state (fp32 accumulation, stored in _state_dtype): the Gram/state matrix A, a temporary for P A, and
    # three rotating buffers for the step matrices and the running product Q. A matrix that meets X in a
    # rectangular product is written in X's dtype, through a view of its buffer (same element size).
    square = torch.empty((5, batch, m, m), device=g.device, dtype=_state_dtype(g.dtype))
    state, tmp, free = square[0], square[1], [square[2], square[3], square[4]]

    segments = _segment_plan(m, n)
    if len(segments) > 1:
        rect = [torch.empty((batch, m, n), device=g.device, dtype=g.dtype) for _ in range(2)]
    x = x0
    for seg, steps in enumerate(segments):
        first, last = seg == 0, seg == len(segments) - 1
        norm_power = 1 if first else 0  # X is the raw input in the first run: scale by 1/norm
        # A = X X^T (1/norm^2 on the raw input)
        launch.sym(x, x.transpose(1, 2), state, norm_power=2 * norm_power)
        dst = x_out if last else rect[seg % 2]  # the last run writes the output
        if steps == 1:
            # the reference's step: R = c A^2 + b A (= P - a I), then X <- a X + R X (a X added in fp32)
            r = free[0].view(x.dtype)
            launch.sym(state, state, r, alpha=NS_C, d=state, beta=NS_B)
            launch.gemm(r, x, dst, d=x, beta=NS_A, norm_power=norm_power)
        else:
            q = _compose(launch, state, tmp, free, steps, x.dtype, _stores_p(square.dtype, x.dtype))
            launch.gemm(q.view(x.dtype), x, dst, norm_power=norm_power)  # X <- Q X
            free.append(q)
        x = dst

    return out if batched else out[0]
