"""Paged GQA decode attention: reference, oracle, comparator.

One query token per sequence attends to that sequence's whole KV cache, which lives in fixed-size
pages scattered over a shared pool: page j of sequence b is k_cache[block_table[b, j]].
Query head h reads KV head h // (Hq // Hkv) (grouped-query attention).
"""

import math

import torch
import torch.nn.functional as F

# Every scored workload uses the vLLM / SGLang default page size.
PAGE_SIZE = 16


def _lengths(params, gen, device):
    """Sequence lengths: fixed when L_min == L_max; else one drawn from the seed in each of B equal strata of
    [L_min, L_max] (the first stratum's set to L_min and the last's to L_max, so both extremes are present), in an
    order drawn from the seed. Stratified, the total length of a set is the same in every evaluation up to about
    (L_max - L_min) / sqrt(12 B) tokens (35 of 279k on qwen3_8b_b256_lvar): drawn independently it moved by
    3% (sqrt(B) (L_max - L_min) / sqrt(12)), and the time with it, so that two evaluations' speedups of the same
    kernel differed by 2.7% (bench/results/2026-12-04-h200-owed-19 call6)."""
    B, lo, hi = params["B"], params["L_min"], params["L_max"]
    if lo == hi:
        return torch.full((B,), lo, dtype=torch.int32, device=device)
    edges = torch.linspace(lo, hi + 1, B + 1, dtype=torch.float64)
    within = torch.rand(B, generator=gen, device=device, dtype=torch.float64).cpu()
    lens = (edges[:-1] + within * (edges[1:] - edges[:-1])).floor().clamp(lo, hi).to(torch.int32)
    lens[0] = lo
    if B > 1:
        lens[-1] = hi
    order = torch.randperm(B, generator=gen, device=device).cpu()
    return lens[order].to(device)


