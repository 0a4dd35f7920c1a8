"""Calibration ablation of the expert: property `relaxed_private_atomics` removed.

Identical to expert.py except that the slot-taking atomic increment on the program's private
cursor row uses Triton's default semantics (acq_rel ordering at GPU scope) instead of a relaxed,
CTA-scoped atomic, although no cross-program ordering is needed. Every other design property is
kept. Expected cost on the H200: each pair's atomic carries fences and goes to L2 instead of
resolving within the SM.

Made from expert.py with sha256 2c8a4b9c0282aa3b (tests/test_judge_ablations.py).
"""

import torch
import triton
import triton.language as tl

# Up to this many pairs one program does everything (one launch: decode and small batches).
SINGLE_PROGRAM_MAX_PAIRS = 1024
# Pairs loaded per loop step in the single-program kernel.
SINGLE_CHUNK = 256
# Multi-program path: pairs per loop step, chosen between these bounds so that about
# TARGET_PROGRAMS programs share the work (fewer programs keep the redundant scan small).
MIN_CHUNK = 512
MAX_CHUNK = 2048
TARGET_PROGRAMS = 64
# Above this many programs each program loops over several chunks instead.
MAX_PROGRAMS = 128
# Elements of one [programs, experts] tile of the counts table read by the scan.
SCAN_TILE = 4096
# Widest expert slice the scan handles per step.
MAX_EXPERT_BLOCK = 128
# Elements written per step by the sentinel / -1 pre-fill.
FILL_BLOCK = 1024
NUM_WARPS = 4


@triton.jit
def _fill_slice(ptr, value, n, pid, num_programs, BLOCK: tl.constexpr):
    """Write `value` into this program's contiguous slice of ptr[0:n] (the pre-fill)."""
    per_program = tl.cdiv(tl.cdiv(n, num_programs), BLOCK) * BLOCK
    begin = pid * per_program
    end = tl.minimum(begin + per_program, n)
    offs = tl.arange(0, BLOCK)
    fill = tl.full([BLOCK], value, dtype=tl.int32)
    for off in range(begin, end, BLOCK):
        tl.store(ptr + off + offs, fill, mask=off + offs < end)


@triton.jit
def _span_histogram(ids_ptr, begin, end, E_PAD: tl.constexpr, CHUNK: tl.constexpr):
    """Expert histogram of the pairs [begin, end), accumulated in registers chunk by chunk."""
    counts = tl.zeros([E_PAD], dtype=tl.int32)
    offs = tl.arange(0, CHUNK)
    for off in range(begin, end, CHUNK):
        valid = off + offs < end
        experts = tl.load(ids_ptr + off + offs, mask=valid, other=0)
        # tl.histogram counts in shared memory; masked lanes are left out of every bin.
        counts += tl.histogram(experts, E_PAD, mask=valid)
    return counts


@triton.jit
def _store_cursors(cursor_row_ptr, experts, in_range, counts, before, carry, block_size):
    """Scan one slice of experts: padded counts -> start offsets, and this program's cursors.

    counts: pairs of each expert over all programs; before: pairs of each expert owned by the
    programs before this one; carry: padded pairs of all experts before this slice.
    Returns the new carry.
    """
    padded = tl.where(in_range, tl.cdiv(counts, block_size) * block_size, 0)
    start = carry + tl.cumsum(padded, axis=0) - padded  # exclusive scan over experts
    tl.store(cursor_row_ptr + experts, start + before, mask=in_range)
    return carry + tl.sum(padded, axis=0)


@triton.jit
def _scatter_span(ids_ptr, cursor_row_ptr, sorted_ids_ptr, expert_ids_ptr, begin, end,
                  block_size, CHUNK: tl.constexpr):
    """Place the pairs [begin, end) at their slots; first-slot pairs write their block's expert."""
    offs = tl.arange(0, CHUNK)
    for off in range(begin, end, CHUNK):
        pair = off + offs
        valid = pair < end
        experts = tl.load(ids_ptr + pair, mask=valid, other=0)
        # The cursor row is private to this program: no counter is shared.
        slot = tl.atomic_add(cursor_row_ptr + experts, 1, mask=valid)
        tl.store(sorted_ids_ptr + slot, pair, mask=valid)
        # Each used block's first slot holds a real pair (padding sits at a group's end and is
        # shorter than a block), so exactly one pair writes each used block's expert id.
        tl.store(expert_ids_ptr + slot // block_size, experts,
                 mask=valid & (slot % block_size == 0))


@triton.jit
def _align_single_program_kernel(
    ids_ptr, sorted_ids_ptr, expert_ids_ptr, total_ptr, cursor_ptr,
    num_pairs, num_experts, block_size, sorted_len, num_blocks,
    E_PAD: tl.constexpr, CHUNK: tl.constexpr, FILL: tl.constexpr,
):
    """Small inputs: count, scan and scatter in one program, one launch."""
    # Pre-fill every slot with the sentinel and every block with -1; the scatter below
    # overwrites the real slots and the used blocks after the barrier.
    _fill_slice(sorted_ids_ptr, num_pairs, sorted_len, 0, 1, FILL)
    _fill_slice(expert_ids_ptr, -1, num_blocks, 0, 1, FILL)

    counts = _span_histogram(ids_ptr, 0, num_pairs, E_PAD, CHUNK)
    experts = tl.arange(0, E_PAD)
    in_range = experts < num_experts
    total = _store_cursors(cursor_ptr, experts, in_range, counts, tl.zeros_like(counts), 0,
                           block_size)
    tl.store(total_ptr, total)

    # Orders the pre-fill before the scatter's stores and makes the cursor row visible to the
    # atomics of every thread of the program.
    tl.debug_barrier()
    _scatter_span(ids_ptr, cursor_ptr, sorted_ids_ptr, expert_ids_ptr, 0, num_pairs,
                  block_size, CHUNK)


