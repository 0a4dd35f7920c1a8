"""The whole pipeline: `scripted/expert` over the suite's four tasks in configs none and L1+L2+L3, then resume.

This is the expensive test (kernels run in Triton's interpreter). To keep it short while every verdict is still
a real evaluation, each distinct evaluation (task, candidate bytes) runs once, on the task's first cpu workload,
and is shared by the runs that ask for it again: scripted/expert writes the same file in both configs, and its
run_tests, benchmark and final evaluation do the same work on a CPU (no timing there).
"""

import asyncio
import copy
import dataclasses
import hashlib
import json

from d2kbench.agent.evalservice import LocalEvalService
from d2kbench.runs.cells import build_matrix
from d2kbench.runs.command import run_matrix
from d2kbench.runs.executor import RunSettings
from d2kbench.runs.metrics import format_summary, summarize
from d2kbench.runs.store import Store
from d2kbench.suite import load_suite


class SharedEvals(LocalEvalService):
    """A CPU evaluation service that evaluates each (task, candidate bytes) once, on the first cpu workload."""

    def __init__(self):
        super().__init__(["cpu", "cpu"])  # two at once: nothing is timed on a CPU
        self.evaluations: dict[tuple, asyncio.Future] = {}
        self.reports: dict[tuple, asyncio.Future] = {}

    @staticmethod
    def key(task, candidate):
        return task.id, hashlib.sha256(candidate.read_bytes()).hexdigest()

    async def evaluate(self, task, candidate, options):
        one = dataclasses.replace(options, workloads=(task.split("cpu")[0].name,))
        key = self.key(task, candidate)
        if key not in self.evaluations:
            self.evaluations[key] = asyncio.ensure_future(super().evaluate(task, candidate, one))
        return copy.deepcopy(await self.evaluations[key])

    async def compile_report(self, task, candidate):
        key = self.key(task, candidate)
        if key not in self.reports:
            self.reports[key] = asyncio.ensure_future(super().compile_report(task, candidate))
        return copy.deepcopy(await self.reports[key])


def test_scripted_expert_over_the_suite_passes_then_resume_does_nothing(tmp_path, capsys):
    tasks = list(load_suite())
    assert len(tasks) == 4
    matrix = build_matrix(["scripted/expert"], tasks, ["none", "L1+L2+L3"], seeds=1, turns=10)
    settings = RunSettings(devices=["cpu"], concurrency=2)
    evals = SharedEvals()
    store = Store(tmp_path)
    assert run_matrix(store, matrix, settings, evals=evals) == 0

    rows = store.rows()
    assert len(rows) == 8
    for row in rows:
        assert (row["status"], row["verdict"], row["end_reason"], row["mode"]) == ("done", "pass", "submit",
                                                                                   "interpreter"), row["detail"]
        assert row["turns_used"] == 5 and row["task_speedup"] is None  # nothing is timed in the interpreter
        assert row["solution"] == next(t for t in tasks if t.id == row["task"]).expert_path.read_text()
        assert json.loads(row["eval_json"])["verdict"] == "pass"
        trajectory = (store.root / store.attempts(row["key"])[0]["trajectory"]).read_text().splitlines()
        header, *events = (json.loads(line) for line in trajectory)
        assert header["key"] == row["key"] and header["settings"]["final_evaluation"]["include_hidden"] is True
        assert [e["type"] for e in events][:2] == ["prompt", "response"]
        assert [e["name"] for e in events if e["type"] == "tool_result"] == [
            "write_file", "run_tests", "benchmark", "profile", "submit"]
        assert events[-2]["type"] == "end" and events[-1]["type"] == "final_evaluation"
    assert len(evals.evaluations) == 4  # one real evaluation per task, shared by its runs
    lines = summarize(rows)
    assert [(x["config"], x["cells"], x["correct"]) for x in lines] == [("L1+L2+L3", 4, 4), ("none", 4, 4)]
    assert "interpreter mode" in format_summary(lines)

    attempts_before = store.db.execute("SELECT count(*) FROM attempts").fetchone()[0]
    capsys.readouterr()
    assert run_matrix(store, matrix, settings, evals=SharedEvals()) == 0
    assert "8 cells, 8 done already, 0 to run" in capsys.readouterr().out
    assert store.db.execute("SELECT count(*) FROM attempts").fetchone()[0] == attempts_before == 8
    assert [tuple(r) for r in store.rows()] == [tuple(r) for r in rows]
    store.close()
