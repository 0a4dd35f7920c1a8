"""The judge's answer schema, retries, scores and samples, with scripted judge replies (no network)."""

import asyncio
import json
import math

import pytest

from d2kbench.judge.ask import ask_judge
from d2kbench.judge.models import ReplayJudge, make_judge_model
from d2kbench.judge.schema import AnswerError, parse_answer
from d2kbench.judge.scoring import scores, summarise
from d2kbench.suite import find_task

QUANT = "quant_per_token_group_fp8"


@pytest.fixture(scope="module")
def task():
    return find_task(QUANT)


def answer(task, unmet=(), drop=(), **overrides) -> dict:
    """A judge answer for `task`: every property met except `unmet`, without `drop`; `overrides` replace items."""
    items = [{"id": p.id, "met": p.id not in unmet, "justification": f"checked {p.id}"}
             for p in task.rubric if p.id not in drop]
    return {"properties": [overrides.get(item["id"], item) for item in items]}


class Recording:
    """Wraps a judge client and keeps the conversation of every request."""

    def __init__(self, inner):
        self.inner, self.name, self.context_window, self.requests = inner, inner.name, inner.context_window, []

    async def complete(self, conversation, tools):
        self.requests.append([(m.role, m.text) for m in conversation.messages])
        return await self.inner.complete(conversation, tools)


def replay(tmp_path, replies, name="replies.json"):
    path = tmp_path / name
    path.write_text(json.dumps(replies))
    return Recording(make_judge_model(f"scripted/judge:{path}"))


def ask(model, task, retries=2):
    return asyncio.run(ask_judge(model, "system", "user", task.rubric, retries=retries))


def test_a_valid_answer_gives_one_verdict_per_property_in_rubric_order(task):
    verdicts = parse_answer(json.dumps(answer(task, unmet=["single_pass"])), task.rubric)
    assert list(verdicts) == [p.id for p in task.rubric]
    assert verdicts["single_pass"].met is False and verdicts["exact_division"].met is True
    assert verdicts["exact_division"].justification == "checked exact_division"
    fenced = "```json\n" + json.dumps(answer(task)) + "\n```"
    assert all(v.met for v in parse_answer(fenced, task.rubric).values())


@pytest.mark.parametrize("reply, message", [
    ("{'properties': []}", "not a JSON object"),
    ('Here you are: {"properties": []}', "not a JSON object"),
    ('{"verdicts": []}', 'single key "properties"'),
    ("[]", 'single key "properties"'),
])
def test_malformed_answers_are_refused(task, reply, message):
    with pytest.raises(AnswerError, match=message):
        parse_answer(reply, task.rubric)


def test_partial_wrong_typed_duplicate_and_unknown_items_are_named(task):
    with pytest.raises(AnswerError, match="missing properties: grid_fills_sms, hw_fp8_conversion$"):
        parse_answer(json.dumps(answer(task, drop=["grid_fills_sms", "hw_fp8_conversion"])), task.rubric)
    wrong = answer(task, single_pass={"id": "single_pass", "met": "yes", "justification": "x"},
                   vector_loads={"id": "vector_loads", "met": True, "justification": ""})
    with pytest.raises(AnswerError) as error:
        parse_answer(json.dumps(wrong), task.rubric)
    assert 'properties[0]: met must be true or false, got "yes"' in str(error.value)
    assert "properties[7]: justification must be a non-empty single-line string" in str(error.value)
    twice = answer(task)
    twice["properties"].append({"id": "single_pass", "met": True, "justification": "again"})
    twice["properties"].append({"id": "warp_specialised", "met": True, "justification": "?"})
    with pytest.raises(AnswerError) as error:
        parse_answer(json.dumps(twice), task.rubric)
    assert "'single_pass' appears twice" in str(error.value) and 'unknown property id "warp_specialised"' in str(
        error.value)


def test_valid_first_answer_needs_one_request(tmp_path, task):
    model = replay(tmp_path, [answer(task)])
    sample = ask(model, task)
    assert sample.failure is None and sample.attempts == 1 and len(model.requests) == 1
    assert all(v.met for v in sample.verdicts.values())


def test_malformed_json_is_retried_with_the_error_sent_back(tmp_path, task):
    model = replay(tmp_path, ['{"properties": [', answer(task, unmet=["grid_fills_sms"])])
    sample = ask(model, task)
    assert sample.failure is None and sample.attempts == 2 and not sample.verdicts["grid_fills_sms"].met
    second = model.requests[1]
    assert [role for role, _ in second] == ["user", "assistant", "user"]
    assert second[1][1] == '{"properties": [' and "not a JSON object" in second[2][1]


