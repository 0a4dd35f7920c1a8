"""Judge and designer models: the agent's back ends, plus `scripted/judge:PATH` for tests.

`scripted/judge:PATH` replays canned replies from a JSON file holding a list: a string entry is sent
as the reply text verbatim (malformed JSON included), any other entry as its JSON text. Replies are
used in order, one per request, across every request the client receives; when none is left the
client raises `ModelError`. Nothing in `d2kbench.agent` changes for it.
"""

from __future__ import annotations

import json
from pathlib import Path

from d2kbench.agent.conversation import Conversation
from d2kbench.agent.models import ModelClient, ModelError, ModelReply, Usage, make_model
from d2kbench.suite import Task

REPLAY_PREFIX = "scripted/judge:"


class ReplayJudge:
    """Sends the canned replies of a JSON file, one per request."""

    context_window = 1_000_000

    def __init__(self, path: str):
        self.name = f"{REPLAY_PREFIX}{path}"
        try:
            entries = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{self.name}: cannot read the canned replies ({exc})") from None
        if not isinstance(entries, list):
            raise ValueError(f"{self.name}: the file must hold a JSON list of replies")
        self.replies = [e if isinstance(e, str) else json.dumps(e) for e in entries]
        self.requests = 0

    async def complete(self, conversation: Conversation, tools: list[dict]) -> ModelReply:
        if self.requests >= len(self.replies):
            raise ModelError(f"{self.name}: no canned reply left for request {self.requests + 1}")
        reply = self.replies[self.requests]
        self.requests += 1
        return ModelReply(reply, [], Usage(requests=1), "end_turn")


def make_judge_model(spec: str, *, base_url: str | None = None, task: Task | None = None) -> ModelClient:
    """The client for a judge or designer spec: `scripted/judge:PATH`, or any spec `make_model` takes."""
    if spec.startswith(REPLAY_PREFIX):
        path = spec.removeprefix(REPLAY_PREFIX)
        if not path:
            raise ValueError(f"model {spec!r}: expected scripted/judge:PATH")
        return ReplayJudge(path)
    return make_model(spec, base_url=base_url, task=task, stream=False)
