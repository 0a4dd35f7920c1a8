"""The evaluator's own targets (issue 3), on the GPU: each expert evaluated as a candidate N times.

    PYTHONPATH=src python3 bench/evaluator_stability.py [--tasks a,b] [--repeats 10] [--json FILE]

Per task it reports the wall time of one full evaluation (correctness and timing over the scored
workloads, warm compile cache: the first evaluation warms it and is reported apart), the verdicts
(an expert timed against itself must never get an integrity verdict), per workload the range of
the fraction of expert (target 1.00 +- 0.03) and the spread of the speedup over the reference
between evaluations (target within 2% where the kernel takes 50 us or more).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

from d2kbench.evaluate.evaluator import EvalOptions, evaluate
from d2kbench.suite import find_task, load_suite

TARGET_SECONDS = 20.0
FRACTION_BAND = 0.03
SPEEDUP_SPREAD = 0.02
SPREAD_MIN_US = 50.0


def first_calls(calls: dict[str, list[dict[str, float]]]) -> str:
    """Per function, the largest over the rounds of its first call on the fresh set (the batch's first timed call)
    over the batch's other calls: honest ones stay near 1 (bench/results/2026-12-04-h200-owed-14, -sweep-16)."""
    worst = {fn: max(r["fresh_ms"] / r["rest_ms"] for r in rounds) for fn, rounds in calls.items() if rounds}
    return "first calls on the fresh set / the rest, worst round: " + ", ".join(
        f"{fn} {fresh:.2f}" for fn, fresh in worst.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-sandbox", action="store_true",
                        help="candidate's worker unconfined (a diagnosis: does the sandbox change its times?)")
    parser.add_argument("--file-outputs", action="store_true",
                        help="results to the parent through spool files (EvalOptions.device_outputs off)")
    parser.add_argument("--rounds", type=int, default=EvalOptions.rounds,
                        help="timing rounds, each function's batches once per round (EvalOptions.rounds)")
    parser.add_argument("--batch-ms", type=float, default=EvalOptions.batch_ms,
                        help="target length of one timed batch (EvalOptions.batch_ms)")
    parser.add_argument("--prestart", action="store_true",
                        help="each evaluation starts the next one's workers (EvalOptions.prestart, as agent runs do)")
    parser.add_argument("--file-inputs", action="store_true",
                        help="input sets to the candidate through spool files (EvalOptions.device_inputs off)")
    args = parser.parse_args()
    tasks = [find_task(t) for t in args.tasks.split(",")] if args.tasks else list(load_suite())
    report, ok = [], True
    for task in tasks:
        runs = []
        options = EvalOptions(sandbox=not args.no_sandbox, device_outputs=not args.file_outputs,
                              device_inputs=not args.file_inputs, prestart=args.prestart, batch_ms=args.batch_ms,
                              rounds=args.rounds)
        for i in range(args.repeats + 1):  # one line per evaluation as it ends: a run cut short still reports
            r = evaluate(task, task.expert_path, options)
            runs.append(r)
            phases = ", ".join(f"{k} {v:.1f}" for k, v in r.phases_s.items())
            fractions = ", ".join(f"{w.name} {w.fraction_of_expert:.3f}" for w in r.workloads
                                  if w.fraction_of_expert is not None)
            print(f"{task.id} evaluation {i} ({'cold' if i == 0 else 'warm'}): {r.verdict}, {r.elapsed_s:.1f} s "
                  f"({phases}); fraction of expert: {fractions}", flush=True)
            print(f"    device outputs: {r.environment.get('device_outputs')}; compile cache files: "
                  f"{r.environment.get('compile_cache_files')}", flush=True)
            for f in r.failures:  # why an evaluation did not pass, as the result says it
                print(f"    {f.line()}", flush=True)
            costly = sorted(r.requests_s.items(), key=lambda kv: -kv[1])[:24]
            print("    requests: " + ", ".join(f"{k} {v:.1f}" for k, v in costly), flush=True)
            for w in r.workloads:  # candidate vs expert medians, events and graph replays, in us
                t = {fn: w.timings[fn] for fn in ("candidate", "expert") if fn in w.timings}
                if len(t) == 2 and "reference" in w.timings:
                    graph = [x.graph_median_ms for x in t.values()]
                    shown = " graph {:.2f} vs {:.2f}".format(*(g * 1e3 for g in graph)) if all(graph) else ""
                    unaccounted = ", ".join(f"{fn} {ms * 1e3:.0f}" for fn, ms in w.unaccounted_ms.items())
                    ref = w.timings["reference"]
                    print(f"    {w.name}: events {t['candidate'].median_ms * 1e3:.2f} vs "
                          f"{t['expert'].median_ms * 1e3:.2f}{shown} (reference {ref.median_ms * 1e3:.1f}, "
                          f"{ref.min_ms * 1e3:.1f}-{ref.max_ms * 1e3:.1f}); unaccounted us per call: {unaccounted}; "
                          f"fresh-set slowdown {w.fresh_slowdown}; {first_calls(w.fresh_calls)}"
                          + (f"; replay-set slowdown {w.replay_fresh_slowdown}" if w.replay_fresh_slowdown else ""),
                          flush=True)
        warm = runs[1:]
        verdicts = Counter(f"{r.verdict}/{r.reason}" if r.reason else r.verdict for r in warm)
        fractions, speedups, times_us = defaultdict(list), defaultdict(list), defaultdict(list)
        for r in warm:
            for w in r.workloads:
                if w.fraction_of_expert is not None:
                    fractions[w.name].append(w.fraction_of_expert)
                    speedups[w.name].append(w.speedup)
                    times_us[w.name].append(w.timings["candidate"].median_ms * 1e3)
        slowest = max(r.elapsed_s for r in warm)
        task_ok = slowest <= TARGET_SECONDS and set(verdicts) == {"pass"}
        print(f"\n## {task.id}: {args.repeats} warm evaluations, slowest {slowest:.1f} s (first, cold: "
              f"{runs[0].elapsed_s:.1f} s); verdicts {dict(verdicts)}")
        print("| workload | candidate us | fraction of expert min-max | speedup spread | targets |")
        print("|---|---|---|---|---|")
        for name, values in fractions.items():
            spread = max(speedups[name]) / min(speedups[name]) - 1
            us = sorted(times_us[name])[len(times_us[name]) // 2]
            in_band = all(abs(v - 1) <= FRACTION_BAND for v in values)
            stable = us < SPREAD_MIN_US or spread <= SPEEDUP_SPREAD
            task_ok &= in_band and stable
            print(f"| {name} | {us:.1f} | {min(values):.3f}-{max(values):.3f} | {spread:.1%} | "
                  f"{'ok' if in_band and stable else 'MISSED'} |")
        ok &= task_ok
        report.append({"task": task.id, "elapsed_s": [r.elapsed_s for r in runs], "verdicts": dict(verdicts),
                       "fractions": fractions, "speedups": speedups, "candidate_us": times_us, "met": task_ok,
                       # every evaluation's raw first calls on the fresh sets, cold one included (input_cache's data)
                       "fresh_calls": {w.name: [next(x for x in r.workloads if x.name == w.name).fresh_calls
                                                for r in runs] for w in runs[0].workloads},
                       # ...and first graph replays on the replay sets (latency-bound workloads, judged there)
                       "fresh_replays": {w.name: [next(x for x in r.workloads if x.name == w.name).fresh_replays
                                                  for r in runs] for w in runs[0].workloads}})
        if args.json:  # after each task: a run cut short keeps the tasks it finished
            args.json.write_text(json.dumps(report, indent=1))
    print(f"\nall targets met: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
