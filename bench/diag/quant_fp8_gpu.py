"""Diagnose quant_per_token_group_fp8 on the GPU: who differs from an exact CPU computation, and host vs device time.

Run on the GPU machine: `PYTHONPATH=src python3 bench/diag/quant_fp8_gpu.py`. For each workload it compares the
expert's codes and scales and torch's (the reference on float32 inputs) with an exact CPU computation (float64
division rounded once to float32, torch's CPU float->e4m3 cast), prints the mismatch counts and a few examples, and
times the expert eagerly and by CUDA graph replay (CUDA events, no L2 flush: small workloads only matter here).
"""

import sys

import torch
import triton

from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task


def exact(x, group, column_major, ue8m0):
    """Correctly rounded scales and codes, computed on the CPU in float64."""
    M, K = x.shape
    xg = x.double().cpu().view(M, K // group, group)
    amax = xg.abs().amax(-1, keepdim=True).clamp(min=1e-10)
    s = (amax / 448.0).float()  # one rounding of the exact quotient (float64 quotient is exact enough here)
    if ue8m0:
        s = torch.exp2(torch.ceil(torch.log2(s.double()))).float()
    y = (xg / s.double()).float().clamp(-448, 448)
    return y.to(torch.float8_e4m3fn).view(M, K), s.view(M, K // group)


def order(codes):
    b = codes.view(torch.uint8).to(torch.int32)
    mag = b & 0x7F
    return torch.where(b >= 128, -mag, mag)


def main():
    task = find_task("quant_per_token_group_fp8")
    ref = load_module(task.reference_path, "ref")
    expert = load_module(task.expert_path, "expert")
    print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())
    names = sys.argv[1:] or [w.name for w in task.workloads if w.split in ("scored", "hidden")]
    for name in names:
        w = task.workload(name)
        x, group, col, ue8m0 = ref.make_inputs(w, 1234, "cuda")
        q_e, s_e = expert.run(x, group, col, ue8m0)
        q_t, s_t = ref.reference(x.float(), group, col, ue8m0)
        q_x, s_x = exact(x, group, col, ue8m0)
        torch.cuda.synchronize()
        q_e, s_e, q_t, s_t = q_e.cpu(), s_e.cpu(), q_t.cpu(), s_t.cpu()
        n = q_x.numel()

        def diff(a, b):
            return int((a.view(torch.uint8) != b.view(torch.uint8)).sum())

        print(f"\n{name} M={x.shape[0]} K={x.shape[1]} {w.dtype}: codes differing of {n}: "
              f"expert-exact {diff(q_e, q_x)}, torch-exact {diff(q_t, q_x)}, expert-torch {diff(q_e, q_t)}; "
              f"scales differing: expert-exact {int((s_e != s_x).sum())}, torch-exact {int((s_t != s_x).sum())}")
        bad = (q_t.view(torch.uint8) != q_x.view(torch.uint8)).nonzero()[:4]
        bad_e = (q_e.view(torch.uint8) != q_x.view(torch.uint8)).nonzero()[:4]
        for label, rows in (("torch", bad), ("expert", bad_e)):
            for r, c in rows.tolist():
                g = c // group
                sx = s_x[r, g].item()
                print(f"  {label} wrong at ({r},{c}): x={x[r, c].item()!r} exact s={sx!r} y={x[r, c].item() / sx!r} "
                      f"exact={q_x[r, c].float().item()} torch={q_t[r, c].float().item()} "
                      f"expert={q_e[r, c].float().item()} torch s={s_t[r, g].item()!r} expert s={s_e[r, g].item()!r}")
        if x.numel() > 1 << 22:
            continue
        # host-bound vs device time of the expert on this small workload
        for _ in range(20):
            expert.run(x, group, col, ue8m0)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(200):
            expert.run(x, group, col, ue8m0)
        end.record()
        torch.cuda.synchronize()
        eager_us = start.elapsed_time(end) / 200 * 1e3
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            expert.run(x, group, col, ue8m0)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            expert.run(x, group, col, ue8m0)
        start.record()
        for _ in range(200):
            g.replay()
        end.record()
        torch.cuda.synchronize()
        graph_us = start.elapsed_time(end) / 200 * 1e3
        print(f"  expert back-to-back: eager {eager_us:.1f} us/call, graph replay {graph_us:.1f} us/call")


if __name__ == "__main__":
    main()
