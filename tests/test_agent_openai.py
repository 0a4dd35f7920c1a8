"""`openai/...` through the real SDK against a loopback chat-completions server, for whole runs."""

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
    """A whole run: a 429 (Retry-After 1 s), two calls in one reply, a 500, a reply with no call, tests, submit."""
    rate_limited = Error(429, {"error": {"message": "slow down", "type": "rate_limit"}}, {"Retry-After": "1"})
    server_error = Error(500, {"error": {"message": "boom", "type": "server_error"}})
    write = json.dumps({"path": "solution.py", "content": source})
    return [
        rate_limited,
        Reply("Writing a first kernel.", [("call_a", "write_file", write), ("call_b", "list_files", "{}")]),
        server_error,
        Reply("Thinking aloud without a tool."),
        Reply("", [("call_c", "run_tests", "")]),
        Reply("Done.", [("call_d", "submit", "{}")]),
    ]


def run_openai(toy_task, tmp_path, config, stream):
    api = LoopbackAPI("openai", script(toy_task.expert_path.read_text()))
    events = []
    with api.serve() as url:
        model = make_model("openai/test-model", base_url=url + "/v1", record=events.append, stream=stream,
                           retry=FAST_RETRY)
        outcome = asyncio.run(run_agent(toy_task, config, model, tmp_path / config, FakeEvals(),
                                                      events.append, AgentLimits(turns=10), seed=3))
    return api, events, outcome


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_whole_run_through_the_sdk(toy_task, tmp_path, monkeypatch, stream):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    runs = {config: run_openai(toy_task, tmp_path, config, stream) for config in ("none", "L1+L2+L3")}

    for api, events, outcome in runs.values():
        assert (outcome.end_reason, outcome.turns, outcome.submitted) == ("submit", 4, True)
        assert outcome.solution.read_text() == toy_task.expert_path.read_text()
        assert (outcome.usage.requests, outcome.usage.retries) == (4, 2)
        assert (outcome.usage.input_tokens, outcome.usage.output_tokens) == (4 * USAGE_IN, 4 * USAGE_OUT)
        assert outcome.usage.cost_usd is None  # no price table given
        retries = [e for e in events if e["type"] == "model_retry"]
        assert [(e["status"], e["attempt"]) for e in retries] == [(429, 1), (500, 1)]
        assert retries[0]["wait_s"] == 1.0  # Retry-After honoured
        assert [e["turn"] for e in events if e["type"] == "reminder"] == [2]

        bodies = [r.body for r in api.seen]
        assert len(bodies) == 6 and all(r.path == "/v1/chat/completions" for r in api.seen)
        for body in bodies:
            assert body["model"] == "test-model" and body.get("stream", False) == stream
            assert {t["function"]["name"] for t in body["tools"]} == set(TOOL_NAMES)
            assert body["seed"] == 3
        assert_tool_results_answer_their_calls(bodies[-1]["messages"])
        last = bodies[-1]["messages"]
        assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "tool", "assistant", "user",
                                             "assistant", "tool"]
        assert "wrote" in last[3]["content"] and "solution.py" in last[4]["content"]
        assert "verdict: pass" in last[8]["content"]

    # guidance only in the guided run, and the requests identical byte for byte outside it
    block = guidance_block(toy_task, "L1+L2+L3")
    plain, guided = runs["none"][0].seen, runs["L1+L2+L3"][0].seen
    for p, g in zip(plain, guided, strict=True):
        escaped = json_escaped(block, g.raw)
        assert escaped not in p.raw and g.raw.count(escaped) == 1
        assert g.raw.replace(escaped, b"") == p.raw
    assert b"## L1" not in b"".join(r.raw for r in plain)


def json_escaped(text: str, raw: bytes) -> bytes:
    """`text` as the SDK escaped it inside a JSON string of `raw`."""
    for ascii_only in (False, True):
        escaped = json.dumps(text, ensure_ascii=ascii_only)[1:-1].encode()
        if escaped in raw:
            return escaped
    raise AssertionError("the guidance block is not in the request")


def assert_tool_results_answer_their_calls(messages):
    pending: list[str] = []
    for m in messages:
        if m["role"] == "assistant":
            assert not pending, f"calls {pending} got no result"
            pending = [c["id"] for c in m.get("tool_calls") or []]
        elif m["role"] == "tool":
            assert m["tool_call_id"] == pending.pop(0)
    assert not pending


def test_model_error_after_retries_ends_the_run(toy_task, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    write = json.dumps({"path": "solution.py", "content": "print(1)\n"})
    failing = [Error(503, {"error": {"message": "down", "type": "server_error"}})] * 3
    api = LoopbackAPI("openai", [Reply("", [("c1", "write_file", write)]), *failing])
    events = []
    with api.serve() as url:
        model = make_model("openai/m", base_url=url, record=events.append, stream=False, retry=FAST_RETRY)
        outcome = asyncio.run(run_agent(toy_task, "none", model, tmp_path, FakeEvals(), events.append,
                                                      AgentLimits(turns=10)))
    assert (outcome.end_reason, outcome.turns, outcome.submitted) == ("model_error", 1, False)
    assert "503" in outcome.error and "gave up after 3 attempts" in outcome.error
    assert outcome.solution.read_text() == "print(1)\n"  # the last one written is the answer
    assert [e["attempt"] for e in events if e["type"] == "model_retry"] == [1, 2]
    assert events[-1]["type"] == "end" and events[-1]["end_reason"] == "model_error"


def test_client_error_is_not_retried(toy_task, tmp_path):
    api = LoopbackAPI("openai", [Error(400, {"error": {"message": "bad request", "type": "invalid_request"}})])
    events = []
    with api.serve() as url:
        model = make_model("openai/m", base_url=url, record=events.append, stream=True, retry=FAST_RETRY)
        outcome = asyncio.run(run_agent(toy_task, "none", model, tmp_path, FakeEvals(), events.append,
                                                      AgentLimits(turns=10)))
    assert outcome.end_reason == "model_error" and "not retryable" in outcome.error
    assert len(api.seen) == 1 and not [e for e in events if e["type"] == "model_retry"]
