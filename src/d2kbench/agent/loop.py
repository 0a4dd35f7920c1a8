"""The turn loop: one model response is one turn, whatever the number of tool calls it makes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from d2kbench.agent import prompts
from d2kbench.agent.conversation import Conversation
from d2kbench.agent.evalservice import EvalService, service_uses_gpu
from d2kbench.agent.models.base import ModelClient, ModelError, ModelReply, ToolCall, Usage
from d2kbench.agent.tools import SOLUTION, TOOLS, Toolbox
from d2kbench.suite import Task


@dataclass
class AgentLimits:
    turns: int = 350
    wall_clock_s: float = 4 * 3600
    tool_output_chars: int = 16000


@dataclass
class AgentOutcome:
    end_reason: str  # "submit" | "turn_budget" | "wall_clock" | "model_error"
    turns: int
    submitted: bool
    solution: Path | None  # workspace/solution.py at the end (None if never written)
    usage: Usage = field(default_factory=Usage)
    error: str | None = None  # the model error's message when end_reason == "model_error"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["solution"] = str(self.solution) if self.solution else None
        return out


class _Run:
    """The state of one run of `run_agent`."""

    def __init__(self, task: Task, config: str, model: ModelClient, workspace: Path, evals: EvalService,
                 record: Callable[[dict], None], limits: AgentLimits, seed: int):
        gpu = service_uses_gpu(evals)
        self.model, self.record, self.limits, self.config, self.seed = model, record, limits, config, seed
        self.toolbox = Toolbox(task, workspace, evals, gpu, limits.tool_output_chars)
        self.conversation = Conversation(prompts.system_prompt(gpu, limits.turns), seed=seed)
        self.conversation.add_user(prompts.task_message(task, config, gpu))
        self.usage = Usage()
        self.turns = 0

    def emit(self, event_type: str, **fields: Any) -> None:
        self.record({"type": event_type, "t": time.time(), **fields})

    async def run_turns(self) -> tuple[str, bool, str | None]:
        """Turns until submit, the budget, the deadline or a model error: (end reason, submitted, error)."""
        self.emit("prompt", model=self.model.name, config=self.config, seed=self.seed,
                  system=self.conversation.system, tools=TOOLS, user=self.conversation.messages[0].text)
        deadline = time.monotonic() + self.limits.wall_clock_s
        while self.turns < self.limits.turns:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "wall_clock", False, None
            try:
                submitted = await asyncio.wait_for(self.turn(), remaining)
            except TimeoutError:
                return "wall_clock", False, None
            except ModelError as exc:
                return "model_error", False, str(exc)
            if submitted:
                return "submit", True, None
        return "turn_budget", False, None

    async def turn(self) -> bool:
        """One turn: the model's response, then its tool calls in order; True when it submitted."""
        elided = self.conversation.fit(self.model.context_window, TOOLS)
        if elided:
            self.emit("elided", items=elided)
        reply = await self.model.complete(self.conversation, TOOLS)
        self.turns += 1
        reply.tool_calls = [c if c.id else ToolCall(f"call_{self.turns}_{i}", c.name, c.arguments)
                            for i, c in enumerate(reply.tool_calls)]
        self.usage.add(reply.usage)
        self.conversation.add_reply(reply)
        self.emit("response", turn=self.turns, text=reply.text, tool_calls=[c.to_json() for c in reply.tool_calls],
                  usage=reply.usage.to_json(), stop_reason=reply.stop_reason)
        if not reply.tool_calls:
            text = prompts.reminder(self.limits.turns - self.turns)
            self.conversation.add_user(text)
            self.emit("reminder", turn=self.turns, text=text)
            return False
        return await self.run_tools(reply)

    async def run_tools(self, reply: ModelReply) -> bool:
        """Each call in order; calls after a `submit` are answered as skipped (every call gets a result)."""
        submitted = False
        for call in reply.tool_calls:
            start = time.monotonic()
            if submitted:
                output = "skipped: the run ended with submit"
            else:
                outcome = await self.toolbox.call(call)
                output, submitted = outcome.output, outcome.submitted
            self.conversation.add_tool_result(call, output)
            self.emit("tool_result", turn=self.turns, call_id=call.id, name=call.name, output=output,
                      elapsed_s=round(time.monotonic() - start, 3))
        return submitted


async def run_agent(task: Task, config: str, model: ModelClient, workspace: Path, evals: EvalService,
                    record: Callable[[dict], None], limits: AgentLimits, seed: int = 0) -> AgentOutcome:
    """Run one agent on one task under one guidance config in `workspace`; every event goes to `record`."""
    workspace.mkdir(parents=True, exist_ok=True)
    run = _Run(task, config, model, workspace, evals, record, limits, seed)
    end_reason, submitted, error = await run.run_turns()
    solution = workspace / SOLUTION
    outcome = AgentOutcome(end_reason, run.turns, submitted, solution if solution.is_file() else None, run.usage,
                           error)
    run.emit("end", **outcome.to_json())
    return outcome
