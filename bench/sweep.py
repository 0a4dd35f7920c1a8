"""Sweep an expert's tuning knobs on the GPU: each variant checked against the oracle, then timed.

Run on the GPU machine from the repository root:

    PYTHONPATH=src python3 bench/sweep.py TASK [--workloads a,b] [--set NAME=v1,v2 ...] [--reps N] [--seeds 7,8]

Every `--set` names a module-level constant of the task's `expert.py` and the values to try; the
sweep runs the cross product (the expert's own values first, as "as shipped"). Per scored workload
it times the reference and the comparator once, then every variant: each variant's outputs are
compared with the oracle's under the task's tolerances before it is timed, and a wrong variant is
reported, never timed. Timing is the evaluator's own Timer (CUDA events, L2 flushed between calls,
median; CUDA graph replay for latency-bound workloads). With several `--seeds` every workload is
drawn and timed once per seed in this one process (a seed repeated draws fresh tensors again), which
tells an input effect from a process or clock effect. Prints one Markdown table and, with --json,
writes every number to a file.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

import torch
import triton

from d2kbench.evaluate.compare import compare_output
from d2kbench.evaluate.hardware import environment
from d2kbench.evaluate.timing import Timer, measure_ceilings
from d2kbench.evaluate.worker import as_tuple, load_module, oracle_input
from d2kbench.suite import find_task, roofline


def parse_value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(text, text)


def oracle_outputs(ref, task, inputs):
    """The oracle's outputs, computed as the evaluator's trusted worker computes them."""
    oracle = getattr(ref, "oracle", None)
    upcast = None if oracle else getattr(torch, task.oracle_upcast)
    return as_tuple((oracle or ref.reference)(*[oracle_input(v, upcast) for v in inputs]))


def mismatch(task, workload, ref, inputs, got, expected) -> str | None:
    if hasattr(ref, "check"):
        return ref.check(list(got), list(expected), inputs)
    for spec, g, e in zip(task.returned_outputs, got, expected, strict=True):
        wrong = compare_output(spec, g, e, workload.dtype, list(g.stride()), list(e.stride()))
        if wrong:
            return wrong[1]
    return None


def time_us(timer: Timer, fn, inputs, reps: int, graph: bool) -> float:
    times, _ = timer.time(lambda _slot: fn(*inputs), lambda _slot: None, [0], reps, warmup=5, graph=graph)
    return statistics.median(times) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task")
    parser.add_argument("--workloads", default="", help="comma-separated names (default: the scored workloads)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=V1,V2", help="a knob and its values")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--seeds", default="7", help="comma-separated input seeds, each timed in turn")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    task = find_task(args.task)
    ref = load_module(task.reference_path, f"sweep_ref_{task.id}")
    expert = load_module(task.expert_path, f"sweep_expert_{task.id}")
    knobs = {}
    for item in args.set:
        name, _, values = item.partition("=")
        if not hasattr(expert, name):
            parser.error(f"expert.py of {task.id} has no constant {name}")
        knobs[name] = [parse_value(v) for v in values.split(",")]
    shipped = {name: getattr(expert, name) for name in knobs}
    variants = [dict(zip(knobs, combo, strict=True)) for combo in itertools.product(*knobs.values())]
    variants = [shipped] + [v for v in variants if v != shipped]
    names = args.workloads.split(",") if args.workloads else [w.name for w in task.split("scored")]

    device = torch.device("cuda")
    timer = Timer(device)
    ceilings = measure_ceilings(device)
    env = environment("cuda:0")
    print(f"# sweep {task.id}: {env.get('gpu')}, torch {torch.__version__}, triton {triton.__version__}; "
          f"copy {ceilings['copy_bytes_per_s'] / 1e12:.2f} TB/s, bf16 GEMM {ceilings['bf16_flops_per_s'] / 1e12:.0f} "
          f"TFLOP/s\n")
    print("| workload | variant | us | SOL | vs reference | vs comparator | note |\n|---|---|---|---|---|---|---|")
    records = []
    seeds = [int(s) for s in args.seeds.split(",")]
    for name, seed in itertools.product(names, seeds):
        workload = task.workload(name)
        graph = workload.latency_bound
        inputs = list(ref.make_inputs(workload, seed, "cuda"))
        if len(seeds) > 1:
            name = f"{workload.name} seed {seed}"
        derived = ref.derived(workload, inputs) if hasattr(ref, "derived") else {}
        nbytes, flops = roofline(task, workload, derived)
        floor_us = max(nbytes / ceilings["copy_bytes_per_s"], flops / ceilings["bf16_flops_per_s"]) * 1e6
        expected = oracle_outputs(ref, task, inputs)
        base = {"reference": time_us(timer, ref.reference, inputs, args.reps, graph)}
        if hasattr(ref, "comparator"):
            prepared = ref.comparator_prepare(*inputs) if hasattr(ref, "comparator_prepare") else inputs
            base["comparator"] = time_us(timer, ref.comparator, list(prepared), args.reps, graph)
        for label, us in base.items():
            print(f"| {name} | {label} | {us:.1f} | {floor_us / us:.0%} | | | |")
            records.append({"workload": workload.name, "seed": seed, "variant": label, "us": us,
                            "floor_us": floor_us})
        for variant in variants:
            for knob, value in variant.items():
                setattr(expert, knob, value)
            label = "as shipped" if variant == shipped else ", ".join(f"{k}={v}" for k, v in variant.items())
            try:
                got = as_tuple(expert.run(*inputs))
                torch.cuda.synchronize()
                wrong = mismatch(task, workload, ref, inputs, got, expected)
                us = None if wrong else time_us(timer, expert.run, inputs, args.reps, graph)
            except Exception as exc:  # noqa: BLE001 - a variant that fails to compile or run is reported
                wrong, us = f"{type(exc).__name__}: {str(exc)[:120]}", None
            if us is None:
                print(f"| {name} | {label} | - | - | - | - | WRONG: {wrong} |")
            else:
                vs_cmp = f"{base['comparator'] / us:.2f}x" if "comparator" in base else ""
                print(f"| {name} | {label} | {us:.1f} | {floor_us / us:.0%} | {base['reference'] / us:.2f}x | "
                      f"{vs_cmp} | |")
            records.append({"workload": workload.name, "seed": seed, "variant": label, "knobs": variant, "us": us,
                            "wrong": wrong, "floor_us": floor_us})
        for knob, value in shipped.items():
            setattr(expert, knob, value)
        sys.stdout.flush()
    if args.json:
        args.json.write_text(json.dumps({"task": task.id, "environment": env, "ceilings": ceilings,
                                         "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
