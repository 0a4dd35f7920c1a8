"""`openai/NAME`: any OpenAI-compatible chat-completions server, through the official `openai` SDK."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any

from d2kbench.agent.conversation import Conversation
from d2kbench.agent.models.base import ModelReply, ToolCall, Usage
from d2kbench.agent.models.retry import RetryPolicy, with_retries
from d2kbench.agent.models.sdk import api_key, classify_sdk_error, cost_usd


def to_openai_messages(conversation: Conversation) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": conversation.system}]
    for m in conversation.messages:
        if m.role == "user":
            out.append({"role": "user", "content": m.text})
        elif m.role == "assistant":
            message: dict[str, Any] = {"role": "assistant", "content": m.text or None}
            if m.tool_calls:
                message["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in m.tool_calls
                ]
            elif not m.text:
                message["content"] = ""
            out.append(message)
        else:
            out.append({"role": "tool", "tool_call_id": m.call_id, "content": m.text})
    return out


def to_openai_tools(tools: list[dict]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": t} for t in tools]


class OpenAIChatModel:
    def __init__(self, model: str, *, base_url: str | None, record: Callable[[dict], None] | None,
                 stream: bool, context_window: int, timeout_s: float, max_tokens: int | None,
                 retry: RetryPolicy, prices: dict[str, dict[str, float]]):
        import openai  # optional extra: pip install -e .[openai]

        self._sdk = openai
        self.model, self.name = model, f"openai/{model}"
        self.context_window, self.stream, self.max_tokens = context_window, stream, max_tokens
        self.record, self.retry, self.prices = record, retry, prices
        base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        self.client = openai.AsyncOpenAI(api_key=api_key("OPENAI_API_KEY", base_url), base_url=base_url,
                                         max_retries=0, timeout=timeout_s)
        self._rng = random.Random()

    async def complete(self, conversation: Conversation, tools: list[dict]) -> ModelReply:
        request: dict[str, Any] = {"model": self.model, "messages": to_openai_messages(conversation),
                                   "seed": conversation.seed}
        if tools:  # the API refuses an empty tools array (the judges send none)
            request["tools"] = to_openai_tools(tools)
        if self.max_tokens:
            request["max_tokens"] = self.max_tokens
        attempt = self._streamed if self.stream else self._whole
        reply, retries = await with_retries(lambda: attempt(request), lambda e: classify_sdk_error(e, self._sdk),
                                            self.retry, self.record, self._rng)
        reply.usage.retries = retries
        reply.usage.cost_usd = cost_usd(self.prices, self.name, reply.usage)
        return reply

    async def _whole(self, request: dict[str, Any]) -> ModelReply:
        response = await self.client.chat.completions.create(**request)
        choice = response.choices[0]
        calls = [ToolCall(c.id, c.function.name, c.function.arguments or "")
                 for c in choice.message.tool_calls or []]
        return ModelReply(choice.message.content or "", calls, self._usage(response.usage), choice.finish_reason)

    async def _streamed(self, request: dict[str, Any]) -> ModelReply:
        stream = await self.client.chat.completions.create(**request, stream=True,
                                                           stream_options={"include_usage": True})
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage, finish = Usage(requests=1), None
        async for chunk in stream:
            if chunk.usage is not None:
                usage = self._usage(chunk.usage)
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                delta = choice.delta
                if delta is None:
                    continue
                if delta.content:
                    text.append(delta.content)
                for part in delta.tool_calls or []:
                    call = calls.setdefault(part.index, {"id": "", "name": "", "arguments": []})
                    call["id"] = part.id or call["id"]
                    if part.function is not None:
                        call["name"] = call["name"] or part.function.name or ""
                        call["arguments"].append(part.function.arguments or "")
        tool_calls = [ToolCall(c["id"], c["name"], "".join(c["arguments"])) for _, c in sorted(calls.items())]
        return ModelReply("".join(text), tool_calls, usage, finish)

    @staticmethod
    def _usage(raw: Any) -> Usage:
        if raw is None:
            return Usage(requests=1)
        return Usage(input_tokens=raw.prompt_tokens or 0, output_tokens=raw.completion_tokens or 0, requests=1)
