"""Does an idle GPU before a timed batch slow a compute-bound kernel? The evaluator's batches follow gaps (the
other worker's batch, the host's messages), each batch warmed by about 10 ms of calls; the sweep times one
function back to back. Muon's expert measured 4.80-4.91 ms on 4096x14336 in the evaluator and 4.42 ms in the
sweep of the same session (bench/results/2026-12-04-h200-owed-15).

    PYTHONPATH=src python3 bench/diag/idle_gap.py [--task muon_newton_schulz] [--workload NAME] [--rounds 6]

In this one process, for the expert and the reference on one workload: batches of `--reps` timed calls with the
evaluator's Timer, each after an idle gap of 0, 5, 50 or 500 ms and a warm-up of 1 call or of 200 ms of calls,
the settings in a shuffled order each round. Prints the median per setting and the SM clock (nvidia-smi, sampled
in the background every 20 ms) seen during each setting's timed calls.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import threading
import time

import torch

from d2kbench.evaluate.timing import Timer
from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task

GAPS_MS = (0, 5, 50, 500)
WARMUPS = ("1 call", "200 ms")


class ClockSampler:
    """nvidia-smi's SM clock every 20 ms, with the host's time of each sample."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int]] = []
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-lms", "20"],
            stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self.read, daemon=True).start()

    def read(self) -> None:
        for line in self.proc.stdout:
            if line.strip().isdigit():
                self.samples.append((time.perf_counter(), int(line)))

    def between(self, start: float, end: float) -> list[int]:
        return [mhz for t, mhz in self.samples if start <= t <= end]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", default="muon_newton_schulz")
    parser.add_argument("--workload", default="llama3_8b_down_4096x14336")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    task = find_task(args.task)
    ref = load_module(task.reference_path, "gap_ref")
    expert = load_module(task.expert_path, "gap_expert")
    inputs = ref.make_inputs(task.workload(args.workload), 7, "cuda")
    fns = {"expert": expert.run, "reference": ref.reference}
    timer = Timer(torch.device("cuda"))
    sampler = ClockSampler()
    for fn in fns.values():
        fn(*inputs)
    torch.cuda.synchronize()
    settings = [(name, gap, warm) for name in fns for gap in GAPS_MS for warm in WARMUPS]
    times: dict[tuple, list[float]] = {s: [] for s in settings}
    clocks: dict[tuple, list[int]] = {s: [] for s in settings}
    for _ in range(args.rounds):
        random.shuffle(settings)
        for name, gap, warm in settings:
            fn = fns[name]
            time.sleep(gap / 1e3)
            warmup = 1
            if warm == "200 ms":
                start = time.perf_counter()
                while time.perf_counter() - start < 0.2:
                    fn(*inputs)
                    torch.cuda.synchronize()
                warmup = 0
            start = time.perf_counter()
            got, _ = timer.time(lambda _slot, f=fn: f(*inputs), lambda _slot: None, [0], args.reps, warmup, False)
            end = time.perf_counter()
            times[(name, gap, warm)].extend(got)
            clocks[(name, gap, warm)].extend(sampler.between(start, end))
    sampler.proc.terminate()
    print(f"# {task.id} {args.workload}: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"{args.rounds} rounds x {args.reps} calls per setting")
    print("| function | idle gap ms | warm-up | median us | min us | SM MHz median (min-max) |")
    print("|---|---|---|---|---|---|")
    for key in sorted(times):
        name, gap, warm = key
        mhz = clocks[key]
        clock = f"{statistics.median(mhz):.0f} ({min(mhz)}-{max(mhz)})" if mhz else "-"
        print(f"| {name} | {gap} | {warm} | {statistics.median(times[key]) * 1e3:.1f} | "
              f"{min(times[key]) * 1e3:.1f} | {clock} |")


if __name__ == "__main__":
    main()
