"""Sweep an expert's tuning knobs on the GPU: each variant checked against the oracle, then timed.

Run on the GPU machine from the repository root:

    PYTHONPATH=src python3 bench/sweep.py TASK [--workloads a,b] [--set NAME=v1,v2 ...] [--reps N] [--seeds 7,8]

Every `--set` names a module-level constant of the task's `expert.py` and the values to try; the
sweep runs the cross product (the expert's own values first, as "as shipped"), each variant a module loaded from
the expert's source with those assignments rewritten, so that whatever the module derives from a knob at import
follows it. Per scored workload
each variant's outputs are compared with the oracle's under the task's tolerances, and a wrong
variant is reported, never timed; then the reference, the comparator and every right variant are
timed in `--rounds` rounds, one batch each per round, the rounds in balanced orders
(`timing_phase.balanced_orders`), and each is reported by the median of its batches with their range.
Timing is the evaluator's own Timer (CUDA events, L2 flushed between calls, median; CUDA graph
replay for latency-bound workloads). With several `--seeds` every workload is
drawn and timed once per seed in this one process (a seed repeated draws fresh tensors again), which
tells an input effect from a process or clock effect. Prints one Markdown table and, with --json,
writes every number to a file, rewritten after each workload (and seed) so that a sweep cut off by its time limit
keeps the runs it finished, marked `"complete": false` (bench/pick_knobs.py decides nothing from such a file).
`--device cpu` runs it through Triton's interpreter on the cpu
workloads with the host clock (tests/test_sweep.py): it checks the script, it measures nothing.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import itertools
import json
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import triton

from d2kbench.evaluate import inductor_picks, interp_fp8
from d2kbench.evaluate.compare import compare_output
from d2kbench.evaluate.hardware import environment
from d2kbench.evaluate.timing import HostTimer, Timer, measure_ceilings
from d2kbench.evaluate.timing_phase import balanced_orders
from d2kbench.evaluate.worker import as_tuple, load_module, oracle_input
from d2kbench.suite import find_task, roofline


def parse_value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"True": True, "False": False, "None": None}.get(text, text)


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
            return wrong.detail
    return None


def variant_source(source: str, knobs: dict) -> str:
    """`source` with each knob's module-level assignment (one line, exactly one) set to the knob's value. A loaded
    module's attribute set instead would miss values derived from it at import: muon's launch configuration is a
    dict built from MM_BLOCK_N and MM_STAGES, so its tile sweeps of the tenth and eleventh sessions timed the
    shipped tiles under every label."""
    for name, value in knobs.items():
        pattern, _ = knob_assignment(source, name)
        source = pattern.sub(lambda _m, name=name, value=value: f"{name} = {value!r}", source)
    return source


def knob_assignment(source: str, name: str) -> tuple[re.Pattern, str]:
    """The pattern of a knob's module-level assignment and its line in `source`; ValueError unless it is assigned
    exactly once, on one line, at the start of a line."""
    pattern = re.compile(rf"^{re.escape(name)} = .*$", re.M)
    lines = pattern.findall(source)
    if len(lines) != 1 or not one_statement(lines[0]):
        raise ValueError(f"{name} is not assigned exactly once, on one line, at the start of a line of expert.py")
    return pattern, lines[0]


def load_variant(source: str, knobs: dict, folder: Path, name: str):
    """The expert `source` with `knobs` set (`variant_source`), written to `folder` and loaded as module `name`."""
    path = folder / f"{name}.py"
    path.write_text(variant_source(source, knobs))
    return load_module(path, name)


def one_statement(line: str) -> bool:
    try:
        return len(ast.parse(line).body) == 1
    except SyntaxError:  # the first line of an assignment that goes on
        return False


def variant_label(variant: dict, shipped: dict) -> str:
    return "as shipped" if variant == shipped else ", ".join(f"{k}={v}" for k, v in variant.items())


def time_us(timer: Timer, fn, inputs, reps: int, graph: bool) -> float:
    times, _ = timer.time(lambda _slot: fn(*inputs), lambda _slot: None, [0], reps, warmup=5, graph=graph)
    return statistics.median(times) * 1e3


def comparator_ms(timer: Timer, fn, inputs, reps: int, graph: bool) -> float:
    """One batch of the comparator (ms), for `inductor_picks.retune`."""
    return time_us(timer, fn, inputs, reps, graph) / 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task")
    parser.add_argument("--workloads", default="", help="comma-separated names (default: the scored workloads)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=V1,V2", help="a knob and its values")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=4, help="batches per variant, in balanced orders (median)")
    parser.add_argument("--seeds", default="7", help="comma-separated input seeds, each timed in turn")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--device", default="cuda",
                        help="cuda, or cpu (Triton's interpreter, the host clock: checks the script, not kernels)")
    args = parser.parse_args()

    task = find_task(args.task)
    ref = load_module(task.reference_path, f"sweep_ref_{task.id}")
    expert = load_module(task.expert_path, f"sweep_expert_{task.id}")
    source = task.expert_path.read_text()
    knobs = {}
    for item in args.set:
        name, _, values = item.partition("=")
        if not hasattr(expert, name):
            parser.error(f"expert.py of {task.id} has no constant {name}")
        knobs[name] = [parse_value(v) for v in values.split(",")]
    shipped = {name: getattr(expert, name) for name in knobs}
    variants = [dict(zip(knobs, combo, strict=True)) for combo in itertools.product(*knobs.values())]
    variants = [shipped] + [v for v in variants if v != shipped]
    modules = {}  # variant label -> its module
    scratch = tempfile.TemporaryDirectory(prefix="d2k-sweep-")
    for i, variant in enumerate(variants):
        try:
            modules[variant_label(variant, shipped)] = load_variant(source, variant, Path(scratch.name),
                                                                    f"sweep_expert_{task.id}_{i}")
        except ValueError as exc:
            parser.error(str(exc))
    names = args.workloads.split(",") if args.workloads else [w.name for w in task.split("scored")]
    for name in names:  # every name known before anything is timed
        try:
            task.workload(name)
        except KeyError as exc:
            parser.error(exc.args[0])

    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    timer = Timer(device) if on_gpu else HostTimer()
    if not on_gpu:
        interp_fp8.install()  # as the evaluator's cpu workers: the interpreter's own fp8 casts misround
    nan = float("nan")  # no ceilings on the CPU: no speed-of-light share
    ceilings = measure_ceilings(device) if on_gpu else {"copy_bytes_per_s": nan, "bf16_flops_per_s": nan}
    env = environment(args.device)
    print(f"# sweep {task.id}: {env.get('gpu')}, torch {torch.__version__}, triton {triton.__version__}; "
          f"copy {ceilings['copy_bytes_per_s'] / 1e12:.2f} TB/s, bf16 GEMM {ceilings['bf16_flops_per_s'] / 1e12:.0f} "
          f"TFLOP/s\n")
    print("| workload | variant | us | SOL | vs reference | vs comparator | note |\n|---|---|---|---|---|---|---|")
    records = []
    seeds = [int(s) for s in args.seeds.split(",")]
    runs = list(itertools.product(names, seeds))
    for done, (name, seed) in enumerate(runs, start=1):
        workload = task.workload(name)
        graph = workload.latency_bound and on_gpu  # (no CUDA graphs on the CPU)
        inputs = list(ref.make_inputs(workload, seed, args.device))
        if len(seeds) > 1:
            name = f"{workload.name} seed {seed}"
        derived = ref.derived(workload, inputs) if hasattr(ref, "derived") else {}
        nbytes, flops = roofline(task, workload, derived)
        floor_us = max(nbytes / ceilings["copy_bytes_per_s"], flops / ceilings["bf16_flops_per_s"]) * 1e6
        expected = oracle_outputs(ref, task, inputs)
        entries = [("reference", ref.reference, inputs, {})]  # (label, function, inputs, its knobs)
        picks = []
        if hasattr(ref, "comparator"):
            with inductor_picks.recording() if on_gpu else contextlib.nullcontext([]) as tuned:
                prepared = ref.comparator_prepare(*inputs) if hasattr(ref, "comparator_prepare") else inputs
                ref.comparator(*prepared)  # compiled, and its kernels tuned by Inductor, here
            # ...then each in the configuration the harness's timing finds clearly fastest, as the evaluator does
            # (weighed against the comparator's time a call where it is not timed by graph replays)
            scale = None if graph or not tuned else comparator_ms(timer, ref.comparator, prepared, 3, False)
            picks = inductor_picks.retune(tuned, functools.partial(comparator_ms, timer, ref.comparator, prepared,
                                                                   args.reps, graph), comparator_ms=scale)
            for pick in picks:
                print(f"<!-- comparator {name}: {pick.kernel} Inductor picked {pick.inductor_pick}, kept {pick.kept}; "
                      f"harness ms {pick.harness_ms} {pick.note} -->")
            entries.append(("comparator", ref.comparator, list(prepared), {}))
        wrong = {}
        for variant in variants:
            label = variant_label(variant, shipped)
            try:
                got = as_tuple(modules[label].run(*inputs))
                if on_gpu:
                    torch.cuda.synchronize()
                wrong[label] = mismatch(task, workload, ref, inputs, got, expected)
            except Exception as exc:  # noqa: BLE001 - a variant that fails to compile or run is reported
                wrong[label] = f"{type(exc).__name__}: {str(exc)[:120]}"
            if not wrong[label]:
                entries.append((label, modules[label].run, inputs, variant))
        # Every entry timed once per round, the rounds in balanced orders: what ran before a batch moves a
        # GEMM-bound time by up to 9% on the H200 (its power cap; bench/diag/idle_gap.py), so one batch per
        # entry in a fixed order ranked variants by their place in it.
        per_round: dict[str, list[float]] = {label: [] for label, *_ in entries}
        for order in balanced_orders(entries, args.rounds):
            for label, fn, args_in, _ in order:
                per_round[label].append(time_us(timer, fn, args_in, args.reps, graph))
        us = {label: statistics.median(times) for label, times in per_round.items()}
        knobs_of = {label: knobs for label, _, _, knobs in entries}
        for label, times in per_round.items():
            spread = f"rounds {min(times):.1f}-{max(times):.1f}" if len(times) > 1 else ""
            if label not in ("reference", "comparator"):
                vs_cmp = f"{us['comparator'] / us[label]:.2f}x" if "comparator" in us else ""
                ratios = f"{us['reference'] / us[label]:.2f}x | {vs_cmp}"
            else:
                ratios = " | "
            print(f"| {name} | {label} | {us[label]:.1f} | {floor_us / us[label]:.0%} | {ratios} | {spread} |")
            records.append({"workload": workload.name, "seed": seed, "variant": label, "knobs": knobs_of[label],
                            "us": us[label], "rounds_us": times, "floor_us": floor_us,
                            **({"inductor_picks": [p.to_json() for p in picks]} if label == "comparator" else {})})
        for label, why in wrong.items():
            if why:
                print(f"| {name} | {label} | - | - | - | - | WRONG: {why} |")
                records.append({"workload": workload.name, "seed": seed, "variant": label, "us": None,
                                "wrong": why, "floor_us": floor_us})
        sys.stdout.flush()
        if args.json:  # whole or not at all, though a time limit's signal may come at any moment
            partial = args.json.with_name(args.json.name + ".partial")
            partial.write_text(json.dumps({"task": task.id, "environment": env, "ceilings": ceilings,
                                           "complete": done == len(runs), "records": records}, indent=1))
            os.replace(partial, args.json)
            print(f"{args.json}: {done} of {len(runs)} runs written", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
