"""Why one kernel times differently in two processes: attention's B=1 expert took a median of 154 us in the
trusted worker and 107 us in the candidate's within one evaluation (bench/results/2026-12-03-h200-owed).

    PYTHONPATH=src python3 bench/diag/b1_spread.py [--workload qwen3_235b_a22b_b1_l128k] [--reps 400]

In one process, with the evaluator's own Timer (L2 flushed before each call, CUDA events), it times the expert
on: the inputs as make_inputs left them (as the trusted worker holds them), a device clone, and a copy through
the host (as the candidate's worker receives them). For each it also times the host side of one call (the
launches alone, the GPU idle) and the same calls with a 200 us GPU sleep queued before the start event, which
hides the host's launch time: if only the sleep variant is fast and steady, the spread is the host's launch
time leaking into the event time (the 256 MB flush gives the host about 80 us of head start).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from d2kbench.evaluate.timing import Timer
from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task


def times(timer: Timer, run, inputs, reps: int, sleep_cycles: int) -> list[float]:
    """Event times (ms) of `reps` calls, L2 flushed before each, with an optional GPU sleep before the start."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        timer.flush()
        if sleep_cycles:
            torch.cuda._sleep(sleep_cycles)
        starts[i].record()
        run(*inputs)
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]


def host_us(run, inputs, reps: int) -> list[float]:
    """Wall time of the launches alone (the GPU idle before each call)."""
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        run(*inputs)
        out.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return out


def summary(values: list[float], scale: float = 1.0) -> str:
    v = sorted(x * scale for x in values)
    return f"median {statistics.median(v):7.1f}  p10 {v[len(v) // 10]:7.1f}  p90 {v[9 * len(v) // 10]:7.1f}  " \
           f"min {v[0]:7.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workload", default="qwen3_235b_a22b_b1_l128k")
    parser.add_argument("--reps", type=int, default=400)
    args = parser.parse_args()
    task = find_task("attn_decode_paged_gqa")
    ref = load_module(task.reference_path, "ref")
    expert = load_module(task.expert_path, "expert").run
    timer = Timer(torch.device("cuda"))
    made = ref.make_inputs(task.workload(args.workload), 1, "cuda")

    def each(fn):
        return [fn(v) if isinstance(v, torch.Tensor) else v for v in made]

    variants = {
        "as made (trusted worker)": made,
        "device clone": each(lambda v: v.clone()),
        "through the host (candidate)": each(lambda v: v.cpu().to("cuda")),
    }
    cycles = int(200e-6 * torch.cuda.get_device_properties(0).clock_rate * 1e3)  # clock_rate is in kHz
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__}; {args.workload}, {args.reps} calls each, us")
    for _ in range(2):  # twice: the first pass pays for compiles and first-use costs
        for name, inputs in variants.items():
            expert(*inputs)
            print(f"{name:30s} events        {summary(times(timer, expert, inputs, args.reps, 0), 1e3)}")
            print(f"{'':30s} events + sleep {summary(times(timer, expert, inputs, args.reps, cycles), 1e3)}")
            print(f"{'':30s} host launches  {summary(host_us(expert, inputs, args.reps))}")
        print()


if __name__ == "__main__":
    main()
