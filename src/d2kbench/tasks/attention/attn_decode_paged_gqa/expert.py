"""Expert kernel: paged grouped-query decode attention as split-KV flash-decoding.

Stage 1 (_decode_split_kernel), grid = KV head x batch x split: one program owns one KV head of
one sequence and one contiguous slice (split) of that sequence's tokens. It keeps the KV head's
whole query group resident as one axis of the tensor-core dots (the M of mma.sync, padded to the MMA
minimum; on the static splits the N of wgmma, the scores transposed: SWAP_AB_DOTS), walks the slice
tile by tile through the block table (each K/V page is read once per KV head, shared by every query
head of the group), runs an online softmax in float32 in the base-2 domain
and writes a normalised partial output and its log-sum-exp for every head of the group (with a
single split per sequence, the output itself, and stage 2 is not launched).

Stage 2 (_merge_splits_kernel), grid = query head x batch (x head-dim parts, MERGE_SPLIT_HEAD_DIM):
merges the live splits of one head exactly, weighting each partial output by exp2(its lse - the running max).

The split count is chosen on the host from the batch, the KV heads and the block table's static
width (never from seq_lens, which would need a device-to-host sync), to give a few waves of
programs per SM. Within a sequence each split covers an equal share of its length, rounded up to
whole tiles, so only the sequence's very last tile is partial. (With DYNAMIC_SPLIT_MIN_PROGRAMS, a batch of few
sequences, the 128k one, instead runs one wave whose programs take tile-aligned chunks from a counter.)
"""

import functools
import os
from fractions import Fraction

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634

