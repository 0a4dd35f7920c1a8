"""`d2k design` and `d2k judge` (plus `d2k judge calibrate`): argument parsing and the command bodies."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from d2kbench.judge.records import DESIGNS, JUDGEMENTS, ensure_folder, needs_work, read_record, write_record_or_keep
from d2kbench.judge.schema import DEFAULT_RETRIES  # not from judge.ask: the command line stays free of torch
from d2kbench.runs.command import select_tasks
from d2kbench.suite import Task, load_suite

if TYPE_CHECKING:
    from d2kbench.judge.judging import Subject

CALIBRATE = "calibrate"


def _at_least(text: str, least: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    return _at_least(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    """An argparse type: an integer of at least 0."""
    return _at_least(text, 0, "a non-negative integer")


async def _bounded(jobs: list[Callable[[], Awaitable[None]]], concurrency: int) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(job: Callable[[], Awaitable[None]]) -> None:
        async with gate:
            await job()

    await asyncio.gather(*(one(job) for job in jobs))


def _usage_errors(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Bad input (a bad model spec, task list or record) becomes a message and exit status 2."""
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except ValueError as exc:
            print(f"d2k {args.command}: {exc}", file=sys.stderr)
            return 2
    return wrapped


def _design_command(args: argparse.Namespace) -> int:
    from d2kbench.judge.design import design, design_path
    from d2kbench.judge.models import make_judge_model

    tasks = select_tasks(args.tasks)
    model = make_judge_model(args.model, base_url=args.base_url)
    ensure_folder(args.out / DESIGNS)  # before any model call: an answer must not be lost for want of a folder
    todo = [(task, seed) for task in tasks for seed in range(args.seeds)
            if needs_work(design_path(args.out, args.model, task, seed), args.retry_failed)]
    print(f"{len(tasks) * args.seeds - len(todo)} design(s) already stored, {len(todo)} to write")
    unwritten: list[Path] = []

    def job(task: Task, seed: int) -> Callable[[], Awaitable[None]]:
        async def write() -> None:
            record = await design(task, model, args.model, seed)
            if _stored(design_path(args.out, args.model, task, seed), record, unwritten):
                print(f"design {task.id} seed={seed}: {record['status']}"
                      + (f" ({record['error']})" if record["error"] else f", {len(record['text'])} characters"))
        return write

    asyncio.run(_bounded([job(t, s) for t, s in todo], args.concurrency))
    failed = [t.id for t in tasks for s in range(args.seeds)
              if (path := design_path(args.out, args.model, t, s)) not in unwritten
              and read_record(path)["status"] != "ok"]
    if failed:
        print(f"{len(failed)} design(s) failed ({', '.join(failed)}); --retry-failed asks again", file=sys.stderr)
    return 1 if failed or unwritten else 0


def _stored(path: Path, record: dict[str, Any], unwritten: list[Path]) -> bool:
    """Write `record` at `path`; if that fails, say where it was kept instead and add `path` to `unwritten`."""
    try:
        write_record_or_keep(path, record)
    except OSError as exc:
        print(f"d2k: {exc}", file=sys.stderr)
        unwritten.append(path)
        return False
    return True


def _judge_command(args: argparse.Namespace) -> int:
    if str(args.dir) == CALIBRATE:
        return _calibrate_command(args)
    from d2kbench.judge.judging import judge_subject, judgement_name
    from d2kbench.judge.models import make_judge_model
    from d2kbench.judge.targets import design_subjects, run_subjects

    if not args.dir.exists():
        raise FileNotFoundError(f"no such folder: {args.dir}")
    if not args.dir.is_dir():
        raise ValueError(f"{args.dir} is not a folder (give a run folder, or `{CALIBRATE}`)")
    tasks = {t.id: t for t in load_suite()}
    wanted = {t.id for t in select_tasks(args.tasks)} if args.tasks is not None else set(tasks)
    subjects = [s for s in run_subjects(args.dir, tasks) + design_subjects(args.dir, tasks) if s.task.id in wanted]
    if not subjects:
        print(f"d2k judge: nothing to judge in {args.dir} (no finished run with a solution, no stored design)",
              file=sys.stderr)
        return 2
    judge = make_judge_model(args.judge_model, base_url=args.base_url)
    out = args.dir / JUDGEMENTS
    ensure_folder(out)  # before any model call: an answer must not be lost for want of a folder
    paths = [out / judgement_name(s, args.judge_model, args.samples) for s in subjects]
    todo = [(s, p) for s, p in zip(subjects, paths, strict=True) if needs_work(p, args.retry_failed)]
    print(f"{len(subjects) - len(todo)} judgement(s) already stored, {len(todo)} to make")
    unwritten: list[Path] = []

    def job(subject: Subject, path: Path) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            record = await judge_subject(subject, judge, args.judge_model, samples=args.samples,
                                         retries=args.retries)
            if _stored(path, record, unwritten):
                print(_judgement_line(record))
        return run

    asyncio.run(_bounded([job(s, p) for s, p in todo], args.concurrency))
    failed = [p for p in paths if p not in unwritten and read_record(p)["status"] != "ok"]
    if failed:
        print(f"{len(failed)} judgement(s) failed (no valid judge answer); --retry-failed asks again", file=sys.stderr)
    return 1 if failed or unwritten else 0


