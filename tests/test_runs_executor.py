"""The embedded executor with scripted model clients: model errors, no solution, infra retries, harness bugs.

The agent loop is the real `run_agent`; only the model (and, for infra, the evaluation service) is scripted,
so these tests need no kernel evaluation.
"""

import json

from d2kbench.agent.models.base import ModelError, ModelReply, ToolCall, Usage
from d2kbench.evaluate.result import EvalResult, Failure
from d2kbench.runs.cells import build_matrix
from d2kbench.runs.command import run_matrix
from d2kbench.runs.executor import RunSettings
from d2kbench.runs.progress import RichProgress
from d2kbench.runs.store import Store


class ScriptedClient:
    """Answers each turn with the next step: a ModelReply, or an exception to raise."""

    context_window = 100_000

    def __init__(self, name: str, steps: list):
        self.name, self.steps = name, list(steps)

    async def complete(self, conversation, tools):
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


def reply(name: str, turn: int, **arguments) -> ModelReply:
    return ModelReply("", [ToolCall(f"c{turn}", name, json.dumps(arguments))], Usage(10, 5, 1), "tool_use")


def factory(*steps):
    def make(spec, *, base_url=None, task=None, record=None):
        return ScriptedClient(spec, steps)
    return make


def events(store: Store, key: str, number: int) -> list[dict]:
    attempt = store.attempts(key)[number - 1]
    return [json.loads(line) for line in (store.root / attempt["trajectory"]).read_text().splitlines()]


def test_model_error_mid_run_is_recorded_then_retried(tmp_path, toy_task):
    matrix = build_matrix(["fake/flaky"], [toy_task], ["none"], 1, 2)
    cell = matrix[0][0]
    store = Store(tmp_path)
    code = run_matrix(store, matrix, RunSettings(), factory(
        reply("write_file", 1, path="solution.py", content="print('half done')"),
        ModelError("HTTP 500 after 6 attempts")))
    row = store.rows([cell.key])[0]
    assert code == 1
    assert (row["status"], row["failure"], row["end_reason"], row["turns_used"]) == ("failed", "model_error",
                                                                                       "model_error", 1)
    assert "HTTP 500" in row["error"] and row["verdict"] is None
    assert (row["input_tokens"], row["output_tokens"], row["requests"]) == (10, 5, 1)
    types = [e["type"] for e in events(store, cell.key, 1)]
    assert types[:3] == ["header", "prompt", "response"] and types[-1] == "end"

    code = run_matrix(store, matrix, RunSettings(), factory(reply("list_files", 1), reply("list_files", 2)))
    row = store.rows([cell.key])[0]
    assert code == 0 and row["status"] == "done" and row["failure"] is None and row["error"] is None
    assert (row["end_reason"], row["reason"]) == ("turn_budget", "no_solution")
    assert [(a["number"], a["status"]) for a in store.attempts(cell.key)] == [(1, "failed"), (2, "finished")]
    store.close()


def test_run_without_solution_counts_as_incorrect(tmp_path, toy_task, capsys):
    matrix = build_matrix(["fake/idler"], [toy_task], ["none", "L1+L2+L3"], 1, 2)
    idle = ModelReply("thinking", [], Usage(), "end_turn")
    store = Store(tmp_path)
    assert run_matrix(store, matrix, RunSettings(), factory(idle, reply("submit", 2))) == 0
    rows = store.rows()
    assert [(r["status"], r["verdict"], r["reason"], r["end_reason"], r["turns_used"], r["mode"]) for r in rows] == [
        ("done", "incorrect", "no_solution", "turn_budget", 2, "interpreter")] * 2
    out = capsys.readouterr().out
    assert "incorrect/no_solution" in out and "interpreter mode" in out
    table_line = next(line for line in out.splitlines() if line.startswith("fake/idler") and " none " in line)
    assert table_line.split()[2:6] == ["1", "1", "0", "0"]  # cells, done, correct, failed
    store.close()


class InfraThenPass:
    """An evaluation service whose first `infra_count` final evaluations are infra faults, then a pass."""

    gpu = False

    def __init__(self, infra_count: int):
        self.infra_count, self.calls = infra_count, 0

    async def evaluate(self, task, candidate, options):
        self.calls += 1
        result = EvalResult(task=task.id, candidate=str(candidate))
        if self.calls <= self.infra_count:
            result.add(Failure("infra", "worker_lost", "the trusted worker vanished"))
        return result

    async def compile_report(self, task, candidate):
        return []


def run_with_evals(tmp_path, toy_task, evals) -> tuple[Store, str]:
    matrix = build_matrix(["fake/writer"], [toy_task], ["none"], 1, 10)
    store = Store(tmp_path)
    steps = factory(reply("write_file", 1, path="solution.py", content="def run(x, y, a): pass\n"), reply("submit", 2))
    run_matrix(store, matrix, RunSettings(), steps, evals)
    return store, matrix[0][0].key


def test_infra_verdict_is_retried_once(tmp_path, toy_task):
    evals = InfraThenPass(infra_count=1)
    store, key = run_with_evals(tmp_path, toy_task, evals)
    row = store.rows([key])[0]
    assert evals.calls == 2 and (row["status"], row["verdict"]) == ("done", "pass")
    assert row["solution"] == "def run(x, y, a): pass\n"
    assert [e["attempt"] for e in events(store, key, 1) if e["type"] == "final_evaluation"] == [1, 2]
    store.close()


def test_infra_twice_fails_the_cell_unscored(tmp_path, toy_task):
    evals = InfraThenPass(infra_count=2)
    store, key = run_with_evals(tmp_path, toy_task, evals)
    row = store.rows([key])[0]
    assert evals.calls == 2
    assert (row["status"], row["failure"], row["verdict"], row["reason"]) == ("failed", "infra", "infra",
                                                                               "worker_lost")
    store.close()


def test_harness_bug_fails_one_cell_and_the_others_go_on(tmp_path, toy_task):
    matrix = build_matrix(["fake/broken", "fake/fine"], [toy_task], ["none"], 1, 1)

    def make(spec, *, base_url=None, task=None, record=None):
        if spec == "fake/broken":
            raise RuntimeError("bug in the back end")
        return ScriptedClient(spec, [reply("list_files", 1)])

    store = Store(tmp_path)
    assert run_matrix(store, matrix, RunSettings(concurrency=2), make) == 1
    by_model = {r["model"]: r for r in store.rows()}
    assert by_model["fake/broken"]["failure"] == "harness_error"
    assert "bug in the back end" in by_model["fake/broken"]["error"]
    assert by_model["fake/fine"]["status"] == "done"
    store.close()


def test_rich_progress_counts_turns_and_tokens(toy_task):
    cell = build_matrix(["fake/a"], [toy_task], ["none"], 1, 10)[0][0]
    with RichProgress(total=2, already_done=1) as progress:
        progress.event({"type": "response", "usage": {"input_tokens": 7, "output_tokens": 3}})
        progress.event({"type": "tool_result"})
        progress.cell_finished(cell, "pass")
    assert (progress.turns, progress.tokens, progress.done) == (1, 10, 2)
    assert progress.bar.tasks[0].completed == 2
