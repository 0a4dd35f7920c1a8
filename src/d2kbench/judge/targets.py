"""What `d2k judge DIR` judges: every finished run's solution.py in the run store, and every stored design."""

from __future__ import annotations

from pathlib import Path

from d2kbench.judge.judging import Subject
from d2kbench.judge.records import DESIGNS, read_records
from d2kbench.suite import Task


def run_subjects(run_dir: Path, tasks: dict[str, Task]) -> list[Subject]:
    """One implementation subject per `done` cell of the run store that has a solution (none without a store)."""
    if not (run_dir / "results.sqlite").is_file():
        return []
    from d2kbench.runs.store import Store

    store = Store(run_dir, write=False)
    try:
        rows = [r for r in store.rows() if r["status"] == "done" and r["solution"]]
    finally:
        store.close()
    return [Subject("implementation", _task(tasks, r["task"], run_dir), r["solution"], r["model"], r["config"],
                    int(r["seed"]), r["key"], f"{r['config']}__{r['model']}__s{r['seed']}")
            for r in rows]


def design_subjects(run_dir: Path, tasks: dict[str, Task]) -> list[Subject]:
    """One design subject per design record with status ok under DIR/designs/."""
    return [Subject("design", _task(tasks, d["task"], run_dir), d["text"], d["model"], "design", d["seed"],
                    d["key"], f"design__{d['model']}__s{d['seed']}")
            for d in read_records(run_dir / DESIGNS) if d["status"] == "ok"]


def _task(tasks: dict[str, Task], task_id: str, run_dir: Path) -> Task:
    if task_id not in tasks:
        raise ValueError(f"{run_dir}: task {task_id!r} is not in the suite")
    return tasks[task_id]