def test_partial_answers_become_a_failure_after_the_retries(tmp_path, task):
    partial = answer(task, drop=["flat_grid_order"])
    model = replay(tmp_path, [partial] * 3 + [answer(task)])
    sample = ask(model, task, retries=2)
    assert sample.verdicts is None and sample.attempts == 3 and len(model.requests) == 3
    assert "no valid answer after 3 attempts" in sample.failure and "flat_grid_order" in sample.failure
    assert all("missing properties: flat_grid_order" in e for e in sample.errors)


def test_wrong_types_are_retried_then_fail(tmp_path, task):
    wrong = answer(task, single_pass={"id": "single_pass", "met": 1, "justification": "x"})
    sample = ask(replay(tmp_path, [wrong, wrong]), task, retries=1)
    assert sample.verdicts is None and sample.attempts == 2 and "met must be true or false, got 1" in sample.failure


def test_a_model_error_is_a_failure_not_a_guess(tmp_path, task):
    sample = ask(replay(tmp_path, ['{"oops": 1}']), task, retries=3)
    assert sample.verdicts is None and sample.failure.startswith("model error:") and "no canned reply" in sample.failure


def test_replay_judge_refuses_a_bad_file(tmp_path):
    (tmp_path / "bad.json").write_text('{"not": "a list"}')
    with pytest.raises(ValueError, match="JSON list"):
        ReplayJudge(str(tmp_path / "bad.json"))


def test_layer_and_combined_scores_by_hand(task):
    # quant rubric weights. L1: single_pass 3, eps_clamped_fp32_absmax 2, exact_division 2, exact_pow2_scale 1;
    # L2: multi_group_tiles 2, layout_matched_tiles 3, masks_and_int64 1;
    # L3: vector_loads 2, grid_fills_sms 2, flat_grid_order 1, hw_fp8_conversion 1.
    met = {p.id: p.id not in {"single_pass", "exact_pow2_scale", "layout_matched_tiles"} for p in task.rubric}
    assert scores(task.rubric, met) == {"L1": 100 * 4 / 8, "L2": 100 * 3 / 6, "L3": 100.0,
                                        "combined": 100 * 13 / 20}
    with pytest.raises(ValueError, match="no verdict for single_pass"):
        scores(task.rubric, {k: v for k, v in met.items() if k != "single_pass"})


def test_samples_mean_and_spread_by_hand(task):
    everything = {p.id: True for p in task.rubric}
    samples = [everything, {**everything, "grid_fills_sms": False},
               {**everything, "grid_fills_sms": False, "single_pass": False}]
    summary = summarise(task.rubric, samples)
    grid = summary["properties"]["grid_fills_sms"]
    assert grid["mean"] == pytest.approx(1 / 3) and grid["spread"] == pytest.approx(math.sqrt(2 / 9))
    assert summary["properties"]["exact_division"] == {"mean": 1.0, "spread": 0.0}
    combined = [100.0, 100 * 18 / 20, 100 * 15 / 20]  # grid_fills_sms weighs 2, single_pass 3
    mean = sum(combined) / 3
    assert summary["scores"]["combined"]["mean"] == pytest.approx(mean)
    spread = math.sqrt(sum((c - mean) ** 2 for c in combined) / 3)
    assert summary["scores"]["combined"]["spread"] == pytest.approx(spread)
    l3 = [100.0, 100 * 4 / 6, 100 * 4 / 6]
    assert summary["scores"]["L3"]["mean"] == pytest.approx(sum(l3) / 3)


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_a_judge_request_through_a_real_sdk_sends_no_tools(tmp_path, task, monkeypatch, protocol):
    from d2kbench.agent.models.retry import RetryPolicy
    from tests.agent_support import LoopbackAPI, Reply

    monkeypatch.delenv(f"{protocol.upper()}_API_KEY", raising=False)
    monkeypatch.delenv(f"{protocol.upper()}_BASE_URL", raising=False)
    api = LoopbackAPI(protocol, [Reply(json.dumps(answer(task, unmet=["vector_loads"])))])
    with api.serve() as url:
        judge = make_judge_model(f"{protocol}/judge-model", base_url=url + ("/v1" if protocol == "openai" else ""))
        judge.retry = RetryPolicy(max_attempts=1)
        sample = ask(judge, task)
    assert sample.failure is None and not sample.verdicts["vector_loads"].met
    [request] = api.seen
    assert "tools" not in request.body and "user" in json.dumps(request.body["messages"])
