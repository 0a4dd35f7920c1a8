"""Scripted policies that need no network: `scripted/expert` and `scripted/replay:PATH`."""

from __future__ import annotations

import json
from pathlib import Path

from d2kbench.agent.conversation import Conversation
from d2kbench.agent.models.base import ModelReply, ToolCall, Usage
from d2kbench.suite import Task

SCRIPTED_CONTEXT_WINDOW = 1_000_000


def turns_taken(conversation: Conversation) -> int:
    return sum(1 for m in conversation.messages if m.role == "assistant")


def submit_reply(turn: int) -> ModelReply:
    return ModelReply("", [ToolCall(f"call_{turn}_0", "submit", "{}")], Usage(), "tool_use")


class ExpertScript:
    """The pipeline's sanity check: writes the task's expert kernel, then runs tests, benchmark, profile, submit."""

    name = "scripted/expert"
    context_window = SCRIPTED_CONTEXT_WINDOW

    def __init__(self, task: Task | None):
        if task is None:
            raise ValueError("scripted/expert needs the task (to find its expert kernel)")
        self.source = task.expert_path.read_text(encoding="utf-8")

    async def complete(self, conversation: Conversation, tools: list[dict]) -> ModelReply:
        turn = turns_taken(conversation) + 1
        if turn == 1:
            args = json.dumps({"path": "solution.py", "content": self.source})
            return ModelReply("Writing the expert kernel.", [ToolCall("call_1_0", "write_file", args)], Usage(),
                              "tool_use")
        steps = {2: "run_tests", 3: "benchmark", 4: "profile"}
        if turn in steps:
            return ModelReply("", [ToolCall(f"call_{turn}_0", steps[turn], "{}")], Usage(), "tool_use")
        return submit_reply(turn)


def load_responses(path: Path) -> list[ModelReply]:
    """The model replies of a trajectory JSONL (its `response` events, in order).

    A last line cut off by a crash is skipped; any other unreadable line is an error.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    replies = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            if number == len(lines):
                break
            raise ValueError(f"{path}:{number}: not a JSON line") from None
        if event.get("type") == "response":
            calls = [ToolCall(c["id"], c["name"], c["arguments"]) for c in event.get("tool_calls", [])]
            replies.append(ModelReply(event.get("text", ""), calls, Usage(), event.get("stop_reason")))
    return replies


class ReplayScript:
    """Replays the replies of a recorded trajectory, one per turn; when they run out it submits."""

    context_window = SCRIPTED_CONTEXT_WINDOW

    def __init__(self, path: str):
        self.name = f"scripted/replay:{path}"
        self.replies = load_responses(Path(path))

    async def complete(self, conversation: Conversation, tools: list[dict]) -> ModelReply:
        turn = turns_taken(conversation)
        if turn < len(self.replies):
            return self.replies[turn]
        return submit_reply(turn + 1)
