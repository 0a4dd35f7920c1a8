"""How far is a latency-bound workload from the floor of any kernel doing its memory traffic? Issue 3 asks quant's
expert to be faster than the compiled comparator on M=8 (a 4-5 us graph replay), where both may sit at that floor.

    PYTHONPATH=src python3 bench/diag/latency_floor.py [--task quant_per_token_group_fp8] [--workload dsv3_m8_k7168_row]

Times with the evaluator's Timer (L2 flushed before each call, CUDA graph replays timed inside the graph), in
balanced rounds: an empty kernel of one program (the launch alone); kernels of a few grids (`--programs`, the
expert's 448 for M=8 among them) that read their share of the first input and write about as many bytes as the
task's outputs, one load and one dependent store with no arithmetic between (the traffic's floor at that grid; one
warp per 128 elements a program, at most eight); the expert; the comparator in the configuration the harness's
timing keeps (`inductor_picks`). Prints one Markdown table of medians and round ranges (us).
"""

from __future__ import annotations

import argparse
import statistics

import torch
import triton
import triton.language as tl

from d2kbench.evaluate import inductor_picks
from d2kbench.evaluate.timing import Timer
from d2kbench.evaluate.timing_phase import balanced_orders
from d2kbench.evaluate.worker import as_tuple, load_module
from d2kbench.suite import find_task


@triton.jit
def _empty_kernel(x_ptr):
    pass


@triton.jit
def _pass_through_kernel(x_ptr, out_ptr, n_in, n_out, IN_BLOCK: tl.constexpr, OUT_BLOCK: tl.constexpr):
    # Each program reads its IN_BLOCK elements and writes OUT_BLOCK bytes that depend on them (one load, one store:
    # no reduction), so that the store waits on the load as the task's does.
    pid = tl.program_id(0)
    offs = pid * IN_BLOCK + tl.arange(0, IN_BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n_in)
    y = tl.reshape(x.to(tl.int8, bitcast=False), [OUT_BLOCK, IN_BLOCK // OUT_BLOCK]).max(axis=1)
    outs = pid * OUT_BLOCK + tl.arange(0, OUT_BLOCK)
    tl.store(out_ptr + outs, y, mask=outs < n_out)


def time_us(timer: Timer, fn, reps: int) -> float:
    times, _ = timer.time(lambda _slot: fn(), lambda _slot: None, [0], reps, warmup=5, graph=True)
    return statistics.median(times) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="quant_per_token_group_fp8")
    parser.add_argument("--workload", default="dsv3_m8_k7168_row")
    parser.add_argument("--programs", default="56,112,224,448,896",
                        help="the pass-through kernels' grids (the expert's on M=8: 448)")
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()

    task = find_task(args.task)
    ref = load_module(task.reference_path, "floor_ref")
    expert = load_module(task.expert_path, "floor_expert")
    inputs = list(ref.make_inputs(task.workload(args.workload), 7, "cuda"))
    outputs = as_tuple(expert.run(*inputs))
    x = inputs[0].reshape(-1)
    out_bytes = sum(o.numel() * o.element_size() for o in outputs)
    out = torch.empty(out_bytes, dtype=torch.int8, device="cuda")

    def pass_through(programs: int):
        in_block = triton.next_power_of_2(-(-x.numel() // programs))
        out_block = max(1, min(in_block, triton.next_power_of_2(-(-out_bytes // programs))))
        warps = max(1, min(8, in_block // 128))
        return (f"pass-through, {programs} programs of {warps} warps", lambda: _pass_through_kernel[(programs,)](
            x, out, x.numel(), out_bytes, IN_BLOCK=in_block, OUT_BLOCK=out_block, num_warps=warps))

    timer = Timer(torch.device("cuda"))

    with inductor_picks.recording() as tuned:
        prepared = ref.comparator_prepare(*inputs)
        ref.comparator(*prepared)
    picks = inductor_picks.retune(tuned, lambda: time_us(timer, lambda: ref.comparator(*prepared), args.reps) / 1e3)
    entries = [
        ("empty kernel, 1 program", lambda: _empty_kernel[(1,)](x)),
        *(pass_through(int(p)) for p in args.programs.split(",")),
        ("expert", lambda: expert.run(*inputs)),
        ("comparator (" + "; ".join(p.kept for p in picks) + ")", lambda: ref.comparator(*prepared)),
    ]
    per_round: dict[str, list[float]] = {label: [] for label, _ in entries}
    for order in balanced_orders(entries, args.rounds):
        for label, fn in order:
            per_round[label].append(time_us(timer, fn, args.reps))
    print(f"# latency floor: {args.task} {args.workload}, {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"triton {triton.__version__}; {x.numel() * x.element_size()} B in, {out_bytes} B out\n\n"
          "| kernel | us (median of rounds) | rounds |\n|---|---|---|")
    for label, times in per_round.items():
        print(f"| {label} | {statistics.median(times):.2f} | {min(times):.2f}-{max(times):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
