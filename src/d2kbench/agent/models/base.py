"""What every model back end shares: replies, tool calls, usage, the client protocol, `ModelError`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from d2kbench.agent.conversation import Conversation


@dataclass
class Usage:
    """Token and request counts, summed over a run with `add`. `cost_usd` is None when no price is known."""

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    retries: int = 0
    cost_usd: float | None = None

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.requests += other.requests
        self.retries += other.retries
        if other.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + other.cost_usd

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # the raw JSON text the model produced (may be malformed)

    def to_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass
class ModelReply:
    text: str
    tool_calls: list[ToolCall]
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None


class ModelError(Exception):
    """The model could not answer after the harness's retries (or answered with an unusable error)."""


class ModelClient(Protocol):
    name: str  # "openai/gpt-x", "scripted/expert", ...
    context_window: int  # tokens

    async def complete(self, conversation: Conversation, tools: list[dict]) -> ModelReply: ...
