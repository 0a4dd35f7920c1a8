"""Test doubles for the agent's tests: loopback HTTP servers speaking the OpenAI and Anthropic APIs,
a fake evaluator and a fake model."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from d2kbench.agent.models.base import ModelError, ModelReply, ToolCall, Usage
from d2kbench.evaluate.result import EvalResult, Timing, WorkloadResult


@dataclass
class Reply:
    """One scripted model reply: text and (id, name, raw arguments) tool calls."""

    text: str = ""
    calls: list[tuple[str, str, str]] = field(default_factory=list)


@dataclass
class Error:
    """One scripted HTTP error."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


# -- wire formats -------------------------------------------------------------------------------------
USAGE_IN, USAGE_OUT = 100, 20


def openai_json(reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.calls:
        message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                                 for i, n, a in reply.calls]
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if reply.calls else "stop"}],
            "usage": {"prompt_tokens": USAGE_IN, "completion_tokens": USAGE_OUT, "total_tokens": USAGE_IN + USAGE_OUT}}


def openai_sse(reply: Reply) -> list[tuple[str | None, dict[str, Any] | str]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, dict[str, Any]]:
        return None, {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                      "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    events = [chunk({"role": "assistant", "content": ""})]
    for piece in (reply.text[: len(reply.text) // 2], reply.text[len(reply.text) // 2:]):
        if piece:
            events.append(chunk({"content": piece}))
    for index, (call_id, name, args) in enumerate(reply.calls):
        events.append(chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                             "function": {"name": name, "arguments": ""}}]}))
        for piece in (args[: len(args) // 2], args[len(args) // 2:]):  # arguments arrive in pieces
            events.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    events.append(chunk({}, "tool_calls" if reply.calls else "stop"))
    events.append((None, {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                          "choices": [], "usage": {"prompt_tokens": USAGE_IN, "completion_tokens": USAGE_OUT,
                                                   "total_tokens": USAGE_IN + USAGE_OUT}}))
    events.append((None, "[DONE]"))
    return events


def anthropic_blocks(reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    for call_id, name, args in reply.calls:
        blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": json.loads(args)})
    return blocks


def anthropic_json(reply: Reply) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": anthropic_blocks(reply),
            "stop_reason": "tool_use" if reply.calls else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": USAGE_IN, "output_tokens": USAGE_OUT}}


def anthropic_sse(reply: Reply) -> list[tuple[str | None, dict[str, Any] | str]]:
    events: list[tuple[str | None, dict[str, Any] | str]] = [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": {"input_tokens": USAGE_IN, "output_tokens": 1}}})]
    for index, block in enumerate(anthropic_blocks(reply)):
        if block["type"] == "text":
            start, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}),
                   ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
                   ("content_block_stop", {"type": "content_block_stop", "index": index})]
    events += [("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use" if reply.calls
                                                                       else "end_turn", "stop_sequence": None},
                                  "usage": {"output_tokens": USAGE_OUT}}),
               ("message_stop", {"type": "message_stop"})]
    return events


WIRE = {"openai": (openai_json, openai_sse), "anthropic": (anthropic_json, anthropic_sse)}


# -- the loopback server ------------------------------------------------------------------------------
@dataclass
class SeenRequest:
    path: str
    raw: bytes

    @property
    def body(self) -> dict[str, Any]:
        return json.loads(self.raw)


class LoopbackAPI:
    """Serves scripted replies and errors in order, as JSON or SSE as each request asks; records every request."""

    def __init__(self, protocol: str, script: list[Reply | Error]):
        self.protocol, self.script, self.seen = protocol, list(script), []
        self._lock = threading.Lock()

    def next_action(self, raw: bytes, path: str) -> Reply | Error:
        with self._lock:
            self.seen.append(SeenRequest(path, raw))
            if not self.script:
                return Error(500, {"error": {"type": "api_error", "message": "the test's script ran out"}})
            return self.script.pop(0)

    @contextmanager
    def serve(self) -> Iterator[str]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                action = api.next_action(raw, self.path)
                if isinstance(action, Error):
                    self.send_json(action.status, action.body, action.headers)
                elif json.loads(raw).get("stream"):
                    self.send_sse(WIRE[api.protocol][1](action))
                else:
                    self.send_json(200, WIRE[api.protocol][0](action), {})

            def send_json(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def send_sse(self, events: list[tuple[str | None, dict[str, Any] | str]]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for name, data in events:
                    text = data if isinstance(data, str) else json.dumps(data)
                    self.wfile.write(((f"event: {name}\n" if name else "") + f"data: {text}\n\n").encode())
                    self.wfile.flush()
                self.close_connection = True

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
            thread.join()


# -- fakes ---------------------------------------------------------------------------------------------
class FakeEvals:
    """An EvalService that answers at once with a fixed verdict, and remembers what it was asked."""

    def __init__(self, verdict: str = "pass", gpu: bool = False):
        self.verdict, self.gpu, self.calls = verdict, gpu, []

    async def evaluate(self, task, candidate: Path, options) -> EvalResult:
        self.calls.append(("evaluate", candidate.read_text(), options))
        result = EvalResult(task=task.id, candidate=str(candidate), mode="gpu" if self.gpu else "interpreter")
        for w in task.split("scored" if self.gpu else "cpu"):
            wr = WorkloadResult(w.name, w.split, correct=self.verdict == "pass")
            if self.gpu and options.time and self.verdict == "pass":
                wr.timings = {"candidate": Timing(0.5, 0.4, 0.6, 30), "reference": Timing(1.0, 0.9, 1.1, 30)}
                wr.speedup, wr.sol_fraction = 2.0, 0.42
            result.workloads.append(wr)
        if self.verdict != "pass":
            result.verdict, result.reason, result.detail = self.verdict, "mismatch", "z differs at [3]"
        return result

    async def compile_report(self, task, candidate: Path) -> list[dict]:
        self.calls.append(("compile_report", candidate.read_text(), None))
        return [{"kernel": "k", "constexprs": {"BLOCK": "64"}, "num_warps": 4, "num_stages": 2, "ok": True,
                 "registers": 20, "spill_store_bytes": 0, "spill_load_bytes": 0, "shared_bytes": 0,
                 "stack_frame_bytes": 0, "wgmma": False}]


class FakeModel:
    """A model that gives scripted replies in order (a ModelError instance is raised instead); then submits."""

    name = "fake/model"

    def __init__(self, replies: list[Reply | ModelError], context_window: int = 1_000_000, delay_s: float = 0.0):
        self.replies, self.context_window, self.delay_s = list(replies), context_window, delay_s
        self.seen: list[list] = []

    async def complete(self, conversation, tools) -> ModelReply:
        self.seen.append([(m.role, m.text, m.call_id) for m in conversation.messages])
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        item = self.replies.pop(0) if self.replies else Reply(calls=[("end", "submit", "{}")])
        if isinstance(item, ModelError):
            raise item
        calls = [ToolCall(i, n, a) for i, n, a in item.calls]
        return ModelReply(item.text, calls, Usage(input_tokens=10, output_tokens=2, requests=1), None)
