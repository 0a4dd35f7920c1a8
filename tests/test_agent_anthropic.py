"""`anthropic/...` through the real SDK against a loopback Messages API server, for whole runs."""

import asyncio
import json

import pytest

from d2kbench.agent import AgentLimits, make_model, run_agent
from d2kbench.agent.models.retry import RetryPolicy
from d2kbench.agent.prompts import guidance_block
from d2kbench.agent.tools import TOOL_NAMES
from tests.agent_support import USAGE_IN, USAGE_OUT, Error, FakeEvals, LoopbackAPI, Reply

FAST_RETRY = RetryPolicy(max_attempts=3, base_s=0.01, cap_s=0.05)


def script(source: str) -> list:
    """A 429 (Retry-After 1 s), two calls in one reply, a 529 overload, a reply with no call, profile, submit."""
    write = json.dumps({"path": "solution.py", "content": source})
    return [
        Error(429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}, {"retry-after": "1"}),
        Reply("Writing a kernel.", [("toolu_a", "write_file", write), ("toolu_b", "read_file", '{"path": "x/../y"}')]),
        Error(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        Reply("No tool this time."),
        Reply("", [("toolu_c", "profile", "{}")]),
        Reply("", [("toolu_d", "submit", "{}")]),
    ]


def run_anthropic(toy_task, workspace, config, stream):
    api = LoopbackAPI("anthropic", script(toy_task.expert_path.read_text()))
    events = []
    with api.serve() as url:
        model = make_model("anthropic/claude-test", base_url=url, record=events.append, stream=stream,
                           retry=FAST_RETRY)
        outcome = asyncio.run(run_agent(toy_task, config, model, workspace, FakeEvals(), events.append,
                                        AgentLimits(turns=10)))
    return api, events, outcome


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_whole_run_through_the_sdk(toy_task, tmp_path, monkeypatch, stream):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    runs = {config: run_anthropic(toy_task, tmp_path / config, config, stream) for config in ("none", "L1+L2")}
    for api, events, outcome in runs.values():
        assert (outcome.end_reason, outcome.turns, outcome.submitted) == ("submit", 4, True)
        assert (outcome.usage.requests, outcome.usage.retries) == (4, 2)
        assert (outcome.usage.input_tokens, outcome.usage.output_tokens) == (4 * USAGE_IN, 4 * USAGE_OUT)
        retries = [e for e in events if e["type"] == "model_retry"]
        assert [e["status"] for e in retries] == [429, 529] and retries[0]["wait_s"] == 1.0

        bodies = [r.body for r in api.seen]
        assert len(bodies) == 6 and all(r.path == "/v1/messages" for r in api.seen)
        for body in bodies:
            assert {t["name"] for t in body["tools"]} == set(TOOL_NAMES)
            assert body.get("stream", False) == stream and body["system"].startswith("You are a GPU kernel engineer")
        messages = bodies[-1]["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user", "assistant",
                                                 "user"]
        calls = [b["id"] for b in messages[1]["content"] if b["type"] == "tool_use"]
        results = [b for b in messages[2]["content"] if b["type"] == "tool_result"]
        assert calls == ["toolu_a", "toolu_b"] and [r["tool_use_id"] for r in results] == calls
        assert "outside the workspace" not in results[0]["content"] and "'..'" in results[1]["content"]
        assert messages[4]["content"][0]["type"] == "text"  # the reminder after the reply with no tool call
        profile = messages[6]["content"][0]
        assert profile["tool_use_id"] == "toolu_c" and "registers=20" in profile["content"]

    block = guidance_block(toy_task, "L1+L2")
    assert "## L2" in block and "## L3" not in block
    for plain, guided in zip(runs["none"][0].seen, runs["L1+L2"][0].seen, strict=True):
        escaped = next(e for e in (json.dumps(block, ensure_ascii=a)[1:-1].encode() for a in (False, True))
                       if e in guided.raw)
        assert escaped not in plain.raw and guided.raw.replace(escaped, b"") == plain.raw


def test_overload_until_gave_up(toy_task, tmp_path):
    overloaded = Error(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    api = LoopbackAPI("anthropic", [overloaded] * 3)
    events = []
    with api.serve() as url:
        model = make_model("anthropic/m", base_url=url, record=events.append, stream=True, retry=FAST_RETRY)
        outcome = asyncio.run(run_agent(toy_task, "none", model, tmp_path, FakeEvals(), events.append,
                                        AgentLimits(turns=5)))
    assert outcome.end_reason == "model_error" and "529" in outcome.error and outcome.solution is None
    assert len(api.seen) == 3
