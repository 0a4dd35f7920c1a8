"""The embedded executor: N agent loops at once (asyncio) over one shared evaluation service, into a store."""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import d2kbench
from d2kbench.evaluate.evaluator import EvalOptions
from d2kbench.evaluate.result import EvalResult
from d2kbench.runs.cells import Cell
from d2kbench.runs.metrics import run_scores
from d2kbench.runs.progress import Progress
from d2kbench.runs.store import Store, Trajectory
from d2kbench.suite import Task

if TYPE_CHECKING:
    from d2kbench.agent.evalservice import EvalService
    from d2kbench.agent.loop import AgentOutcome

# make_model(spec, base_url=..., task=..., record=...) -> ModelClient; tests pass their own
ModelFactory = Callable[..., Any]


@dataclass
class RunSettings:
    """What every run of one `d2k run` shares (recorded in each trajectory's header)."""

    devices: list[str] = field(default_factory=lambda: ["cpu"])
    concurrency: int = 1
    wall_clock_s: float = 4 * 3600
    base_url: str | None = None
    executor: str = "embedded"  # or "ray" (d2kbench.runs.ray_executor)

    @property
    def mode(self) -> str:
        return "gpu" if any(d.startswith("cuda") for d in self.devices) else "interpreter"


def visible_devices() -> list[str]:
    """Every visible GPU as `cuda:N`, or `["cpu"]` (Triton's interpreter) when there is none."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return [f"cuda:{i}" for i in range(count)] or ["cpu"]


def final_options() -> EvalOptions:
    """The final evaluation: scored + hidden workloads with the comparator on a GPU; the cpu workloads otherwise."""
    return EvalOptions(include_hidden=True, comparator=True)


class Executor:
    """Runs the cells it is given, each in a fresh workspace, and records every attempt in `store`."""

    def __init__(self, store: Store, settings: RunSettings, evals: EvalService, progress: Progress,
                 model_factory: ModelFactory | None = None):
        self.store, self.settings, self.evals, self.progress = store, settings, evals, progress
        self.model_factory = model_factory

    async def run(self, cells: list[tuple[Cell, Task]]) -> None:
        """Run every cell of `cells` that is not done yet, `concurrency` at a time."""
        gate = asyncio.Semaphore(self.settings.concurrency)

        async def guarded(cell: Cell, task: Task) -> None:
            async with gate:
                await self.run_cell(cell, task)

        todo = [(cell, task) for cell, task in cells if self.store.status(cell.key) != "done"]
        await asyncio.gather(*(guarded(cell, task) for cell, task in todo))

    async def run_cell(self, cell: Cell, task: Task) -> None:
        """One attempt of one cell, from a fresh workspace to its outcome in the store."""
        attempt_id, number, path, workspace = self.store.start_attempt(cell)
        trajectory = Trajectory(path, cell, number, self.header_settings())

        def record(event: dict[str, Any]) -> None:
            trajectory.write(event)
            self.progress.event(event)

        try:
            outcome = await self.run_agent(cell, task, workspace, record)
            fields = {"end_reason": outcome.end_reason, "turns_used": outcome.turns, "submitted": outcome.submitted,
                      "error": outcome.error, **usage_fields(outcome.usage)}
            failure = "model_error" if outcome.end_reason == "model_error" else None
            if failure is None:
                failure = await self.score(task, outcome.solution, fields, record)
        except Exception as exc:  # noqa: BLE001 - a harness bug fails this cell, not the matrix
            fields, failure = {"error": traceback.format_exc()[-4000:]}, self.failure_of(exc)
            record({"type": failure, "t": time.time(), "error": fields["error"]})
        finally:
            trajectory.close()
        self.store.finish_attempt(cell, attempt_id, fields, failure)
        self.progress.cell_finished(cell, describe(fields, failure))

    async def run_agent(self, cell: Cell, task: Task, workspace: Path, record: Callable[[dict], None]
                        ) -> AgentOutcome:
        """The cell's agent loop, here on the driver's event loop, in `workspace`."""
        from d2kbench.agent.loop import AgentLimits, run_agent

        model = self.make_model(cell.model, task, record)
        limits = AgentLimits(turns=cell.turns, wall_clock_s=self.settings.wall_clock_s)
        return await run_agent(task, cell.config, model, workspace, self.evals, record, limits, seed=cell.seed)

    def failure_of(self, exc: Exception) -> str:
        """The store's failure for an exception out of a cell's run: here always a harness bug."""
        return "harness_error"

    def make_model(self, spec: str, task: Task, record: Callable[[dict], None]) -> Any:
        if self.model_factory is None:
            from d2kbench.agent.models import make_model

            self.model_factory = make_model
        return self.model_factory(spec, base_url=self.settings.base_url, task=task, record=record)

    async def score(self, task: Task, solution: Path | None, fields: dict[str, Any],
                    record: Callable[[dict], None]) -> str | None:
        """Evaluate the run's answer into `fields`; an `infra` verdict is retried once, then fails the cell."""
        if solution is None or not Path(solution).is_file():
            fields.update(verdict="incorrect", reason="no_solution", detail="the run ended without a solution.py",
                          mode=self.settings.mode)
            return None
        fields["solution"] = Path(solution).read_text(errors="replace")
        for attempt in (1, 2):
            result: EvalResult = await self.evals.evaluate(task, Path(solution), final_options())
            record({"type": "final_evaluation", "t": time.time(), "attempt": attempt, "result": result.to_json()})
            if result.verdict != "infra":
                break
        fields.update(run_scores(result))
        return "infra" if result.verdict == "infra" else None

    def header_settings(self) -> dict[str, Any]:
        return {**asdict(self.settings), "mode": self.settings.mode, "d2kbench": d2kbench.__version__,
                "final_evaluation": asdict(final_options())}


def usage_fields(usage: Any) -> dict[str, Any]:
    return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens, "requests": usage.requests,
            "retries": usage.retries, "cost_usd": usage.cost_usd}


def describe(fields: dict[str, Any], failure: str | None) -> str:
    """A short line for the progress output."""
    if failure:
        message = (fields.get("error") or fields.get("detail") or "").strip().splitlines()
        return f"FAILED ({failure}){': ' + message[-1][:160] if message else ''}"
    verdict = fields["verdict"] + (f"/{fields['reason']}" if fields.get("reason") else "")
    speedup = fields.get("task_speedup")
    return f"{verdict}, {fields.get('end_reason')} after {fields.get('turns_used')} turns" + (
        f", speedup {speedup:.3f}" if speedup is not None else "")
