"""`anthropic/NAME`: the Anthropic Messages API through the official `anthropic` SDK."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from typing import Any

from d2kbench.agent.conversation import Conversation
from d2kbench.agent.models.base import ModelReply, ToolCall, Usage
from d2kbench.agent.models.retry import RetryPolicy, with_retries
from d2kbench.agent.models.sdk import api_key, classify_sdk_error, cost_usd

EMPTY_REPLY = "(no text)"  # the API refuses an empty assistant message; a reply with nothing is sent as this


def tool_input(arguments: str) -> dict[str, Any]:
    """A tool_use block's input: the arguments as a JSON object, or {} where the model's text was not one."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def to_anthropic_messages(conversation: Conversation) -> list[dict[str, Any]]:
    """Messages API messages; tool results (and any user text after them) share one user message."""
    out: list[dict[str, Any]] = []
    for m in conversation.messages:
        if m.role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m.text}] if m.text else []
            blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": tool_input(c.arguments)}
                       for c in m.tool_calls]
            out.append({"role": "assistant", "content": blocks or [{"type": "text", "text": EMPTY_REPLY}]})
            continue
        if m.role == "tool":
            block = {"type": "tool_result", "tool_use_id": m.call_id, "content": m.text}
        else:
            block = {"type": "text", "text": m.text}
        if out and out[-1]["role"] == "user":
            out[-1]["content"].append(block)
        else:
            out.append({"role": "user", "content": [block]})
    return out


def to_anthropic_tools(tools: list[dict]) -> list[dict[str, Any]]:
    return [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in tools]


class AnthropicModel:
    def __init__(self, model: str, *, base_url: str | None, record: Callable[[dict], None] | None,
                 stream: bool, context_window: int, timeout_s: float, max_tokens: int | None,
                 retry: RetryPolicy, prices: dict[str, dict[str, float]]):
        import anthropic  # optional extra: pip install -e .[anthropic]

        self._sdk = anthropic
        self.model, self.name = model, f"anthropic/{model}"
        self.context_window, self.stream, self.max_tokens = context_window, stream, max_tokens or 16384
        self.record, self.retry, self.prices = record, retry, prices
        base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL")
        self.client = anthropic.AsyncAnthropic(api_key=api_key("ANTHROPIC_API_KEY", base_url), base_url=base_url,
                                               max_retries=0, timeout=timeout_s)
        self._rng = random.Random()

    async def complete(self, conversation: Conversation, tools: list[dict]) -> ModelReply:
        request = {"model": self.model, "max_tokens": self.max_tokens, "system": conversation.system,
                   "messages": to_anthropic_messages(conversation)}
        if tools:  # the judges send none
            request["tools"] = to_anthropic_tools(tools)
        attempt = self._streamed if self.stream else self._whole
        reply, retries = await with_retries(lambda: attempt(request), lambda e: classify_sdk_error(e, self._sdk),
                                            self.retry, self.record, self._rng)
        reply.usage.retries = retries
        reply.usage.cost_usd = cost_usd(self.prices, self.name, reply.usage)
        return reply

    async def _whole(self, request: dict[str, Any]) -> ModelReply:
        response = await self.client.messages.create(**request)
        text = "".join(b.text for b in response.content if b.type == "text")
        calls = [ToolCall(b.id, b.name, json.dumps(b.input)) for b in response.content if b.type == "tool_use"]
        return ModelReply(text, calls, self._usage(response.usage), response.stop_reason)

    async def _streamed(self, request: dict[str, Any]) -> ModelReply:
        stream = await self.client.messages.create(**request, stream=True)
        blocks: dict[int, dict[str, Any]] = {}
        usage, stop = Usage(requests=1), None
        async for event in stream:
            if event.type == "message_start":
                usage = self._usage(event.message.usage)
            elif event.type == "content_block_start":
                block = event.content_block
                if block.type in ("text", "tool_use"):
                    blocks[event.index] = {"type": block.type, "id": getattr(block, "id", ""),
                                           "name": getattr(block, "name", ""), "parts": []}
            elif event.type == "content_block_delta" and event.index in blocks:
                delta = event.delta
                if delta.type == "text_delta":
                    blocks[event.index]["parts"].append(delta.text)
                elif delta.type == "input_json_delta":
                    blocks[event.index]["parts"].append(delta.partial_json)
            elif event.type == "message_delta":
                stop = event.delta.stop_reason or stop
                usage.output_tokens = event.usage.output_tokens or usage.output_tokens
        ordered = [blocks[i] for i in sorted(blocks)]
        text = "".join("".join(b["parts"]) for b in ordered if b["type"] == "text")
        calls = [ToolCall(b["id"], b["name"], "".join(b["parts"]) or "{}") for b in ordered if b["type"] == "tool_use"]
        return ModelReply(text, calls, usage, stop)

    @staticmethod
    def _usage(raw: Any) -> Usage:
        cached = (getattr(raw, "cache_creation_input_tokens", 0) or 0) + (getattr(raw, "cache_read_input_tokens", 0)
                                                                         or 0)
        return Usage(input_tokens=(raw.input_tokens or 0) + cached, output_tokens=raw.output_tokens or 0, requests=1)
