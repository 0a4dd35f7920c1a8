"""Does the Timer's L2 flush (a zero_ of a buffer larger than L2) charge the next timed call for writing back the
dirty lines it leaves? Times the 128k sequence's expert, a read-only stream of its K and V, and a 512 MB copy after
three flushes: none, the write (zero_, as the Timer does), and a read of the same buffer (which leaves clean lines).

    PYTHONPATH=src python3 bench/diag/flush_dirty.py
"""
import statistics
import sys

import torch
import triton
from attn_one_wave import L128K, _stream_kernel, inputs_for, kv_bytes

from d2kbench.evaluate.timing import L2_FLUSH_BYTES
from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task


def main() -> int:
    task = find_task("attn_decode_paged_gqa")
    ref = load_module(task.reference_path, "fd_ref")
    expert = load_module(task.expert_path, "fd_expert")
    buf = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    sink = torch.empty((), dtype=torch.int32, device="cuda")
    flushes = {"none": lambda: None, "write (zero_)": buf.zero_,
               "read (amax)": lambda: torch.amax(buf, dim=0, out=sink)}
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
        for _ in range(3):
            fn()
        for name, flush in flushes.items():
            times = []
            for _ in range(40):
                flush()
                torch.cuda._sleep(2_000_000)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b) * 1e3)
            us = statistics.median(times)
            print(f"| {label} | {name} | {us:.1f} | {nbytes / us / 1e6:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