def make_inputs(workload, seed: int, device: str) -> tuple:
    p = workload.params
    B, Hq, Hkv, D = p["B"], p["Hq"], p["Hkv"], p["D"]
    page = p.get("page_size", PAGE_SIZE)
    dtype = getattr(torch, workload.dtype)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)

    seq_lens = _lengths(p, gen, device)
    pages_per_seq = [(int(n) + page - 1) // page for n in seq_lens.tolist()]
    # Shapes depend on the workload only, never on the seed (fresh inputs can then be written in
    # place over old ones): the pool holds every sequence at L_max plus spare pages, so page ids
    # are never a compact 0..n-1 range, and the block table is one column wider than the longest
    # sequence needs, so every row ends in padding.
    max_pages = (p["L_max"] + page - 1) // page + 1
    most = B * (max_pages - 1)
    num_pages = most + max(8, most // 8)

    perm = torch.randperm(num_pages, generator=gen, device=device).to(torch.int32)
    block_table = torch.full((B, max_pages), -1, dtype=torch.int32, device=device)
    cursor = 0
    for b, n in enumerate(pages_per_seq):
        block_table[b, :n] = perm[cursor:cursor + n]
        cursor += n

    q = torch.randn((B, Hq, D), generator=gen, device=device, dtype=torch.float32).to(dtype)
    k_cache = torch.randn((num_pages, page, Hkv, D), generator=gen, device=device,
                          dtype=torch.float32).to(dtype)
    v_cache = torch.randn((num_pages, page, Hkv, D), generator=gen, device=device,
                          dtype=torch.float32).to(dtype)
    scale = 1.0 / math.sqrt(D)
    return q, k_cache, v_cache, block_table, seq_lens, scale


def _attend_float64(q, k_cache, v_cache, block_table, seq_lens, scale):
    """The oracle's computation: one sequence at a time, so that float64 copies of the largest
    workload's KV (several GB gathered at once) are never held."""
    B, Hq, D = q.shape
    page, Hkv = k_cache.shape[1], k_cache.shape[2]
    group = Hq // Hkv
    f64 = torch.float64
    out = torch.empty((B, Hq, D), dtype=f64, device=q.device)
    for b, L in enumerate(seq_lens.tolist()):
        n = (L + page - 1) // page
        ids = block_table[b, :n].long()
        k = k_cache[ids].reshape(n * page, Hkv, D)[:L].to(f64)              # [L, Hkv, D]
        v = v_cache[ids].reshape(n * page, Hkv, D)[:L].to(f64)
        s = torch.matmul(q[b].view(Hkv, group, D).to(f64), k.permute(1, 2, 0))  # [Hkv, G, L]
        p = torch.softmax(s * scale, dim=-1)
        out[b] = torch.matmul(p, v.permute(1, 0, 2)).reshape(Hq, D)          # [Hkv, G, D]
    return out


def reference(q, k_cache, v_cache, block_table, seq_lens, scale):
    """The speed baseline: plain PyTorch over the whole batch, in the workload dtype. Every
    sequence's pages are gathered to the block table's full width (padding pages read page 0),
    keys past a sequence's length are masked out of a float32 softmax, then the weighted sum of
    values. No host synchronisation and a fixed number of launches: its time is the GPU's, not the
    Python loop's (a per-sequence loop measured 12.9-48.7 ms of mostly launch overhead)."""
    B, Hq, D = q.shape
    page, Hkv = k_cache.shape[1], k_cache.shape[2]
    group = Hq // Hkv
    width = block_table.shape[1] * page
    ids = block_table.long().clamp_min(0)
    k = k_cache[ids].view(B, width, Hkv, D).permute(0, 2, 3, 1)               # [B, Hkv, D, width]
    v = v_cache[ids].view(B, width, Hkv, D).permute(0, 2, 1, 3)               # [B, Hkv, width, D]
    s = torch.matmul(q.view(B, Hkv, group, D), k)                            # [B, Hkv, G, width]
    valid = torch.arange(width, device=q.device)[None, :] < seq_lens[:, None].long()
    s = s.float().mul_(scale).masked_fill_(~valid[:, None, None, :], float("-inf"))
    p = torch.softmax(s, dim=-1).to(q.dtype)
    return torch.matmul(p, v).reshape(B, Hq, D)


def oracle(q, k_cache, v_cache, block_table, seq_lens, scale):
    """The same computation in float64 (immune to TF32 matmul settings), returned as float32."""
    return _attend_float64(q, k_cache, v_cache, block_table, seq_lens, scale).float()


def derived(workload, inputs) -> dict:
    seq_lens = inputs[4]
    page = inputs[1].shape[1]
    lens = seq_lens.tolist()
    return {
        "sum_L": sum(lens),
        "sum_pages": sum((n + page - 1) // page for n in lens),
    }


def comparator_prepare(q, k_cache, v_cache, block_table, seq_lens, scale):
    """Untimed: gather every sequence's pages into contiguous [B, Hkv, Lpad, D] K and V.

    Layout choice: the query group is put on SDPA's query-length axis (q viewed as [B, Hkv, G, D],
    one "query token" per head of the group), which is exactly grouped-query decode and lets the
    flash / memory-efficient backends run without repeating K/V per query head (FlashAttention
    itself swaps a decode query's group into the sequence axis the same way). It is equivalent
    to SDPA with enable_gqa on [B, Hq, 1, D].
    Varied lengths: pad every sequence to the longest (rounded up to whole pages, a multiple of
    16 as the memory-efficient kernel wants) and pass an additive mask (0 / -inf) over the padded
    keys; with all lengths equal and page-aligned no mask is passed, so the flash backend runs.
    """
    B, Hq, D = q.shape
    page, Hkv = k_cache.shape[1], k_cache.shape[2]
    group = Hq // Hkv
    lens = seq_lens.tolist()
    n = (max(lens) + page - 1) // page
    Lpad = n * page
    ids = block_table[:, :n].long().clamp_min(0)                               # padding -> page 0, masked
    k = k_cache[ids].reshape(B, Lpad, Hkv, D).permute(0, 2, 1, 3).contiguous()  # [B, Hkv, Lpad, D]
    v = v_cache[ids].reshape(B, Lpad, Hkv, D).permute(0, 2, 1, 3).contiguous()
    qg = q.view(B, Hkv, group, D)
    if min(lens) == Lpad:
        mask = None
    else:
        valid = torch.arange(Lpad, device=q.device)[None, :] < seq_lens[:, None].long()
        mask = torch.zeros((B, 1, 1, Lpad), dtype=q.dtype, device=q.device)
        mask.masked_fill_(~valid[:, None, None, :], float("-inf"))
    return qg, k, v, mask, scale


def comparator(qg, k, v, mask, scale):
    o = F.scaled_dot_product_attention(qg, k, v, attn_mask=mask, scale=scale)  # [B, Hkv, G, D]
    B, Hkv, G, D = o.shape
    return o.reshape(B, Hkv * G, D)