# Tuning knobs, from sweeps on the H200: the design does not depend on their values. 64-token tiles,
# page ids one iteration ahead, three stages and eight waves were the best common setting over the
# four scored workloads (bench/results/2026-12-04-h200-owed-13): against the 128-token tiles with
# four stages shipped before, 6% faster on llama3_70b, 4% on qwen3_8b_lvar, the same (within 0.6%)
# on llama3_8b and qwen3_235b.
TILE_N = 64               # tokens per K/V tile (a whole number of 16-token pages)
MMA_MIN_M = 16            # smallest M of a tensor-core dot: the query group is padded up to it
WAVES = 8                 # stage-1 programs per SM that the split count aims for
MIN_TILES_PER_SPLIT = 2   # a split shorter than this is not worth its partial-output round trip
SPLIT_NUM_WARPS = 4
# Load the next tile's page ids one iteration ahead. In the same iteration, the page-id load is
# a link in front of the K/V loads, and Triton's pipeliner then buffers K/V tiles num_stages - 3
# times (one buffer at four stages, as shipped before); carried from the previous iteration, the K/V
# loads head the chain and get num_stages - 1 buffers (the sm_90 TTGIR, Triton 3.9).
PREFETCH_PAGE_IDS = True
SPLIT_NUM_STAGES = 3      # K/V tiles double-buffered with the page ids one iteration ahead
# Which of the split kernel's paths take their scores transposed, S^T = K Q^T and O^T = V^T P^T: "static" (equal
# splits, merged), "direct" (one split a sequence, the output itself), "dynamic" (the one wave of chunks), "all" or
# "none". Transposed, the dots' M is the tile's 64 tokens or the head dim and the query group (16) their N, so both
# run as warpgroup MMAs (wgmma) reading K and V from shared memory, with no ldmatrix (28 a tile, Q re-read each
# time, on the mma.sync path). The pipeliner buffers wgmma operands as many times as the stages (the mma.sync
# loop: stages - 1), so these launches take SWAP_NUM_STAGES = 2 to stay at three programs an SM (68 KB). Measured
# (an H100, bench/results/2026-12-07-h100-owed-36 calls 1 and 4): llama3_8b 371.4 -> 365.1 us and llama3_70b
# 726.7 -> 713.4 (static splits; llama3_8b faster in 20 of 20 rounds), but qwen3_8b_lvar 399.3 -> 407.0 (direct)
# and the 128k sequence 103.0 -> 104.1 (dynamic): on the static splits only.
SWAP_AB_DOTS = "static"
SWAP_NUM_STAGES = 2
# Stage 2 is a latency-bound pass over a few MB: size each program to its work. A step merges up to
# MERGE_MAX_SPLIT_BLOCK splits (the split count rounded up to a power of two, so few splits mean a
# short masked tile), with one warp per MERGE_ELEMS_PER_THREAD x 32 values of the tile. The fixed
# 16-split step with 4 warps shipped before cost llama3_8b 5 us against one warp, while the single
# 128k-token sequence's 264 splits want more per step: 64 splits with 4 warps took it from 107 to
# 98 us (bench/results/2026-12-04-h200-sweep-16, calls 1 and 2; 16 values per thread: 102 us).
MERGE_MAX_SPLIT_BLOCK = 64
MERGE_ELEMS_PER_THREAD = 64
# Where the batch's query heads are fewer programs than SMs (the single 128k-token sequence: 64 heads), split the
# head dim over programs as well, down to MERGE_MIN_D_BLOCK values, and let each step take proportionally more
# splits: each program's chain of dependent steps is its latency (264 splits: five steps of 64 as shipped, two of 256
# at 32 values). The 128k sequence 97.8 -> 89.2 us, no other workload touched (bench/results/2026-12-05-h200-owed-22
# call1, attn_merge_split; set there by bench/pick_knobs.py).
MERGE_SPLIT_HEAD_DIM = True
MERGE_MIN_D_BLOCK = 32
# Launch the merge as a programmatic dependent of the split kernel (Hopper's PDL): once every split program has
# started, the merge's programs may be scheduled into the SMs the last wave leaves free and wait there
# (griddepcontrol.wait) for the splits' writes, instead of launching after the split kernel has drained: the gap
# between the two kernels, on every workload that merges. On the H200 against the 128k sequence's grid of that day
# (264 static splits in 2.7 waves) it gained nothing (bench/results/2026-12-05-h200-owed-22 call1); against the
# dynamic one wave it ships with now, 100.4 -> 98.7 us (faster in 20 of 20 rounds), and llama3_8b 354.3 -> 352.5
# (H100, bench/results/2026-12-07-h100-owed-44 call2). GPU only (the interpreter has no PDL).
MERGE_PDL = True
# How many splits. "waves": enough for WAVES programs per SM (as shipped). "whole_waves": of the split counts up
# to that many, the one whose grid leaves least of its last wave idle at SPLIT_PROGRAMS_PER_SM resident programs
# per SM, the fewest splits among equals (fewer partials to write and merge). With equal splits a grid runs in
# whole waves, so its time goes as ceil(programs / slots) x one split's tokens. The single 128k-token sequence
# (4 KV heads) takes 264 splits as shipped, 2.7 waves of 64-token-tile programs, 8 tiles each; the rule gives it
# 99, one full wave: 97.5 -> 86.2 us, but llama3_70b 498.7 -> 509.5 (three splits in one wave against nine in 2.9,
# which the rule rates equal; bench/results/2026-12-05-h200-owed-22 call1, attn_split_rule). Off; the 128k sequence
# gets its one wave from the dynamic split below.
SPLIT_RULE = "waves"
# The split kernel's sm_90 occupancy, which the rule's waves are counted in (tests check it against the compile):
# with the page ids ahead, 72 KB of shared memory a program; without, 39 KB and about 107 registers; the transposed
# tiles of the static splits (SWAP_AB_DOTS) 68-70 KB at two stages either way.
SPLIT_PROGRAMS_PER_SM = 3 if PREFETCH_PAGE_IDS or SWAP_AB_DOTS in ("static", "all") else 4
# Splits taken at run time: where one wave of resident programs gives each (sequence, KV head) pair at least
# DYNAMIC_SPLIT_MIN_PROGRAMS of them (None: never), launch that wave, and let each program take chunks of
# DYNAMIC_CHUNK_TILES tiles of its pair's sequence from an atomic counter until none are left, folding them into
# one online softmax (the merge does not need a program's tiles to be contiguous). A grid of equal static splits in
# one wave ends with its slowest program; here each SM stops within a chunk of the others. The counters live
# between calls and the merge zeroes them. Measured (bench/results/2026-12-05-h200-owed-22 call1, attn_dynamic): at
# 16 (the 128k sequence alone, 99 programs a pair) 96.9 -> 86.7 us with four-tile chunks (two: 88.9), as fast as the
# static one-wave grid of SPLIT_RULE = "whole_waves" (85.5; ncu: the wave's SMs active 94% of its time either way),
# so its gain is the single wave, not balance; at 2 llama3_70b (3 a pair) 2-12% slower, as it is under the
# whole-wave rule (the reason that rule stays off).
DYNAMIC_SPLIT_MIN_PROGRAMS = 16
DYNAMIC_CHUNK_TILES = 4
# Chunks sized by the tiles left instead (guided self-scheduling: long chunks first, single tiles at the wave's end,
# where ncu had the SMs idle 5-6% of the cycles) were no faster on the 128k sequence: at a divisor of 2 x the pair's
# programs 0.996x the time on the H100 and 76.6 against 77.8 us on the H200, inside the rounds' spread; at 1 or 4
# slower (bench/results/2026-12-05-owed-24 calls 1 and 9). Not kept.
# Each program's first chunk by its index (the counter handing out only the chunks after the wave's), one atomic's
# round trip off the wave's start: 1.004x the time on an H100, inside the spread (bench/results/2026-12-06-h100-owed-35
# call1). Not kept.
# The pair's tiles cut into a whole number of rounds of near-equal chunks (programs x max(1, tiles // (programs x 4)):
# 495 chunks of 4-5 tiles for the 128k sequence, against 512 fixed chunks over 99 programs, whose 17 left over leave
# most of a pair idle at the wave's end), with no more grabs than the fixed chunks: 102.4 -> 103.1 us on an H100,
# slower in 17 of 20 rounds (bench/results/2026-12-07-h100-owed-40). Not kept: the wave's end is not set by that
# remainder. Likewise the merge's partial outputs loaded beside their log-sum-exps (one L2 round trip a step instead
# of two): within 0.1% on every workload, its kernel 4.7-4.8 us under ncu either way (same run). Not kept.
# Two adjacent KV heads a program (one 512-byte run a token, which took a sum-only stream of the 128k sequence from 85%
# to 97% of the copy rate) through block-diagonal [2 x GROUP_PAD, 2 x HEAD_DIM] queries: 1.3x slower at four warps,
# 1.6x at eight, on every scored workload (the doubled dots and registers, two programs per SM instead of three;
# bench/results/2026-12-05-owed-25 calls 1 and 2). Not kept.
# Two adjacent KV heads a dynamic program without doubling the dots (each head its own query group, softmax and dots,
# both heads' tiles loaded in the same iteration at 32 tokens, twice the programs a pair: grid [2, 1, 198]): the 128k
# sequence 77.7 -> 149.6 us with the tiles loaded as one 512-byte run a token and split in registers (tl.reshape,
# tl.permute, tl.split: 184 registers, run capped at 168), 79.0 us with each head's tile its own load (152 registers);
# three programs per SM either way (bench/results/2026-12-06-owed-26 call1, attn_pairs). Not kept: two loads do not
# give the runs the stream measured, and one load's split in registers costs twice what it saves.
# Each page's K and V rows of the KV head as one TMA box ([16, D] through descriptors over the caches' [rows, Hkv x D]
# view), one page an iteration: slower on every scored workload on the H100, the 128k sequence 100.7 -> 106-122 us at
# 4-8 stages, llama3_70b 699 -> 723-875 (bench/results/2026-12-06-owed-29). ncu (128k): the same 7.6 cycles between
# issues, 18% occupancy achieved either way, DRAM 81 -> 64% of peak: a 16-token page an iteration costs more
# instructions a byte (mbarrier waits, a small MMA and the softmax per page) than 16-byte loads of 64-token tiles save.
# Not kept (without a gather in Hopper's TMA, a page per box is all it can do at 16-token pages).
# The dynamic wave at four programs an SM (two stages under a 128-register cap, 528 programs on the 128k sequence
# instead of 396 at three stages): 76.4 -> 87.6 us on the H200, slower in 20 of 20 rounds (bench/results/
# 2026-12-06-owed-34 call1). Not kept: more resident warps do not pay for a stage less and the cap's spill.
# One 16-token page a warp, each warp its own online softmax through a batched dot ([warps, group, D] x [warps, D,
# page]: a warp's scores, sums and P never leave it) and the warps merged once at the program's end (vLLM's CUDA
# paged attention shares blocks out among warps alike): the sm_90 tile loop 22-28% fewer instructions and two
# barriers instead of seven, but each warp holds a whole accumulator (168 registers under a cap, a spill on the
# dynamic wave). On the H200 llama3_8b 254.2 -> 265.9 us, llama3_70b 491.5 -> 497.4, the 128k sequence 76.2 -> 96.2,
# only qwen3_8b_lvar faster (281.1 -> 275.1) (bench/results/2026-12-06-owed-34 call1). Not kept.
# The tile loop's masks dropped on whole tiles (the ragged last tile after the loop: 510 -> 482 sm_90 instructions a
# tile on Triton 3.6), and the softmax denominator kept per tile column and summed once after the range (one
# cross-warp reduction a tile instead of two: 9 -> 6 bar.sync): on an H100 neither moved the 128k sequence beyond its
# spread (103.1 -> 104.8 and 104.0 us; the deferred sum slower in 20 of 20 rounds of a second sweep) nor llama3_8b
# (371.9 -> 372.2, 372.0), the deferred sum 1.1% faster on qwen3_8b_lvar only (bench/results/2026-12-07-h100-owed-36
# calls 1 and 4). Not kept: the loop's instructions and barriers are not what the wave waits on.