def _judgement_line(record: dict[str, Any]) -> str:
    head = f"{record['kind']} {record['task']} {record['label']}: "
    if record["status"] != "ok":
        return head + f"judge failure ({record['samples'][-1]['failure']})"
    score = record["summary"]["scores"]["combined"]
    return head + (f"combined {score['mean']:.1f} +- {score['spread']:.1f} over {record['valid_samples']} sample(s)"
                   + (f", {record['failed_samples']} failed" if record["failed_samples"] else ""))


def _calibrate_command(args: argparse.Namespace) -> int:
    from d2kbench.judge.calibrate import calibrate, calibration_markdown
    from d2kbench.judge.models import make_judge_model

    tasks = select_tasks("all" if args.tasks is None else args.tasks)
    judge = make_judge_model(args.judge_model, base_url=args.base_url)
    out = args.out or Path("calibration")
    ensure_folder(out)  # before any model call
    result = asyncio.run(calibrate(tasks, judge, args.judge_model, samples=args.samples, retries=args.retries,
                                   concurrency=args.concurrency))
    markdown = calibration_markdown(result)
    (out / "calibration.md").write_text(markdown, encoding="utf-8")
    (out / "calibration.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(markdown)
    print(f"wrote {out / 'calibration.md'} and {out / 'calibration.json'}")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register `design` and `judge` on the `d2k` parser."""
    p = sub.add_parser("design", help="design-only mode: each model writes a design (no code) per task")
    p.add_argument("--model", required=True, help="openai/NAME, anthropic/NAME or scripted/judge:PATH")
    p.add_argument("--tasks", required=True, help="comma-separated task ids, or all")
    p.add_argument("--out", type=Path, required=True, help="the folder (designs go to OUT/designs/)")
    p.add_argument("--seeds", type=positive_int, default=1, help="designs per task: seeds 0..N-1 (default 1)")
    p.add_argument("--base-url", help="OpenAI-compatible server URL")
    p.add_argument("--concurrency", type=positive_int, default=4, help="requests in flight (default 4)")
    p.add_argument("--retry-failed", action="store_true", help="write again the designs that failed")
    p.set_defaults(func=_usage_errors(_design_command))

    p = sub.add_parser("judge", help="judge the designs and final solutions of DIR, or `judge calibrate`",
                       description="d2k judge DIR: judge every finished run's solution.py and every design of DIR. "
                                   "d2k judge calibrate: judge the experts and their ablations (--tasks, --out).")
    p.add_argument("dir", type=Path, help=f"the run folder, or `{CALIBRATE}`")
    p.add_argument("--judge-model", required=True, help="openai/NAME, anthropic/NAME or scripted/judge:PATH")
    p.add_argument("--samples", type=positive_int, default=1, help="independent judge answers per subject")
    p.add_argument("--retries", type=non_negative_int, default=DEFAULT_RETRIES,
                   help=f"corrected answers asked after an invalid one (default {DEFAULT_RETRIES})")
    p.add_argument("--tasks", help="comma-separated task ids (calibrate: default all)")
    p.add_argument("--out", type=Path, help="calibrate: where calibration.md/.json go (default ./calibration)")
    p.add_argument("--base-url", help="OpenAI-compatible server URL")
    p.add_argument("--concurrency", type=positive_int, default=4, help="subjects judged at once (default 4)")
    p.add_argument("--retry-failed", action="store_true", help="judge again the subjects whose judgement failed")
    p.set_defaults(func=_usage_errors(_judge_command))
