"""Does an L2 flush that writes (a zero_ of a buffer larger than L2) charge the next timed call for writing back the
dirty lines it leaves? Times the 128k sequence's expert, a read-only stream of its K and V, and copies with the
evaluator's Timer after three flushes of its buffer: none, a write (zero_, the Timer's flush until the twenty-third
session) and the Timer's own flush, a read, which leaves clean lines.

    PYTHONPATH=src python3 bench/diag/flush_dirty.py

(bench/results/2026-12-05-h100-owed-23 call3 was made by this script's first version, which timed with its own
event loop and a 1 ms GPU sleep in front of each call instead of the Timer's 200 us head start.)
"""
import sys

import torch
import triton
from attn_one_wave import L128K, _stream_kernel, inputs_for, kv_bytes, median_us

from d2kbench.evaluate.timing import L2_FLUSH_BYTES, Timer
from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task

REPS = 40


def main() -> int:
    task = find_task("attn_decode_paged_gqa")
    ref = load_module(task.reference_path, "fd_ref")
    expert = load_module(task.expert_path, "fd_expert")
    timer = Timer(torch.device("cuda"))
    flushes = {"none": lambda: None, "write (zero_)": timer.flush_buffer.zero_, "read (the Timer's)": timer.flush}
    inputs = inputs_for(ref, L128K, False)
    q, k, v, table, seq_lens, _ = inputs
    out = torch.empty(4096, dtype=torch.float32, device="cuda")
    grid = (k.shape[2], int(seq_lens[0]) // 256)
    src = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    calls = {
        "expert, 128k sequence": (lambda: expert.run(*inputs), kv_bytes(inputs)),
        "stream, 128k pages": (lambda: _stream_kernel[grid](k, v, table, out, 256, k.stride(0), k.stride(1),
                                                            HEAD_DIM=128, PAGE=16, TILE=64, num_warps=8,
                                                            num_stages=1), kv_bytes(inputs)),
        "copy 512 MB": (lambda: dst.copy_(src), 2 * src.numel()),
        "copy 64 MB": (lambda: dst[:2**26].copy_(src[:2**26]), 2 * 2**26),
    }
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
          f"flush buffer {L2_FLUSH_BYTES >> 20} MB\n\n| call | flush | us | TB/s |\n|---|---|---|---|")
    for label, (fn, nbytes) in calls.items():
        for name, flush in flushes.items():
            timer.flush = flush  # this timer's flush, for its batch
            us = median_us(timer, fn, REPS)
            print(f"| {label} | {name} | {us:.1f} | {nbytes / us / 1e6:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