_SM_COUNT = {}


def _sm_count(device):
    if device.type != "cuda":
        return 132        # interpreter runs: size the grid as on an H200
    key = device.index if device.index is not None else torch.cuda.current_device()
    if key not in _SM_COUNT:
        _SM_COUNT[key] = torch.cuda.get_device_properties(key).multi_processor_count
    return _SM_COUNT[key]


@triton.jit
def _split_layout(seq_len, num_splits, TILE: tl.constexpr):
    """Both stages derive the same layout from the sequence length alone: the tokens one split
    covers (an equal share rounded up to whole tiles) and how many splits hold any token."""
    split_tokens = tl.cdiv(tl.cdiv(seq_len, num_splits), TILE) * TILE
    live_splits = tl.cdiv(seq_len, split_tokens)
    return split_tokens, live_splits


@triton.jit
def _decode_split_kernel(
    q_ptr, k_ptr, v_ptr, block_table_ptr, seq_lens_ptr, part_o_ptr, part_lse_ptr,
    o_ptr,                                 # written here with a single split
    chunk_counter_ptr,                     # [batch, KV heads] int32, zero on entry (DYNAMIC)
    qk_scale_log2,                         # softmax scale * log2(e): scores land in base 2
    num_splits,
    stride_qb, stride_qh,
    stride_k_page, stride_k_tok, stride_k_head,
    stride_v_page, stride_v_tok, stride_v_head,
    stride_bt_b,
    stride_po_b, stride_po_h, stride_po_s,
    stride_pl_b, stride_pl_h,
    stride_ob, stride_oh,
    GROUP: tl.constexpr,                   # query heads per KV head
    GROUP_PAD: tl.constexpr,               # GROUP padded to a power of two >= the MMA minimum M
    HEAD_DIM: tl.constexpr,
    PAGE: tl.constexpr,
    TILE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    PREFETCH_PAGES: tl.constexpr,          # page ids loaded one iteration ahead (PREFETCH_PAGE_IDS)
    DIRECT: tl.constexpr,                  # one split per sequence: write the output itself
    LAUNCH_DEPENDENTS: tl.constexpr,       # let the merge (launched with PDL) be scheduled now
    DYNAMIC: tl.constexpr,                 # splits taken as chunks from a counter
    CHUNK: tl.constexpr,                   # tokens per chunk (DYNAMIC)
    SWAP: tl.constexpr,                    # the scores transposed (SWAP_AB_DOTS)
):
    # The KV heads of one (sequence, split) on neighbouring programs: a 16-token page holds every KV
    # head ([page, Hkv, D]: 32 KB for 8 heads of 128) and a program reads its head's 256-byte rows at a
    # 2 KB stride, so launched side by side the heads' programs read each page together; with the batch
    # fastest, the programs running at once read pages of different sequences and each page's DRAM rows
    # are opened once per head (llama3_8b 266 -> 262 us: bench/results/2026-12-04-h200-sweep-16 call2).
    kv_head, b, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    if LAUNCH_DEPENDENTS:
        # Only permits the launch: the merge still waits for every split program's writes (gdc_wait).
        tl.extra.cuda.gdc_launch_dependents()

    seq_len = tl.load(seq_lens_ptr + b)
    if DYNAMIC:
        # Every slot of the pair is written: a program that found no chunk left writes an empty partial (lse -inf).
        heads, group_ok, offs_d, q = _query_group(q_ptr, b, kv_head, stride_qb, stride_qh, GROUP, GROUP_PAD, HEAD_DIM)
        m_i, l_i, acc = _softmax_state(GROUP_PAD, HEAD_DIM, SWAP)
        bt_row = block_table_ptr + b * stride_bt_b
        k_base = k_ptr + kv_head * stride_k_head
        v_base = v_ptr + kv_head * stride_v_head
        counter = chunk_counter_ptr + b * tl.num_programs(0) + kv_head
        chunk = tl.atomic_add(counter, 1, sem="relaxed")
        while chunk * CHUNK < seq_len:
            start = chunk * CHUNK
            m_i, l_i, acc = _attend_tiles(
                q, m_i, l_i, acc, start, tl.minimum(start + CHUNK, seq_len), bt_row, k_base, v_base,
                qk_scale_log2, stride_k_page, stride_k_tok, stride_v_page, stride_v_tok,
                HEAD_DIM, PAGE, TILE, DOT_PRECISION, PREFETCH_PAGES, SWAP)
            chunk = tl.atomic_add(counter, 1, sem="relaxed")
        if SWAP:
            acc = tl.trans(acc)
        po = (part_o_ptr + b * stride_po_b + heads[:, None] * stride_po_h + split * stride_po_s
              + offs_d[None, :])
        tl.store(po, acc / tl.where(l_i > 0, l_i, 1.0)[:, None], mask=group_ok[:, None])
        pl = part_lse_ptr + b * stride_pl_b + heads * stride_pl_h + split
        tl.store(pl, m_i + tl.log2(l_i), mask=group_ok)   # log2(0) = -inf: weighted 0 by the merge
    else:
        split_tokens, live_splits = _split_layout(seq_len, num_splits, TILE)
        # Splits past the end of a short sequence hold nothing; stage 2 never reads their slots.
        if split < live_splits:
            start = split * split_tokens
            end = tl.minimum(start + split_tokens, seq_len)
            # The whole query group of this KV head, resident for the whole split.
            heads, group_ok, offs_d, q = _query_group(q_ptr, b, kv_head, stride_qb, stride_qh,
                                                      GROUP, GROUP_PAD, HEAD_DIM)
            # running max (base 2), denominator and numerator
            m_i, l_i, acc = _softmax_state(GROUP_PAD, HEAD_DIM, SWAP)
            bt_row = block_table_ptr + b * stride_bt_b
            k_base = k_ptr + kv_head * stride_k_head
            v_base = v_ptr + kv_head * stride_v_head
            m_i, l_i, acc = _attend_tiles(
                q, m_i, l_i, acc, start, end, bt_row, k_base, v_base, qk_scale_log2,
                stride_k_page, stride_k_tok, stride_v_page, stride_v_tok,
                HEAD_DIM, PAGE, TILE, DOT_PRECISION, PREFETCH_PAGES, SWAP)
            if SWAP:
                acc = tl.trans(acc)
            if DIRECT:
                # The only split: its normalised output is the output (a merge of one split would
                # multiply it by exp2(0) and divide by 1).
                o = o_ptr + b * stride_ob + heads[:, None] * stride_oh + offs_d[None, :]
                tl.store(o, (acc / l_i[:, None]).to(o_ptr.dtype.element_ty), mask=group_ok[:, None])
            else:
                # Normalised partial output and its log-sum-exp (base 2) for each real head of the group.
                po = (part_o_ptr + b * stride_po_b + heads[:, None] * stride_po_h + split * stride_po_s
                      + offs_d[None, :])
                tl.store(po, acc / l_i[:, None], mask=group_ok[:, None])
                pl = part_lse_ptr + b * stride_pl_b + heads * stride_pl_h + split
                tl.store(pl, m_i + tl.log2(l_i), mask=group_ok)