@triton.jit
def _count_kernel(
    ids_ptr, counts_ptr, sorted_ids_ptr, expert_ids_ptr,
    num_pairs, num_experts, span, sorted_len, num_blocks,
    E_PAD: tl.constexpr, CHUNK: tl.constexpr, FILL: tl.constexpr,
):
    """Large inputs, step 1: per-program expert histograms (and the sentinel / -1 pre-fill)."""
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    # The pre-fill rides on this launch; the scatter launch that follows overwrites it.
    _fill_slice(sorted_ids_ptr, num_pairs, sorted_len, pid, num_programs, FILL)
    _fill_slice(expert_ids_ptr, -1, num_blocks, pid, num_programs, FILL)

    begin = pid * span
    end = tl.minimum(begin + span, num_pairs)
    counts = _span_histogram(ids_ptr, begin, end, E_PAD, CHUNK)
    experts = tl.arange(0, E_PAD)
    tl.store(counts_ptr + pid * num_experts + experts, counts, mask=experts < num_experts)


@triton.jit
def _scatter_kernel(
    ids_ptr, counts_ptr, cursor_ptr, sorted_ids_ptr, expert_ids_ptr, total_ptr,
    num_pairs, num_experts, block_size, span,
    P_PAD: tl.constexpr, E_BLOCK: tl.constexpr, CHUNK: tl.constexpr,
):
    """Large inputs, step 2: scan the counts table, then scatter this program's pairs.

    Every program reduces the whole [programs, E] table itself (a few KB to a few hundred KB,
    cache-resident): the column sums give the expert totals, the rows above its own give its offset
    inside each expert. That costs less than a separate single-program scan launch.
    """
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    rows = tl.arange(0, P_PAD)
    row_ok = rows < num_programs
    row_before = rows < pid
    cursor_row_ptr = cursor_ptr + pid * num_experts

    carry = 0
    for e0 in range(0, num_experts, E_BLOCK):
        experts = e0 + tl.arange(0, E_BLOCK)
        in_range = experts < num_experts
        table = tl.load(counts_ptr + rows[:, None] * num_experts + experts[None, :],
                        mask=row_ok[:, None] & in_range[None, :], other=0)
        counts = tl.sum(table, axis=0)
        before = tl.sum(tl.where(row_before[:, None], table, 0), axis=0)
        carry = _store_cursors(cursor_row_ptr, experts, in_range, counts, before, carry,
                               block_size)

    if pid == 0:
        tl.store(total_ptr, carry)

    # The cursor row was written by all threads; make it visible to every thread's atomics.
    tl.debug_barrier()
    begin = pid * span
    end = tl.minimum(begin + span, num_pairs)
    _scatter_span(ids_ptr, cursor_row_ptr, sorted_ids_ptr, expert_ids_ptr, begin, end,
                  block_size, CHUNK)


def run(topk_ids, num_experts, block_size):
    ids = topk_ids.contiguous()
    device = ids.device
    num_pairs = ids.numel()
    sorted_len = num_pairs + num_experts * (block_size - 1)
    num_blocks = triton.cdiv(sorted_len, block_size)

    sorted_ids = torch.empty(sorted_len, dtype=torch.int32, device=device)
    expert_ids = torch.empty(num_blocks, dtype=torch.int32, device=device)
    total = torch.empty(1, dtype=torch.int32, device=device)
    e_pad = triton.next_power_of_2(num_experts)

    if num_pairs <= SINGLE_PROGRAM_MAX_PAIRS:
        cursor = torch.empty(num_experts, dtype=torch.int32, device=device)
        # At least one pair per thread, so no lane of the histogram's input is replicated.
        chunk = min(max(triton.next_power_of_2(num_pairs), 32 * NUM_WARPS), SINGLE_CHUNK)
        _align_single_program_kernel[(1,)](
            ids, sorted_ids, expert_ids, total, cursor,
            num_pairs, num_experts, block_size, sorted_len, num_blocks,
            E_PAD=e_pad, CHUNK=chunk, FILL=FILL_BLOCK, num_warps=NUM_WARPS,
        )
        return sorted_ids, expert_ids, total

    chunk = min(max(triton.next_power_of_2(triton.cdiv(num_pairs, TARGET_PROGRAMS)), MIN_CHUNK),
                MAX_CHUNK)
    span = chunk * triton.cdiv(triton.cdiv(num_pairs, chunk), MAX_PROGRAMS)
    num_programs = triton.cdiv(num_pairs, span)
    p_pad = triton.next_power_of_2(num_programs)
    e_block = min(e_pad, MAX_EXPERT_BLOCK, max(SCAN_TILE // p_pad, 1))

    counts = torch.empty((num_programs, num_experts), dtype=torch.int32, device=device)
    cursor = torch.empty((num_programs, num_experts), dtype=torch.int32, device=device)
    _count_kernel[(num_programs,)](
        ids, counts, sorted_ids, expert_ids,
        num_pairs, num_experts, span, sorted_len, num_blocks,
        E_PAD=e_pad, CHUNK=chunk, FILL=FILL_BLOCK, num_warps=NUM_WARPS,
    )
    _scatter_kernel[(num_programs,)](
        ids, counts, cursor, sorted_ids, expert_ids, total,
        num_pairs, num_experts, block_size, span,
        P_PAD=p_pad, E_BLOCK=e_block, CHUNK=chunk, num_warps=NUM_WARPS,
    )
    return sorted_ids, expert_ids, total
