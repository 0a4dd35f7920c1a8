"""The `d2k` command line."""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from pathlib import Path

from d2kbench.judge.command import add_parsers as add_judge_parsers
from d2kbench.runs.command import add_parsers as add_run_parsers
from d2kbench.suite import TaskFormatError, find_task, load_suite


class UsageError(Exception):
    """Bad arguments found before any work: printed as `d2k: <message>`, exit 2."""


def _device(name: str) -> str:
    from d2kbench.evaluate.evaluator import resolve_device

    try:
        return resolve_device(name)
    except ValueError as exc:
        raise UsageError(f"--device: {exc}") from None


def _out_folder(out: Path | None) -> Path | None:
    """--out of a command that writes its files into a folder: checked before the work, not after."""
    from d2kbench.runs.store import check_folder

    if out is not None:
        try:
            check_folder(out, "--out")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return out


def _names(text: str | None, what: str) -> list[str] | None:
    """A comma-separated list option (spaces and empty entries dropped); None where the option was not given."""
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError(f"--{what} names no {what[:-1]}")
    return names


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _tasks_list(args: argparse.Namespace) -> int:
    tasks = load_suite()
    if args.json:
        print(json.dumps([_task_summary(t) for t in tasks], indent=2))
        return 0
    for t in tasks:
        counts = {s: len(t.split(s)) for s in ("scored", "hidden", "cpu")}
        print(f"{t.id:32s} {t.family:13s} {t.bound:8s} scored={counts['scored']} hidden={counts['hidden']} "
              f"cpu={counts['cpu']}  {t.title}")
    print(f"{len(tasks)} tasks, {sum(len(t.split('scored')) for t in tasks)} scored workloads")
    return 0


def _task_summary(t) -> dict:
    return {"id": t.id, "family": t.family, "title": t.title, "bound": t.bound,
            "workloads": {s: [w.name for w in t.split(s)] for s in ("scored", "hidden", "cpu")}}


def _tasks_show(args: argparse.Namespace) -> int:
    t = find_task(args.task)
    if args.json:
        data = asdict(t)
        data["path"] = str(t.path)
        print(json.dumps(data, indent=2, default=str))
        return 0
    print(f"{t.id}: {t.title}\nfamily {t.family}, {t.bound}-bound{', latency-bound' if t.latency_bound else ''}")
    print(f"source: {', '.join(f'{k}={v}' for k, v in t.source.items())}\n\n{t.description}\n")
    print(f"signature: {t.signature}")
    for i in t.inputs:
        written = "(written) " if i.written else ""
        print(f"  in  {i.name:14s} {i.kind:6s} {i.dtype or '':14s} {i.shape:18s} {written}{i.doc}")
    for o in t.outputs:
        print(f"  out {o.name:14s} {o.dtype:14s} {o.shape:18s} compare={o.compare}")
    print(f"roofline: bytes = {t.roofline_bytes}; flops = {t.roofline_flops}")
    for w in t.workloads:
        print(f"  [{w.split:6s}] {w.name:32s} {w.dtype:9s} {w.params}")
    for layer in ("L1", "L2", "L3"):
        print(f"rubric {layer}: " + "; ".join(f"{p.id} (w={p.weight:g})" for p in t.rubric if p.layer == layer))
    return 0


def _eval(args: argparse.Namespace) -> int:
    from d2kbench.evaluate.evaluator import EvalOptions, evaluate
    from d2kbench.evaluate.report import format_result

    task = find_task(args.task)
    workloads = _names(args.workloads, "workloads")
    options = EvalOptions(
        workloads=tuple(workloads) if workloads else None,
        include_hidden=args.hidden, time=not args.no_time, comparator=args.comparator, seed=args.seed,
        device=_device(args.device), call_timeout_s=args.timeout, sandbox=not args.no_sandbox, fail_fast=args.fail_fast,
        device_inputs=not args.file_inputs, device_outputs=not args.file_outputs,
    )
    for name in options.workloads or ():
        task.workload(name)
    result = evaluate(task, args.file, options)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(format_result(result))
    if result.correct:
        return 0
    # 3 only where every failure is the harness's: a harness fault is never the candidate's failure, nor hides one
    return 3 if all(f.verdict == "infra" for f in result.failures) else 1