@triton.jit
def _query_group(q_ptr, b, kv_head, stride_qb, stride_qh,
                 GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr):
    """One KV head's query heads (padded to the MMA's M), which of them are real, the head-dim offsets, and their
    queries, loaded once: resident in registers for all of the program's tiles."""
    offs_g = tl.arange(0, GROUP_PAD)
    offs_d = tl.arange(0, HEAD_DIM)
    group_ok = offs_g < GROUP
    heads = kv_head * GROUP + offs_g
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :], mask=group_ok[:, None], other=0.0)
    return heads, group_ok, offs_d, q


@triton.jit
def _softmax_state(GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, SWAP: tl.constexpr):
    """An empty online softmax: running max, denominator and numerator (transposed, [HEAD_DIM, GROUP_PAD], with
    SWAP)."""
    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([HEAD_DIM, GROUP_PAD] if SWAP else [GROUP_PAD, HEAD_DIM], tl.float32)
    return m_i, l_i, acc


@triton.jit
def _attend_tiles(q, m_i, l_i, acc, start, end, bt_row, k_base, v_base, qk_scale_log2,
                  stride_k_page, stride_k_tok, stride_v_page, stride_v_tok,
                  HEAD_DIM: tl.constexpr, PAGE: tl.constexpr, TILE: tl.constexpr, DOT_PRECISION: tl.constexpr,
                  PREFETCH_PAGES: tl.constexpr, SWAP: tl.constexpr):
    """The online softmax (m_i, l_i, acc) carried over the tokens [start, end) of one sequence and KV head, tile by
    tile through the block table."""
    first = start + tl.arange(0, TILE)
    next_page_id = tl.load(bt_row + first // PAGE, mask=PREFETCH_PAGES & (first < end), other=0)
    for tok0 in range(start, end, TILE):
        offs_n = tok0 + tl.arange(0, TILE)
        tok_ok = offs_n < end          # only the sequence's last tile is ragged
        # Logical token -> physical page through the block table; padding entries (-1) lie
        # past the sequence end and are never used. Page offsets in int64: a large pool
        # overflows 32 bits.
        if PREFETCH_PAGES:
            page_id = next_page_id.to(tl.int64)
            ahead = offs_n + TILE
            next_page_id = tl.load(bt_row + ahead // PAGE, mask=ahead < end, other=0)
        else:
            page_id = tl.load(bt_row + offs_n // PAGE, mask=tok_ok, other=0).to(tl.int64)
        slot = offs_n % PAGE
        k_rows = k_base + page_id * stride_k_page + slot * stride_k_tok
        v_rows = v_base + page_id * stride_v_page + slot * stride_v_tok
        if SWAP:
            m_i, l_i, acc = _attend_tile_transposed(q, m_i, l_i, acc, tok_ok, k_rows, v_rows, qk_scale_log2,
                                                    HEAD_DIM, DOT_PRECISION)
        else:
            m_i, l_i, acc = _attend_tile(q, m_i, l_i, acc, tok_ok, k_rows, v_rows, qk_scale_log2,
                                         HEAD_DIM, DOT_PRECISION)
    return m_i, l_i, acc


@triton.jit
def _attend_tile(q, m_i, l_i, acc, tok_ok, k_rows, v_rows, qk_scale_log2,
                 HEAD_DIM: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """One tile (its tokens' K and V rows start at k_rows, v_rows) folded into the online softmax, the scores
    [GROUP_PAD, TILE]: the query group is the dots' M (16: mma.sync)."""
    offs_d = tl.arange(0, HEAD_DIM)
    # K tile loaded transposed [HEAD_DIM, TILE] so the scores are one dot.
    k = tl.load(k_rows[None, :] + offs_d[:, None], mask=tok_ok[None, :], other=0.0)
    s = tl.dot(q, k, input_precision=DOT_PRECISION) * qk_scale_log2   # [GROUP_PAD, TILE]
    s = tl.where(tok_ok[None, :], s, float("-inf"))

    # Online softmax: rescale what was accumulated so far to the new running max.
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)

    v = tl.load(v_rows[:, None] + offs_d[None, :], mask=tok_ok[:, None], other=0.0)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return m_new, l_i, acc


@triton.jit
def _attend_tile_transposed(q, m_i, l_i, acc, tok_ok, k_rows, v_rows, qk_scale_log2,
                            HEAD_DIM: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """_attend_tile with the scores transposed, [TILE, GROUP_PAD], and the numerator [HEAD_DIM, GROUP_PAD]: K as it
    lies is the first dot's M (the tile's tokens), V^T the second's (the head dim), so both are wgmma reading their
    tile from shared memory; the query group is their N."""
    offs_d = tl.arange(0, HEAD_DIM)
    k = tl.load(k_rows[:, None] + offs_d[None, :], mask=tok_ok[:, None], other=0.0)
    s = tl.dot(k, tl.trans(q), input_precision=DOT_PRECISION) * qk_scale_log2   # [TILE, GROUP_PAD]
    s = tl.where(tok_ok[:, None], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 0))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[None, :])
    l_i = l_i * alpha + tl.sum(p, 0)
    v = tl.load(v_rows[:, None] + offs_d[None, :], mask=tok_ok[:, None], other=0.0)
    acc = acc * alpha[None, :] + tl.dot(tl.trans(v), p.to(v.dtype), input_precision=DOT_PRECISION)
    return m_new, l_i, acc


@triton.jit
def _merge_splits_kernel(
    part_o_ptr, part_lse_ptr, seq_lens_ptr, o_ptr,
    chunk_counter_ptr,                     # zeroed here for the next call (DYNAMIC)
    num_splits, group, kv_heads,
    stride_po_b, stride_po_h, stride_po_s,
    stride_pl_b, stride_pl_h,
    stride_ob, stride_oh,
    D_BLOCK: tl.constexpr,                 # head-dim values per program (HEAD_DIM unless MERGE_SPLIT_HEAD_DIM)
    TILE: tl.constexpr,
    SPLIT_BLOCK: tl.constexpr,
    WAIT_PRIMARY: tl.constexpr,            # launched with PDL: wait for the split kernel's writes
    DYNAMIC: tl.constexpr,                 # every slot written, some of them empty
):
    head, b, d_part = tl.program_id(0), tl.program_id(1), tl.program_id(2)  # query heads fastest, as stage 1's
    if DYNAMIC:
        live_splits = num_splits
    else:
        seq_len = tl.load(seq_lens_ptr + b)   # an input, not a split's output: safe before the wait
        _, live_splits = _split_layout(seq_len, num_splits, TILE)
    d0 = d_part * D_BLOCK
    if WAIT_PRIMARY:
        tl.extra.cuda.gdc_wait()
    if DYNAMIC:
        # After the split kernel, which has taken its last chunk: one program per (sequence, KV head) zeroes the count.
        if (head % group == 0) & (d_part == 0):
            tl.store(chunk_counter_ptr + b * kv_heads + head // group, 0)
    _merge_head(part_o_ptr + b * stride_po_b + head * stride_po_h + d0,
                part_lse_ptr + b * stride_pl_b + head * stride_pl_h,
                o_ptr + b * stride_ob + head * stride_oh + d0,
                live_splits, stride_po_s, D_BLOCK, SPLIT_BLOCK, DYNAMIC)


@triton.jit
def _merge_head(po_row, pl_row, o_row, live_splits, stride_po_s,
                D_BLOCK: tl.constexpr, SPLIT_BLOCK: tl.constexpr, EMPTY_SLOTS: tl.constexpr):
    """One query head's output (D_BLOCK values of it) from its live splits' partial outputs and log-sum-exps,
    each read once (.cg: from L2, where stage 1 left them, not kept in L1). With EMPTY_SLOTS a slot may hold no
    token (lse -inf, output 0), a whole block of them too."""
    offs_d = tl.arange(0, D_BLOCK)
    # Exact merge, one block of splits at a time, with a running max so no weight overflows:
    # o = sum_s 2^(lse_s - m) * o_s / sum_s 2^(lse_s - m).
    m = -float("inf")
    den = 0.0
    acc = tl.zeros([D_BLOCK], tl.float32)
    for s0 in range(0, live_splits, SPLIT_BLOCK):
        offs_s = s0 + tl.arange(0, SPLIT_BLOCK)
        live = offs_s < live_splits
        lse = tl.load(pl_row + offs_s, mask=live, other=float("-inf"), cache_modifier=".cg")
        m_new = tl.maximum(m, tl.max(lse, 0))
        if EMPTY_SLOTS:  # nothing live so far: weigh against 0, not -inf (-inf - -inf is NaN); every weight is 0
            m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_ref = m_new
        alpha = tl.exp2(m - m_ref)
        w = tl.exp2(lse - m_ref)
        part = tl.load(po_row + offs_s[:, None] * stride_po_s + offs_d[None, :],
                       mask=live[:, None], other=0.0, cache_modifier=".cg")
        acc = acc * alpha + tl.sum(w[:, None] * part, 0)
        den = den * alpha + tl.sum(w, 0)
        m = m_new

    tl.store(o_row + offs_d, acc / den)


def _num_splits(batch, kv_heads, max_pages, page, device):
    """Host-side split count from static shapes only: enough (batch x KV head x split) programs
    for a few waves of the SMs, but never splits shorter than a couple of tiles."""
    programs = batch * kv_heads
    want = triton.cdiv(WAVES * _sm_count(device), programs)
    max_tiles = triton.cdiv(max_pages * page, TILE_N)
    most = max(1, min(want, triton.cdiv(max_tiles, MIN_TILES_PER_SPLIT)))
    if SPLIT_RULE == "waves":
        return most
    return _whole_wave_splits(programs, most, SPLIT_PROGRAMS_PER_SM * _sm_count(device))


@functools.lru_cache(maxsize=256)  # on the host before the launch, inside the timed call: computed once per shape
def _whole_wave_splits(programs, most, slots):
    """The split count s <= most that minimises the time of a grid of programs x s equal splits on `slots`
    resident programs, ceil(programs s / slots) waves of 1/s of a sequence each; the smallest s among equals."""
    return min(range(1, most + 1), key=lambda s: (Fraction(triton.cdiv(programs * s, slots), s), s))


def _dynamic_splits(batch, kv_heads, max_pages, page, device):
    """The dynamic split's programs per (sequence, KV head): one wave's slots shared out among the pairs, at most
    one a chunk; 0 (the static split rule's grid) where that is fewer than DYNAMIC_SPLIT_MIN_PROGRAMS or two."""
    if DYNAMIC_SPLIT_MIN_PROGRAMS is None:
        return 0
    per_pair = SPLIT_PROGRAMS_PER_SM * _sm_count(device) // (batch * kv_heads)
    programs = min(per_pair, triton.cdiv(max_pages * page, TILE_N * DYNAMIC_CHUNK_TILES))
    return programs if programs >= max(2, DYNAMIC_SPLIT_MIN_PROGRAMS) else 0


_CHUNK_COUNTERS = {}


def _chunk_counters(device, pairs):
    """The dynamic split's chunk counters, zero between calls (the merge zeroes them): kept per device, made once. Under
    CUDA graph capture before any eager call a fresh zeroed buffer is used, its memset captured with the graph."""
    counters = _CHUNK_COUNTERS.get(device)
    if counters is None or counters.numel() < pairs:
        counters = torch.zeros(pairs, dtype=torch.int32, device=device)
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return counters
        _CHUNK_COUNTERS[device] = counters
    return counters


def _merge_launch(num_splits, head_dim, heads, device):
    """Stage 2's head-dim values per program, splits per step and warps: with MERGE_SPLIT_HEAD_DIM the head dim is
    halved while the `heads` (query heads x batch) programs fall short of the SMs; the step covers the splits (a
    power of two, capped at MERGE_MAX_SPLIT_BLOCK x head dim values), and each warp about MERGE_ELEMS_PER_THREAD
    values per thread of the [splits, values] tile."""
    d_block = head_dim
    while MERGE_SPLIT_HEAD_DIM and d_block > MERGE_MIN_D_BLOCK and heads * head_dim // d_block < _sm_count(device):
        d_block //= 2
    most = MERGE_MAX_SPLIT_BLOCK * head_dim // d_block
    block = min(most, max(2, triton.next_power_of_2(num_splits)))
    warps = block * d_block // (32 * MERGE_ELEMS_PER_THREAD)
    return d_block, block, min(8, max(1, triton.next_power_of_2(warps)))


def run(q, k_cache, v_cache, block_table, seq_lens, scale):
    B, Hq, D = q.shape
    _, page, Hkv, _ = k_cache.shape
    group = Hq // Hkv
    assert group * Hkv == Hq, "query heads must be a multiple of KV heads"
    assert D >= 16 and (D & (D - 1)) == 0, "head dim must be a power of two >= 16"
    # The kernels assume unit stride along the head dim (a no-op for the usual layouts).
    q = q.contiguous()
    k_cache = k_cache if k_cache.stride(-1) == 1 else k_cache.contiguous()
    v_cache = v_cache if v_cache.stride(-1) == 1 else v_cache.contiguous()
    block_table = block_table.contiguous()
    seq_lens = seq_lens.contiguous()

    dynamic = _dynamic_splits(B, Hkv, block_table.shape[1], page, q.device)
    num_splits = dynamic or _num_splits(B, Hkv, block_table.shape[1], page, q.device)
    counters = _chunk_counters(q.device, B * Hkv) if dynamic else seq_lens  # (unused without DYNAMIC)
    o = torch.empty((B, Hq, D), dtype=q.dtype, device=q.device)
    direct = num_splits == 1
    if direct:  # no partials: stage 1 writes o (the partial pointers are unused)
        part_o, part_lse = o, o
    else:
        part_o = torch.empty((B, Hq, num_splits, D), dtype=torch.float32, device=q.device)
        part_lse = torch.empty((B, Hq, num_splits), dtype=torch.float32, device=q.device)

    group_pad = max(MMA_MIN_M, triton.next_power_of_2(group))
    # float32 inputs: keep full precision in the dots (no TF32); others use the plain MMA.
    precision = "ieee" if q.dtype == torch.float32 else "tf32"

    merge_d_block, merge_block, merge_warps = _merge_launch(num_splits, D, Hq * B, q.device)
    swap = SWAP_AB_DOTS in ("all", "dynamic" if dynamic else "direct" if direct else "static")
    pdl = MERGE_PDL and not direct and os.environ.get("TRITON_INTERPRET") != "1"  # compiled (or sm_90-reported)
    _decode_split_kernel[(Hkv, B, num_splits)](
        q, k_cache, v_cache, block_table, seq_lens, part_o, part_lse, o, counters,
        float(scale) * LOG2E, num_splits,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        block_table.stride(0),
        part_o.stride(0), part_o.stride(1), part_o.stride(2),
        part_lse.stride(0), part_lse.stride(1),
        o.stride(0), o.stride(1),
        GROUP=group, GROUP_PAD=group_pad, HEAD_DIM=D, PAGE=page, TILE=TILE_N,
        DOT_PRECISION=precision, PREFETCH_PAGES=PREFETCH_PAGE_IDS,
        DIRECT=direct, LAUNCH_DEPENDENTS=pdl, DYNAMIC=bool(dynamic), CHUNK=TILE_N * DYNAMIC_CHUNK_TILES,
        SWAP=swap, num_warps=SPLIT_NUM_WARPS, num_stages=SWAP_NUM_STAGES if swap else SPLIT_NUM_STAGES,
    )
    if direct:
        return o
    _merge_splits_kernel[(Hq, B, D // merge_d_block)](
        part_o, part_lse, seq_lens, o, counters,
        num_splits, group, Hkv,
        part_o.stride(0), part_o.stride(1), part_o.stride(2),
        part_lse.stride(0), part_lse.stride(1),
        o.stride(0), o.stride(1),
        D_BLOCK=merge_d_block, TILE=TILE_N, SPLIT_BLOCK=merge_block, WAIT_PRIMARY=pdl, DYNAMIC=bool(dynamic),
        num_warps=merge_warps, **({"launch_pdl": True} if pdl else {}),
    )
    return o
