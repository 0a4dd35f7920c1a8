"""`d2k run` (the matrix into a store) and `d2k runs summary` (its table, again, from the store)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from d2kbench.runs.cells import Cell, build_matrix, parse_configs
from d2kbench.runs.metrics import format_summary, summarize
from d2kbench.runs.progress import make_progress
from d2kbench.runs.store import Store, StoreBusy, check_folder
from d2kbench.suite import Task, find_task, load_suite

if TYPE_CHECKING:
    from d2kbench.agent.evalservice import EvalService
    from d2kbench.runs.executor import Executor, ModelFactory, RunSettings


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """`run` and `runs summary` on the `d2k` parser."""
    p = sub.add_parser("run", help="run the matrix models x tasks x configs x seeds into a store (resumable)")
    p.add_argument("--model", action="append", required=True, help="provider/model; repeat for several")
    p.add_argument("--tasks", required=True, help="comma-separated task ids or folders, or 'all'")
    p.add_argument("--configs", default="none,L1+L2+L3", help="comma-separated: none, L1, L1+L2, L1+L2+L3")
    p.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1 (default 1)")
    p.add_argument("--turns", type=int, default=350, help="turn budget per run (default 350)")
    p.add_argument("--out", type=Path, required=True, help="the run folder (store, trajectories, workspaces)")
    p.add_argument("--base-url", help="the model server's base URL (openai/...: else OPENAI_BASE_URL)")
    p.add_argument("--concurrency", type=int, default=1, help="agent loops at once (default 1)")
    p.add_argument("--wall-clock", type=float, default=4 * 3600, help="seconds per run (default 14400)")
    p.add_argument("--devices", default="auto", help="auto (every visible GPU, else cpu), cpu, or cuda:0,cuda:1,...")
    p.add_argument("--executor", choices=("embedded", "ray"), default="embedded",
                   help="embedded (this process, default) or ray (a Ray cluster; docs/ray.md)")
    p.add_argument("--ray-address", help="with --executor ray: the cluster to join (default: a local Ray instance)")
    p.set_defaults(func=run_command)

    runs = sub.add_parser("runs", help="inspect a run folder").add_subparsers(dest="runs_command", required=True)
    p = runs.add_parser("summary", help="the summary table of a run folder (per model x config)")
    p.add_argument("dir", type=Path, help="the run folder given to d2k run --out")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=summary_command)


def select_tasks(text: str) -> list[Task]:
    if text == "all":
        return list(load_suite())
    tasks = [find_task(name.strip()) for name in text.split(",") if name.strip()]
    if not tasks:
        raise ValueError("--tasks names no task")
    return tasks


def select_devices(text: str) -> list[str]:
    if text == "auto":
        from d2kbench.runs.executor import visible_devices

        return visible_devices()
    devices = [d.strip() for d in text.split(",") if d.strip()]
    if devices != ["cpu"] and not all(d.startswith("cuda:") and d[5:].isdigit() for d in devices):
        raise ValueError(f"--devices takes auto, cpu or cuda:N[,cuda:M...], got {text!r}")
    if devices != ["cpu"]:
        from d2kbench.runs.executor import visible_devices

        visible = [d for d in visible_devices() if d != "cpu"]
        unknown = [d for d in devices if d not in visible]
        if unknown:
            raise ValueError(f"--devices {','.join(unknown)}: no such GPU here (visible: "
                             f"{','.join(visible) or 'none; --devices cpu runs on the CPU'})")
    return devices


def check_models(models: list[str], task: Task, base_url: str | None) -> None:
    """Build each model client once so that a bad spec, a missing SDK or key fails before any run starts."""
    from d2kbench.agent.models import make_model

    for spec in models:
        try:
            make_model(spec, base_url=base_url, task=task)
        except Exception as exc:  # noqa: BLE001 - whatever the back end raises, it is a usage error here
            raise ValueError(f"--model {spec}: {exc}") from exc


def run_command(args: argparse.Namespace) -> int:
    from d2kbench.runs.executor import RunSettings

    try:
        if args.concurrency < 1:
            raise ValueError(f"--concurrency must be at least 1, got {args.concurrency}")
        if args.wall_clock <= 0:
            raise ValueError(f"--wall-clock must be positive, got {args.wall_clock}")
        if args.ray_address and args.executor != "ray":
            raise ValueError("--ray-address needs --executor ray")
        check_folder(args.out, "--out")
        tasks = select_tasks(args.tasks)
        matrix = build_matrix(args.model, tasks, parse_configs(args.configs), args.seeds, args.turns)
        if args.executor == "ray":
            from d2kbench.runs.ray_executor import import_ray, plan_eval_actors

            import_ray()
            plan_eval_actors(args.devices, cluster_gpus=0)  # checks --devices; the cluster decides the count
            devices = []  # one per evaluation actor, once Ray is up
        else:
            devices = select_devices(args.devices)
        settings = RunSettings(devices=devices, concurrency=args.concurrency, wall_clock_s=args.wall_clock,
                               base_url=args.base_url, executor=args.executor)
        check_models(args.model, tasks[0], args.base_url)
        store = Store(args.out)
    except (ValueError, OSError, StoreBusy) as exc:
        print(f"d2k run: {exc}", file=sys.stderr)
        return 2
    try:
        if args.executor == "ray":
            from d2kbench.runs.ray_executor import run_matrix_on_ray

            return run_matrix_on_ray(store, matrix, settings, address=args.ray_address, devices=args.devices)
        return run_matrix(store, matrix, settings)
    except KeyboardInterrupt:
        print(f"d2k run: interrupted; the same command resumes where it stopped ({args.out})", file=sys.stderr)
        return 130
    finally:
        store.close()


def run_matrix(store: Store, matrix: list[tuple[Cell, Task]], settings: RunSettings,
               model_factory: ModelFactory | None = None, evals: EvalService | None = None,
               executor_class: type[Executor] | None = None) -> int:
    """Run the matrix's unfinished cells into `store`, print the summary; 0 when every cell is done.

    `model_factory` defaults to `make_model`, `evals` to a `LocalEvalService` over `settings.devices`,
    `executor_class` to the embedded `Executor` (the Ray back end passes its own).
    """
    from d2kbench.agent.evalservice import LocalEvalService
    from d2kbench.runs.executor import Executor

    aborted = store.abort_interrupted()
    store.add_cells([cell for cell, _ in matrix])
    keys = [cell.key for cell, _ in matrix]
    done = sum(row["status"] == "done" for row in store.rows(keys))
    print(f"{len(keys)} cells, {done} done already, {len(keys) - done} to run; devices {','.join(settings.devices)}"
          + (f"; {aborted} interrupted attempt(s) will restart" if aborted else ""), flush=True)
    if settings.mode == "interpreter":
        print("interpreter mode: no GPU, kernels run in Triton's interpreter on each task's cpu workloads, untimed",
              flush=True)
    with make_progress(len(keys), done) as progress:
        executor = (executor_class or Executor)(store, settings, evals or LocalEvalService(settings.devices), progress,
                                                model_factory)
        asyncio.run(executor.run(matrix))
    rows = store.rows(keys)
    print(format_summary(summarize(rows)))
    return 0 if all(row["status"] == "done" for row in rows) else 1


def summary_command(args: argparse.Namespace) -> int:
    try:
        store = Store(args.dir, write=False)
    except (FileNotFoundError, ValueError) as exc:
        print(f"d2k runs summary: {exc}", file=sys.stderr)
        return 2
    try:
        lines, superseded = summarize(store.rows()), store.superseded()
    finally:
        store.close()
    if args.json:
        print(json.dumps(lines, indent=2))
        return 0
    print(format_summary(lines))
    if superseded:
        print(f"{superseded} superseded cell(s) not shown (an older version of a task, its guidance or turn budget)")
    return 0
