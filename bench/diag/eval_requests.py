"""Where a warm evaluation's seconds go, request by request.

    PYTHONPATH=src python3 bench/diag/eval_requests.py [--task muon_newton_schulz] [--top 30]

`bench/evaluator_stability.py` sums the requests' seconds by kind (muon's `candidate.call.run` 5-7 s over 16
checked calls whose GPU work is about 130 ms: bench/results/2026-12-04-h200-owed-19 call3). This wraps the
parent's `WorkerProcess.request` to keep every request (op, function, slot, seconds, the worker's own stages) and
`Evaluation.compare` to keep the parent's comparisons (workload, input set, seconds), runs the expert as a
candidate three times (cold, then warm with prestarted workers, as an agent's run does) and prints the last
evaluation's requests, slowest first, with the slot (workload and input set) of each.
"""

from __future__ import annotations

import argparse
import time

from d2kbench.evaluate import workers
from d2kbench.evaluate.evaluator import EvalOptions, Evaluation, evaluate
from d2kbench.suite import find_task

LOG: list[dict] = []
T0 = [0.0]  # the current evaluation's start (perf_counter)


def logged(original):
    def request(self, message, timeout):
        start = time.perf_counter()
        reply = None
        try:
            reply = original(self, message, timeout)
            return reply
        finally:
            stages = (reply or {}).get("stages_s") if isinstance(reply, dict) else None
            LOG.append({"worker": getattr(self, "role", "?"), "op": message.get("op"), "fn": message.get("fn"),
                        "slot": message.get("slot"), "at": start - T0[0], "s": time.perf_counter() - start,
                        "stages": stages or {}})
    return request


def logged_compare(original):
    """The parent's own comparisons, logged as requests of worker "parent" (moe's custom check took 6-8 s of a warm
    evaluation in bench/results/2026-12-04-h200-owed-19 call6, 0.1-0.4 s before)."""
    def compare(self, workload, expected_set, outputs, after, strides):
        start = time.perf_counter()
        try:
            return original(self, workload, expected_set, outputs, after, strides)
        finally:
            LOG.append({"worker": "parent", "op": "compare", "fn": workload.name, "slot": expected_set,
                        "at": start - T0[0], "s": time.perf_counter() - start, "stages": {}})
    return compare


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="muon_newton_schulz")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--device", default="auto", help="cpu: the interpreter on the cpu workloads (a smoke run)")
    args = parser.parse_args()
    workers.WorkerProcess.request = logged(workers.WorkerProcess.request)
    Evaluation.compare = logged_compare(Evaluation.compare)
    task = find_task(args.task)
    options = EvalOptions(prestart=True, device=args.device)
    for i in range(3):
        LOG.clear()
        start = T0[0] = time.perf_counter()
        result = evaluate(task, task.expert_path, options)
        phases = ", ".join(f"{k} {v:.1f}" for k, v in result.phases_s.items())
        print(f"evaluation {i}: {result.verdict}, {time.perf_counter() - start:.1f} s ({phases}); "
              f"{len(LOG)} requests, {sum(r['s'] for r in LOG):.1f} s in them", flush=True)
        for f in result.failures:
            print(f"    {f.line()}", flush=True)
    print("| worker | op | fn | slot | at s | s | worker's stages (s) |")
    print("|---|---|---|---|---|---|---|")
    for r in sorted(LOG, key=lambda r: -r["s"])[: args.top]:
        stages = ", ".join(f"{k} {v:.3f}" for k, v in sorted(r["stages"].items(), key=lambda kv: -kv[1]))
        print(f"| {r['worker']} | {r['op']} | {r['fn']} | {r['slot']} | {r['at']:.2f} | {r['s']:.3f} | {stages} |")


if __name__ == "__main__":
    main()
