"""Two adjacent KV heads a program through batched dots: does the split stage stream faster (issue 3's 85% of copy on
the 128k sequence, 0.95x SDPA on llama3_8b)?

    PYTHONPATH=src python3 bench/diag/attn_head_pairs.py [--reps 30] [--json OUT]

The sum-only stream of the 128k sequence's pages reads 97% of the copy rate with two adjacent KV heads a program
(a token's two heads are one 512-byte run) against 85% with one (bench/results/2026-12-05-owed-25 call1). Every
attempt to give the split kernel two heads doubled its work or its registers (block-diagonal queries, a joint load
split in registers) or halved its warps' share (each head's tile its own load at four warps). Here each head keeps
its own dots as one batch of a batched dot, [heads, group, D] x [heads, D, tile], which Triton lays out one head a
warp group (sm_90, Triton 3.9: `warpsPerCTA = [2, 1, 4]` at eight warps): 64 registers and 74 KB of shared memory
at 32-token tiles, three programs an SM of eight warps each, where one head at 64-token tiles takes 154 registers
and 72 KB at four warps (the same stage bytes, twice the warps).

The split stage alone (static equal splits, no merge), one head a program against two, on the 128k sequence and
llama3_8b's shape; each variant's partials are merged here in torch and checked against the task's reference.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import triton
import triton.language as tl

from d2kbench.evaluate.timing import Timer
from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task

LOG2E = 1.4426950408889634
SHAPES = {
    "qwen3_235b_a22b_b1_l128k": dict(B=1, Hq=64, Hkv=4, D=128, L=131072),
    "llama3_8b_b64_l4k": dict(B=64, Hq=32, Hkv=8, D=128, L=4096),
}


@triton.jit
def _split_heads_kernel(q_ptr, k_ptr, v_ptr, bt_ptr, part_o_ptr, part_lse_ptr, seq_len, split_tokens,
                        qk_scale_log2, stride_bt, stride_k_page, stride_k_tok, stride_v_page, stride_v_tok,
                        GROUP: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                        TILE: tl.constexpr, HEADS: tl.constexpr):
    """One slice of one sequence for HEADS adjacent KV heads: the expert's tile loop (page ids one tile ahead,
    online softmax in base 2) with a leading head axis on every tensor, so each head's two dots are one batch of a
    batched dot. Writes each query head's normalised partial output and its log-sum-exp."""
    pair, b, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    hq_total = tl.num_programs(0) * HEADS * GROUP
    offs_h = tl.arange(0, HEADS)
    offs_g = tl.arange(0, GP)
    offs_d = tl.arange(0, D)
    kv_heads = pair * HEADS + offs_h
    q_heads = kv_heads[:, None] * GROUP + offs_g[None, :]                      # [HEADS, GP]
    g_ok = (offs_g < GROUP)[None, :]
    q = tl.load(q_ptr + (b * hq_total + q_heads)[:, :, None] * D + offs_d[None, None, :],
                mask=g_ok[:, :, None], other=0.0)
    m_i = tl.full([HEADS, GP], float("-inf"), tl.float32)
    l_i = tl.zeros([HEADS, GP], tl.float32)
    acc = tl.zeros([HEADS, GP, D], tl.float32)
    k_base = k_ptr + kv_heads * D
    v_base = v_ptr + kv_heads * D
    start = split * split_tokens
    end = tl.minimum(start + split_tokens, seq_len)
    bt_row = bt_ptr + b * stride_bt
    first = start + tl.arange(0, TILE)
    next_page = tl.load(bt_row + first // PAGE, mask=first < end, other=0)
    for tok0 in range(start, end, TILE):
        offs_n = tok0 + tl.arange(0, TILE)
        tok_ok = offs_n < end
        page = next_page.to(tl.int64)
        ahead = offs_n + TILE
        next_page = tl.load(bt_row + ahead // PAGE, mask=ahead < end, other=0)
        k_off = page * stride_k_page + (offs_n % PAGE) * stride_k_tok
        v_off = page * stride_v_page + (offs_n % PAGE) * stride_v_tok
        k = tl.load(k_base[:, None, None] + k_off[None, None, :] + offs_d[None, :, None],
                    mask=tok_ok[None, None, :], other=0.0)                  # [HEADS, D, TILE]
        s = tl.dot(q, k) * qk_scale_log2                                      # [HEADS, GP, TILE]
        s = tl.where(tok_ok[None, None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 2))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, :, None])
        l_i = l_i * alpha + tl.sum(p, 2)
        v = tl.load(v_base[:, None, None] + v_off[None, :, None] + offs_d[None, None, :],
                    mask=tok_ok[None, :, None], other=0.0)                  # [HEADS, TILE, D]
        acc = acc * alpha[:, :, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    row = (b * hq_total + q_heads) * tl.num_programs(2) + split              # [HEADS, GP]
    tl.store(part_o_ptr + row[:, :, None] * D + offs_d[None, None, :], acc / l_i[:, :, None], mask=g_ok[:, :, None])
    tl.store(part_lse_ptr + row, m_i + tl.log2(l_i), mask=g_ok)


def inputs_for(ref, shape: dict, seed: int = 7) -> list:
    workload = SimpleNamespace(params=dict(B=shape["B"], Hq=shape["Hq"], Hkv=shape["Hkv"], D=shape["D"],
                                           page_size=16, L_min=shape["L"], L_max=shape["L"]), dtype="bfloat16")
    return list(ref.make_inputs(workload, seed, "cuda"))


def launcher(inputs, heads: int, splits: int, tile: int, warps: int):
    """The split stage for `heads` KV heads a program, `splits` equal slices a sequence; returns (launch, merge)."""
    q, k_cache, v_cache, table, seq_lens, scale = inputs
    B, Hq, D = q.shape
    _, page, Hkv, _ = k_cache.shape
    group = Hq // Hkv
    length = int(seq_lens[0])                         # the two shapes' lengths are fixed
    split_tokens = triton.cdiv(triton.cdiv(length, splits), tile) * tile
    part_o = torch.empty((B, Hq, splits, D), dtype=torch.float32, device=q.device)
    part_lse = torch.empty((B, Hq, splits), dtype=torch.float32, device=q.device)
    grid = (Hkv // heads, B, splits)

    def launch():
        _split_heads_kernel[grid](q, k_cache, v_cache, table, part_o, part_lse, length, split_tokens,
                                  float(scale) * LOG2E, table.stride(0), k_cache.stride(0), k_cache.stride(1),
                                  v_cache.stride(0), v_cache.stride(1), GROUP=group, GP=max(16, group), D=D,
                                  PAGE=page, TILE=tile, HEADS=heads, num_warps=warps, num_stages=3)

    def merged():
        live = triton.cdiv(length, split_tokens)
        lse, o = part_lse[:, :, :live], part_o[:, :, :live]
        w = torch.exp2(lse - lse.amax(-1, keepdim=True))
        return ((w[..., None] * o).sum(2) / w.sum(-1)[..., None]).to(q.dtype)

    return launch, merged, grid[0] * grid[1] * grid[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    task = find_task("attn_decode_paged_gqa")
    ref = load_module(task.reference_path, "diag_pairs_ref")
    timer = Timer(torch.device("cuda"))
    src = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)

    def median_us(fn) -> float:
        times, _ = timer.time(lambda slot: fn(), lambda slot: None, [0], args.reps, warmup=3, graph=False)
        return statistics.median(times) * 1e3

    copy_rate = 2 * src.numel() / (median_us(lambda: dst.copy_(src)) * 1e-6)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"copy {copy_rate / 1e12:.2f} TB/s\n\n| workload | variant | programs | split stage | of copy | error |\n"
          "|---|---|---|---|---|---|", flush=True)
    records = []
    for name, shape in SHAPES.items():
        inputs = inputs_for(ref, shape)
        want = ref.reference(*inputs).float()
        rms = want.pow(2).mean().sqrt().item()
        kv = 2 * shape["B"] * shape["L"] * shape["Hkv"] * shape["D"] * 2
        one_head_splits = 99 if shape["B"] == 1 else 3       # the expert's: one wave of 396, or 3 a pair
        variants = [("one head a program, 4 warps, 64-token tiles", 1, one_head_splits, 64, 4),
                    ("two heads a program, 8 warps, 32-token tiles", 2, one_head_splits * 2, 32, 8),
                    ("two heads a program, 8 warps, 32-token tiles, half the programs", 2, one_head_splits, 32, 8),
                    ("two heads a program, 4 warps, 32-token tiles", 2, one_head_splits * 2, 32, 4)]
        for label, heads, splits, tile, warps in variants:
            try:
                launch, merged, programs = launcher(inputs, heads, splits, tile, warps)
                launch()
                error = (merged().float() - want).abs().max().item() / rms
                us = median_us(launch)
            except Exception as exc:  # noqa: BLE001 - a variant that does not compile or launch is reported
                print(f"| {name} | {label} | failed: {type(exc).__name__}: {str(exc)[:200]} |", flush=True)
                continue
            records.append(dict(workload=name, variant=label, programs=programs, us=us, of_copy=kv / us / 1e-6
                                / copy_rate, error=error))
            print(f"| {name} | {label} | {programs} | {us:.1f} us | {records[-1]['of_copy']:.1%} | {error:.2g} |",
                  flush=True)
        del inputs
        torch.cuda.empty_cache()
    if args.json:
        args.json.write_text(json.dumps(dict(copy_rate=copy_rate, gpu=torch.cuda.get_device_name(),
                                             torch=torch.__version__, triton=triton.__version__,
                                             records=records), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
