"""Is muon's batch in passes of a few matrices (BATCH_CHUNK) slow on the GPU, or in the host's launches?

    PYTHONPATH=src python3 bench/diag/muon_launch_cost.py [--chunks None,8,12,16] [--reps 20]

The sweep (bench/results/2026-12-04-h200-owed-19 call1) timed passes of 8 matrices at 9.5 ms against 5.0 ms for
the whole batch in one pass. For each pass size this prints, on the qwen3 batch workload: the host time of one
call (its launches issued behind a GPU sleep, so the GPU never waits for them and never blocks them), the event
time of a call (L2 flushed before it, as the evaluator times), and the replay time of the same call captured in a
CUDA graph (no host launches at all: the GPU's own time). If the replays of small passes are much faster than one
pass over the batch, the square state kept in L2 pays and the host's launches are what cost; if not, it does not.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from d2kbench.evaluate.timing import Timer
from d2kbench.evaluate.worker import load_module
from d2kbench.suite import find_task

WORKLOAD = "qwen3_30b_a3b_experts_128x768x2048"


def event_ms(fn, reps: int, flush=None) -> float:
    """Median event time of `reps` calls of fn, flush() (if any) before each."""
    out = []
    for _ in range(reps):
        if flush:
            flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return statistics.median(out)


def host_ms(fn, reps: int) -> float:
    """Median host time of issuing fn's launches, each call behind a 50 ms GPU sleep."""
    out = []
    for _ in range(reps):
        torch.cuda._sleep(50_000_000)
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
    return statistics.median(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", default="None,8,12,16")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    task = find_task("muon_newton_schulz")
    expert = load_module(task.expert_path, "muon_expert")
    ref = load_module(task.reference_path, "muon_reference")
    (G,) = ref.make_inputs(task.workload(WORKLOAD), 7, "cuda")
    flush = Timer(torch.device("cuda")).flush
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {__import__('triton').__version__}")
    print("| BATCH_CHUNK | host ms per call | events ms (L2 flushed) | graph replay ms |")
    print("|---|---|---|---|")
    for text in args.chunks.split(","):
        expert.BATCH_CHUNK = None if text == "None" else int(text)
        fn = lambda: expert.run(G)  # noqa: E731
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        host = host_ms(fn, args.reps)
        events = event_ms(fn, args.reps, flush)
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()
            with torch.cuda.graph(graph, stream=stream):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        replay = event_ms(graph.replay, args.reps, flush)
        print(f"| {text} | {host:.2f} | {events:.2f} | {replay:.2f} |", flush=True)
        del graph


if __name__ == "__main__":
    main()
