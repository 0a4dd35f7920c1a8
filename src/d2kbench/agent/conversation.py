"""The provider-neutral conversation: messages, a token estimate, and the elision policy.

Elision (the same for every model, task and guidance config; docs/agent.md states it): when the
estimate passes `ELIDE_AT` of the model's context window, the oldest tool outputs are replaced by a
one-line marker, oldest first, until the estimate is under `ELIDE_TO`; if that is not enough, the
`content` of the oldest `write_file` calls is elided the same way. The messages of the latest turn
(its call and its results) are never elided. Elided text stays elided: later requests share the prefix.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from d2kbench.agent.models.base import ModelReply, ToolCall

CHARS_PER_TOKEN = 3.0  # conservative: real tokenizers give about 3.5-4 characters per token of code and prose
MESSAGE_OVERHEAD_TOKENS = 8
ELIDE_AT = 0.75  # of the context window
ELIDE_TO = 0.5


@dataclass
class Message:
    """One message. `role` is `user`, `assistant` (text and tool calls) or `tool` (the result of one call)."""

    role: str
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    call_id: str | None = None  # tool results: the call they answer
    tool_name: str | None = None


@dataclass
class Conversation:
    system: str
    messages: list[Message] = field(default_factory=list)
    seed: int = 0

    def add_user(self, text: str) -> None:
        self.messages.append(Message("user", text))

    def add_reply(self, reply: ModelReply) -> None:
        self.messages.append(Message("assistant", reply.text, list(reply.tool_calls)))

    def add_tool_result(self, call: ToolCall, output: str) -> None:
        self.messages.append(Message("tool", output, call_id=call.id, tool_name=call.name))

    def estimate_tokens(self, tools: list[dict]) -> int:
        chars = len(self.system) + len(json.dumps(tools))
        for m in self.messages:
            chars += len(m.text) + sum(len(c.name) + len(c.arguments) + len(c.id) for c in m.tool_calls)
        return math.ceil(chars / CHARS_PER_TOKEN) + MESSAGE_OVERHEAD_TOKENS * (len(self.messages) + 1)

    def fit(self, context_window: int, tools: list[dict]) -> list[dict]:
        """Apply the elision policy; returns one record per elided item (empty when nothing was needed)."""
        if self.estimate_tokens(tools) <= ELIDE_AT * context_window:
            return []
        target = ELIDE_TO * context_window
        protected = self._latest_turn_start()
        elided: list[dict] = []
        for m in self.messages[:protected]:
            if self.estimate_tokens(tools) <= target:
                return elided
            if m.role == "tool" and not m.text.startswith(ELIDED_PREFIX):
                elided.append({"call_id": m.call_id, "kind": "tool_output", "chars": len(m.text)})
                m.text = elided_marker(len(m.text))
        for m in self.messages[:protected]:
            for i, call in enumerate(m.tool_calls):
                if self.estimate_tokens(tools) <= target:
                    return elided
                shrunk = elide_write_content(call)
                if shrunk is not None:
                    elided.append({"call_id": call.id, "kind": "write_file_content",
                                   "chars": len(call.arguments) - len(shrunk.arguments)})
                    m.tool_calls[i] = shrunk
        return elided

    def _latest_turn_start(self) -> int:
        """Index of the latest assistant message (its turn is never elided)."""
        for i in range(len(self.messages) - 1, -1, -1):
            if self.messages[i].role == "assistant":
                return i
        return len(self.messages)


ELIDED_PREFIX = "[elided"


def elided_marker(chars: int) -> str:
    return f"{ELIDED_PREFIX}: {chars} characters of an old tool output, removed to fit the context window]"


def elide_write_content(call: ToolCall) -> ToolCall | None:
    """The call with its `content` argument elided, or None when it is not a write_file call worth shrinking."""
    if call.name != "write_file":
        return None
    try:
        args = json.loads(call.arguments)
    except ValueError:
        return None
    content = args.get("content") if isinstance(args, dict) else None
    if not isinstance(content, str) or len(content) < 200 or content.startswith(ELIDED_PREFIX):
        return None
    args["content"] = f"{ELIDED_PREFIX}: {len(content)} characters of an old write_file, removed to fit the context]"
    return ToolCall(call.id, call.name, json.dumps(args))
