"""Why the 128k sequence's one wave streams K and V at 3.3 TB/s where llama3_70b's split kernel reaches 4.3 (issue 3).

    PYTHONPATH=src python3 bench/diag/attn_one_wave.py [--reps 50] [--parts shapes,knobs,stream] [--json OUT]

Three questions, each answered by times of the evaluator's Timer (CUDA events, L2 flushed, median of --reps calls):
  shapes   the shipped expert on shapes of the 128k sequence's bytes that each differ from it in one thing (more KV
           heads, more sequences, pages in order), beside llama3_70b: is it the shape or the one wave?
  knobs    the 128k sequence with the split kernel's knobs set on the loaded module (all are read at call time), the
           dynamic wave re-sized to the occupancy each setting compiles to: warps, tiles per chunk, stages, tile size.
  stream   the 128k sequence's K and V read through the same block table by a kernel that only sums them (no
           softmax, no dots, many programs per SM): the access pattern's own rate, against the same kernel on the
           pages in order, and torch's copy of the cache; and with 2 or 4 adjacent KV heads a program (a token's
           heads are contiguous: 512 B or 1 KB runs instead of 256 B ones, the same bytes a program): would the
           split kernel stream faster with more than one KV head a program?
  stream_more  the stream's cases and more: which of a load's run, the program's footprint, the eviction policy or
           the expert's launch holds one head a program at 85% of the copy rate where two heads reach 97%?
  ncu_stream  one call of the stream at the expert's launch (one head, 256 tokens a program) between
           cudaProfilerStart and Stop, for `ncu --profile-from-start off` beside the split kernel's profile
           (bench/ncu_target.py): what the split kernel's loop adds to the loads alone.
Every expert line is checked against the task's reference (the largest difference, scaled by the reference's rms).
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

from d2kbench.evaluate.sm90 import programs_per_sm
from d2kbench.evaluate.timing import Timer
from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task

TASK = "attn_decode_paged_gqa"
L128K = dict(B=1, Hq=64, Hkv=4, D=128, L=131072)
SHAPES = {  # label: (shape, pages in order)
    "128k sequence (as scored)": (L128K, False),
    "128k sequence, pages in order": (L128K, True),
    "2 x 64k, Hkv 4": (dict(B=2, Hq=64, Hkv=4, D=128, L=65536), False),
    "4 x 32k, Hkv 4": (dict(B=4, Hq=64, Hkv=4, D=128, L=32768), False),
    "64k, Hkv 8 (group 8)": (dict(B=1, Hq=64, Hkv=8, D=128, L=65536), False),
    "16 x 8k, Hkv 4 (static grid)": (dict(B=16, Hq=64, Hkv=4, D=128, L=8192), False),
    "llama3_70b (16 x 32k, Hkv 8)": (dict(B=16, Hq=64, Hkv=8, D=128, L=32768), False),
}
KNOBS = {  # label: module attributes set for the 128k sequence
    "as shipped": {},
    "8 warps": {"SPLIT_NUM_WARPS": 8},
    "chunks of 8 tiles": {"DYNAMIC_CHUNK_TILES": 8},
    "chunks of 16 tiles": {"DYNAMIC_CHUNK_TILES": 16},
    "8 warps, chunks of 8": {"SPLIT_NUM_WARPS": 8, "DYNAMIC_CHUNK_TILES": 8},
    "4 stages": {"SPLIT_NUM_STAGES": 4},
    "32-token tiles, 4 stages": {"TILE_N": 32, "SPLIT_NUM_STAGES": 4, "DYNAMIC_CHUNK_TILES": 8},
    "32-token tiles, 5 stages": {"TILE_N": 32, "SPLIT_NUM_STAGES": 5, "DYNAMIC_CHUNK_TILES": 8},
    "128-token tiles": {"TILE_N": 128, "DYNAMIC_CHUNK_TILES": 2},
}


@triton.jit
def _stream_kernel(k_ptr, v_ptr, bt_ptr, out_ptr, tokens_per_prog, stride_page, stride_tok,
                   HEAD_DIM: tl.constexpr, PAGE: tl.constexpr, TILE: tl.constexpr, HEADS: tl.constexpr,
                   SEPARATE: tl.constexpr, EVICT: tl.constexpr):
    """Sum HEADS adjacent KV heads' K and V over a slice of one sequence's tokens through its block table (the
    expert's loads, nothing else; its split kernel reads one head, HEADS = 1). A token's heads are contiguous, so
    a program reads runs of HEADS x HEAD_DIM elements; with SEPARATE (two heads) each head's [TILE, HEAD_DIM] is a
    load of its own, so the program reads the same bytes as in one run but no load instruction spans both heads.
    EVICT is the loads' L2 eviction policy ("" for the default)."""
    head0 = tl.program_id(0) * HEADS
    start = tl.program_id(1) * tokens_per_prog
    if SEPARATE:
        offs_d = tl.arange(0, HEAD_DIM)
        acc = tl.zeros([TILE, HEAD_DIM], dtype=tl.float32)
    else:
        offs_d = tl.arange(0, HEADS * HEAD_DIM)
        acc = tl.zeros([TILE, HEADS * HEAD_DIM], dtype=tl.float32)
    for tok0 in range(start, start + tokens_per_prog, TILE):
        offs_n = tok0 + tl.arange(0, TILE)
        page = tl.load(bt_ptr + offs_n // PAGE).to(tl.int64)
        off = page * stride_page + (offs_n % PAGE) * stride_tok + head0 * HEAD_DIM
        acc += tl.load(k_ptr + off[:, None] + offs_d[None, :], eviction_policy=EVICT).to(tl.float32)
        acc += tl.load(v_ptr + off[:, None] + offs_d[None, :], eviction_policy=EVICT).to(tl.float32)
        if SEPARATE:
            for h in tl.static_range(1, HEADS):
                acc += tl.load(k_ptr + off[:, None] + h * HEAD_DIM + offs_d[None, :], eviction_policy=EVICT)
                acc += tl.load(v_ptr + off[:, None] + h * HEAD_DIM + offs_d[None, :], eviction_policy=EVICT)
    tl.store(out_ptr + tl.program_id(1) * tl.num_programs(0) + tl.program_id(0), tl.sum(acc))


def inputs_for(ref, shape: dict, in_order: bool, seed: int = 7, device: str = "cuda") -> list:
    workload = SimpleNamespace(params=dict(B=shape["B"], Hq=shape["Hq"], Hkv=shape["Hkv"], D=shape["D"],
                                           page_size=16, L_min=shape["L"], L_max=shape["L"]), dtype="bfloat16")
    inputs = list(ref.make_inputs(workload, seed, device))
    if in_order:  # each row's live page ids sorted: the pages lie in the pool in the sequence's order
        table = inputs[3]
        live = table >= 0
        table[live] = torch.sort(table[live]).values
    return inputs


def kv_bytes(inputs) -> int:
    _, k_cache, _, _, seq_lens, _ = inputs
    return 2 * int(seq_lens.sum()) * k_cache.shape[2] * k_cache.shape[3] * k_cache.element_size()


def median_us(timer: Timer, fn, reps: int) -> float:
    times, _ = timer.time(lambda slot: fn(), lambda slot: None, [0], reps, warmup=3, graph=False)
    return statistics.median(times) * 1e3


def measured_copy_rate(timer: Timer, reps: int) -> float:
    """Bytes read and written per second by a 512 MB device-to-device copy."""
    src = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() / (median_us(timer, lambda: dst.copy_(src), reps) * 1e-6)


def scaled_error(got: torch.Tensor, want: torch.Tensor) -> float:
    rms = want.float().pow(2).mean().sqrt().item()
    return (got.float() - want.float()).abs().max().item() / rms


def split_occupancy(expert) -> int:
    """Programs per SM of the split kernel compiled since its cache was last cleared."""
    kernel = list(next(iter(expert._decode_split_kernel.device_caches.values()))[0].values())[-1]
    return programs_per_sm(kernel.n_regs, kernel.metadata.num_warps, kernel.metadata.shared)[0]


def stream_launch(inputs, table, out, heads: int, tokens: int, how: str = ""):
    """One case of the sum-only stream over `inputs`' sequence through `table`: its grid and a call of it. `how`:
    "" (eight warps, plain loads, 64-token rows of all `heads` at once), "evict_first", "separate" (each head its
    own load) or "expert's launch" (the split kernel's four warps and num_stages=3, 64-token tiles; Triton pipelines
    none of this kernel's loads, which feed no dot: plain loads, four programs an SM, ncu in owed-36)."""
    _, k_cache, v_cache, _, seq_lens, _ = inputs
    grid = (k_cache.shape[2] // heads, int(seq_lens[0]) // tokens)
    warps, stages = (4, 3) if how == "expert's launch" else (8, 1)
    tile = 64 if how in ("separate", "expert's launch") else 64 // heads
    return grid, lambda: _stream_kernel[grid](
        k_cache, v_cache, table, out, tokens, k_cache.stride(0), k_cache.stride(1),
        HEAD_DIM=k_cache.shape[3], PAGE=k_cache.shape[1], TILE=min(tile, tokens), HEADS=heads,
        SEPARATE=how == "separate", EVICT="evict_first" if how == "evict_first" else "",
        num_warps=warps, num_stages=stages)


def stream_rates(ref, inputs, ordered, timer: Timer, reps: int, report, more: bool = False) -> None:
    """The `stream` part: the sum-only kernel over the 128k sequence's pages, shuffled and in order, one KV head a
    program and (shuffled) two or four; each program the same bytes (a fixed number of head-tokens). With `more`
    (part `stream_more`) also: one head under evict_first, two and four heads each a load of its own, and one head
    at the expert's launch (four warps, three stages); and one and two heads over a sequence four times as long."""
    _, k_cache, _, table, _, _ = inputs
    out = torch.empty(4096, dtype=torch.float32, device="cuda")
    cases = [(1, "shuffled", table, ""), (1, "in order", ordered, ""), (2, "shuffled", table, ""),
             (4, "shuffled", table, "")]
    if more:  # how the one-head program's loads might reach the two-head rate (thirty-fifth session)
        cases += [(1, "shuffled", table, "evict_first"), (2, "shuffled", table, "separate"),
                  (4, "shuffled", table, "separate"), (1, "shuffled", table, "expert's launch")]
    for head_tokens in (256, 1024):
        for heads, order, bt, how in cases:
            tokens = head_tokens // heads
            grid, stream = stream_launch(inputs, bt, out, heads, tokens, how)
            label = f"sum only, pages {order}, {heads} head(s) x {tokens} tokens a program"
            report("stream", f"{label}{f', {how}' if how else ''} ({grid[0] * grid[1]} programs)",
                   median_us(timer, stream, reps), kv_bytes(inputs))
    if more:  # four times the bytes (one 512k-token sequence): is the one-head rate the run's, or the size's?
        big = inputs_for(ref, dict(L128K, L=4 * L128K["L"]), False)
        for heads in (1, 2):
            tokens = 1024 // heads
            grid, stream = stream_launch(big, big[3], out, heads, tokens)
            report("stream", f"sum only, a 512k-token sequence, {heads} head(s) x {tokens} tokens a program "
                   f"({grid[0] * grid[1]} programs)", median_us(timer, stream, reps), kv_bytes(big))
        del big, stream
        torch.cuda.empty_cache()
    whole = k_cache.numel() * k_cache.element_size()
    k_copy = torch.empty_like(k_cache)
    report("stream", "torch copy of the K pool (read + write)",
           median_us(timer, lambda: k_copy.copy_(k_cache), reps), 2 * whole)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--parts", default="shapes,knobs,stream", help="which questions, comma-separated")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    task = find_task(TASK)
    ref = load_module(task.reference_path, "diag_attn_ref")
    expert = load_module(task.expert_path, "diag_attn_expert")
    shipped = {name: getattr(expert, name) for knobs in KNOBS.values() for name in knobs}
    shipped["SPLIT_PROGRAMS_PER_SM"] = expert.SPLIT_PROGRAMS_PER_SM
    timer = Timer(torch.device("cuda"))
    copy_rate = measured_copy_rate(timer, args.reps)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"copy {copy_rate / 1e12:.2f} TB/s (512 MB, read + write)\n")
    records = []

    def report(part: str, label: str, us: float, nbytes: int, **extra) -> None:
        rate = nbytes / (us * 1e-6)
        records.append(dict(part=part, label=label, us=us, tb_s=rate / 1e12, of_copy=rate / copy_rate, **extra))
        more = "".join(f" | {k}={v:.3g}" if isinstance(v, float) else f" | {k}={v}" for k, v in extra.items())
        print(f"| {part} | {label} | {us:.1f} us | {rate / 1e12:.2f} TB/s | {rate / copy_rate:.1%}{more}", flush=True)

    print("| part | case | time | K+V rate | of copy | more |\n|---|---|---|---|---|---|")
    for label, (shape, in_order) in SHAPES.items() if "shapes" in parts else ():
        inputs = inputs_for(ref, shape, in_order)
        error = scaled_error(expert.run(*inputs), ref.reference(*inputs))
        report("shapes", label, median_us(timer, lambda inputs=inputs: expert.run(*inputs), args.reps),
               kv_bytes(inputs), error=error)
        del inputs
        torch.cuda.empty_cache()

    inputs = inputs_for(ref, L128K, False)
    want = ref.reference(*inputs) if "knobs" in parts else None
    for label, knobs in KNOBS.items() if "knobs" in parts else ():
        for name, value in shipped.items():
            setattr(expert, name, value)
        for name, value in knobs.items():
            setattr(expert, name, value)
        expert._decode_split_kernel.device_caches.clear()  # its one compiled kernel: this setting's
        try:
            expert.run(*inputs)  # compiles; the dynamic wave is then sized to what it compiled to
            per_sm = split_occupancy(expert)
            expert.SPLIT_PROGRAMS_PER_SM = per_sm
            error = scaled_error(expert.run(*inputs), want)
            us = median_us(timer, lambda: expert.run(*inputs), args.reps)
        except Exception as exc:  # noqa: BLE001 - a setting that does not compile or fit is reported, not fatal
            print(f"| knobs | {label} | failed: {type(exc).__name__}: {str(exc)[:160]} |", flush=True)
            continue
        report("knobs", label, us, kv_bytes(inputs), programs_per_sm=per_sm, error=error)

    if "ncu_stream" in parts:
        _, stream = stream_launch(inputs, inputs[3], torch.empty(4096, dtype=torch.float32, device="cuda"), 1, 256,
                                  "expert's launch")
        for _ in range(3):
            stream()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        stream()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    if parts & {"stream", "stream_more"}:
        stream_rates(ref, inputs, inputs_for(ref, L128K, True)[3], timer, args.reps, report, "stream_more" in parts)
    if args.json:
        args.json.write_text(json.dumps(dict(copy_rate=copy_rate, gpu=torch.cuda.get_device_name(),
                                             torch=torch.__version__, triton=triton.__version__,
                                             records=records), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