def _suite_check(args: argparse.Namespace) -> int:
    from d2kbench.suitecheck import check_suite

    return check_suite(_names(args.tasks, "tasks"), device=_device(args.device), out=_out_folder(args.out),
                       as_json=args.json)


def _suite_bench(args: argparse.Namespace) -> int:
    from d2kbench.suitecheck import bench_suite

    return bench_suite(_names(args.tasks, "tasks"), device=_device(args.device), out=_out_folder(args.out))


def _report(args: argparse.Namespace) -> int:
    from d2kbench.report.from_store import report_command

    return report_command(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="d2k", description="D2K-Bench: expert designs to efficient Triton kernels")
    sub = parser.add_subparsers(dest="command", required=True)

    tasks = sub.add_parser("tasks", help="list and show tasks").add_subparsers(dest="tasks_command", required=True)
    p = tasks.add_parser("list", help="every task of the suite")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_tasks_list)
    p = tasks.add_parser("show", help="one task in full")
    p.add_argument("task", help="task id or folder")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_tasks_show)

    p = sub.add_parser("eval",
                       help="evaluate one candidate file (exit 0 on pass, 1 on the candidate's failure, 3 on a "
                            "harness fault)")
    p.add_argument("task", help="task id or folder")
    p.add_argument("file", type=Path, help="the candidate: a Python file defining run(*inputs)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--workloads", help="comma-separated workload names (default: scored on GPU, cpu otherwise)")
    p.add_argument("--hidden", action="store_true", help="add the hidden workloads (final evaluation)")
    p.add_argument("--no-time", action="store_true", help="correctness only")
    p.add_argument("--comparator", action="store_true", help="also time the task's comparator")
    p.add_argument("--no-sandbox", action="store_true", help="run the candidate unconfined (debugging only)")
    p.add_argument("--fail-fast", action="store_true", help="stop at the first workload that fails")
    p.add_argument("--file-inputs", action="store_true",
                   help="hand the input sets to the candidate through files, not device to device (CUDA IPC)")
    p.add_argument("--file-outputs", action="store_true",
                   help="results to the evaluator through files, not device to device (CUDA IPC)")
    p.add_argument("--seed", type=int, help="fix the input seed (default: a fresh secret)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda:N")
    p.add_argument("--timeout", type=_positive_seconds, default=300.0,
                   help="seconds per call before a timeout verdict")
    p.set_defaults(func=_eval)

    suite = sub.add_parser("suite", help="check or benchmark the experts").add_subparsers(
        dest="suite_command", required=True)
    p = suite.add_parser("check", help="every expert passes on every workload (cpu workloads without a GPU)")
    p.add_argument("--tasks", help="comma-separated task ids (default: all)")
    p.add_argument("--device", default="auto")
    p.add_argument("--out", type=Path, help="write check.json and check.md here")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_suite_check)
    p = suite.add_parser("bench", help="GPU: reference, comparator and expert times per workload")
    p.add_argument("--tasks", help="comma-separated task ids (default: all)")
    p.add_argument("--device", default="auto")
    p.add_argument("--out", type=Path, help="write bench.json and bench.md here")
    p.set_defaults(func=_suite_bench)

    add_run_parsers(sub)
    add_judge_parsers(sub)

    p = sub.add_parser("report", help="metrics, Markdown/CSV tables and one self-contained HTML report of a run folder")
    p.add_argument("dir", type=Path, help="the run folder given to d2k run --out")
    p.add_argument("--out", type=Path, help="where to write the report (default: DIR/report)")
    p.add_argument("--floor", type=float, default=0.1, help="Performance Score floor (default 0.1)")
    p.set_defaults(func=_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, TaskFormatError, KeyError, FileNotFoundError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"d2k: {message}", file=sys.stderr)
        return 2
