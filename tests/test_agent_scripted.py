"""Scripted back ends, the real evaluator behind LocalEvalService, make_model, retries and prompts."""

import asyncio
import email.utils
import json
import threading
import time

import pytest

from d2kbench.agent import AgentLimits, LocalEvalService, make_model, run_agent
from d2kbench.agent import evalservice as evalservice_module
from d2kbench.agent.models.retry import parse_retry_after
from d2kbench.agent.prompts import guidance_block, system_prompt, task_message
from d2kbench.evaluate.evaluator import EvalOptions
from d2kbench.suite import find_task
from tests.agent_support import FakeEvals


@pytest.fixture(scope="module")
def expert_run(tmp_path_factory):
    """scripted/expert on a real suite task, with the real evaluator on the CPU (interpreter)."""
    task = find_task("moe_align_block_size")
    workspace = tmp_path_factory.mktemp("expert")
    events = []
    outcome = asyncio.run(run_agent(task, "L1+L2+L3", make_model("scripted/expert", task=task), workspace,
                                    LocalEvalService(["cpu"]), events.append, AgentLimits()))
    return task, outcome, events


def test_scripted_expert_passes_on_a_real_task(expert_run):
    task, outcome, events = expert_run
    assert (outcome.end_reason, outcome.turns, outcome.submitted) == ("submit", 5, True)
    assert outcome.solution.read_text() == task.expert_path.read_text()
    out = {e["name"]: e["output"] for e in events if e["type"] == "tool_result"}
    assert list(out) == ["write_file", "run_tests", "benchmark", "profile", "submit"]
    assert out["run_tests"].startswith("verdict: pass")
    cpu_names = [w.name for w in task.split("cpu")]
    assert all(f"{name} [cpu]: correct" in out["run_tests"] for name in cpu_names)
    assert "no timings" in out["benchmark"] and "registers=" in out["profile"] and "expert" not in out["benchmark"]


def test_replay_reproduces_the_tool_calls(expert_run, tmp_path):
    task, _, events = expert_run
    trajectory = tmp_path / "run.jsonl"
    lines = [json.dumps(e) for e in events]
    trajectory.write_text("\n".join(lines) + "\n" + lines[-1][:20])  # a last line cut off by a crash
    replayed = []
    outcome = asyncio.run(run_agent(task, "L1+L2+L3", make_model(f"scripted/replay:{trajectory}"), tmp_path / "ws",
                                    FakeEvals(), replayed.append, AgentLimits()))

    def calls(evs):
        return [c for e in evs if e["type"] == "response" for c in e["tool_calls"]]

    assert calls(replayed) == calls(events) and outcome.end_reason == "submit" and outcome.turns == 5
    assert (tmp_path / "ws" / "solution.py").read_text() == task.expert_path.read_text()


def test_replay_submits_when_the_replies_run_out(toy_task, tmp_path):
    write = {"id": "w", "name": "write_file", "arguments": json.dumps({"path": "solution.py", "content": "x"})}
    trajectory = tmp_path / "short.jsonl"
    trajectory.write_text(json.dumps({"type": "response", "t": 0.0, "turn": 1, "text": "", "tool_calls": [write],
                                      "usage": {}, "stop_reason": None}) + "\n")
    events = []
    outcome = asyncio.run(run_agent(toy_task, "none", make_model(f"scripted/replay:{trajectory}"), tmp_path / "ws",
                                    FakeEvals(), events.append, AgentLimits()))
    assert (outcome.end_reason, outcome.turns) == ("submit", 2)
    assert [c["name"] for e in events if e["type"] == "response" for c in e["tool_calls"]] == ["write_file", "submit"]


def test_make_model_names_and_errors(toy_task, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert make_model("scripted/expert", task=toy_task).name == "scripted/expert"
    with pytest.raises(ValueError, match="needs the task"):
        make_model("scripted/expert")
    with pytest.raises(ValueError, match="unknown provider"):
        make_model("gemini/x")
    with pytest.raises(ValueError, match="provider/model"):
        make_model("gpt-4")
    with pytest.raises(ValueError, match="OPENAI_API_KEY is not set"):
        make_model("openai/x")
    local = make_model("openai/x", base_url="http://127.0.0.1:9/v1", context_window=32000)
    assert (local.name, local.context_window) == ("openai/x", 32000)


def test_prices_give_a_cost_and_none_without_one(tmp_path, monkeypatch):
    from d2kbench.agent.models.base import Usage
    from d2kbench.agent.models.sdk import cost_usd, load_prices

    table = tmp_path / "prices.json"
    table.write_text(json.dumps({"openai/x": {"input": 2.0, "output": 8.0}}))
    monkeypatch.setenv("D2K_PRICES", str(table))
    prices = load_prices()
    usage = Usage(input_tokens=1_000_000, output_tokens=500_000)
    assert cost_usd(prices, "openai/x", usage) == pytest.approx(6.0)
    assert cost_usd(prices, "openai/unknown", usage) is None
    total = Usage()
    total.add(Usage(input_tokens=3, requests=1, cost_usd=0.5))
    total.add(Usage(output_tokens=4, requests=1, retries=2, cost_usd=0.25))
    assert (total.input_tokens, total.output_tokens, total.requests, total.retries, total.cost_usd) == (3, 4, 2, 2,
                                                                                                         0.75)


def test_retry_after_in_seconds_and_as_a_date():
    now = time.time()
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(email.utils.formatdate(now + 30, usegmt=True), now=now) == pytest.approx(30, abs=1)
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now=now) == 0.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


def test_guidance_layers_under_their_headings(toy_task):
    plain = task_message(toy_task, "none", gpu=False)
    assert "## L" not in plain and "Design guidance" not in plain
    for config, layers in (("L1", ["L1"]), ("L1+L2", ["L1", "L2"]), ("L1+L2+L3", ["L1", "L2", "L3"])):
        block = guidance_block(toy_task, config)
        message = task_message(toy_task, config, gpu=False)
        assert message.replace(block, "") == plain
        assert [line for line in block.splitlines() if line.startswith("## ")] == [f"## {x}" for x in layers]
        for layer in layers:
            assert toy_task.guidance[layer].strip() in block
    with pytest.raises(ValueError):
        guidance_block(toy_task, "L2")


def test_prompts_name_the_hardware_and_the_visible_workloads(toy_task):
    assert "H200" in system_prompt(gpu=True, turns=350) and "350 turns" in system_prompt(gpu=True, turns=350)
    assert "interpreter mode, no GPU" in system_prompt(gpu=False, turns=10)
    gpu, cpu = task_message(toy_task, "none", gpu=True), task_message(toy_task, "none", gpu=False)
    assert "n1m: bfloat16, N=1048576" in gpu and "n200" not in gpu
    assert "n200: float32, N=200" in cpu and "n1m" not in cpu
    assert "n1001" not in gpu + cpu  # hidden workloads stay hidden
    assert "run(x, y, alpha) -> z" in cpu and "float32: |got - oracle| <= 1e-05" in cpu
    assert "def reference" in cpu and "axpy_kernel" not in cpu


def test_local_eval_service_runs_one_evaluation_per_device_at_a_time(toy_task, tmp_path, monkeypatch):
    active: dict[str, int] = {}
    peak: dict[str, int] = {}
    lock = threading.Lock()

    def fake_evaluate(task, candidate, options):
        with lock:
            active[options.device] = active.get(options.device, 0) + 1
            peak[options.device] = max(peak.get(options.device, 0), active[options.device])
        time.sleep(0.05)
        with lock:
            active[options.device] -= 1
        return options.device

    monkeypatch.setattr(evalservice_module, "evaluate", fake_evaluate)

    async def many(service):
        return await asyncio.gather(*(service.evaluate(toy_task, tmp_path, EvalOptions()) for _ in range(6)))

    devices = asyncio.run(many(LocalEvalService(["cuda:0", "cuda:1"])))
    assert sorted(set(devices)) == ["cuda:0", "cuda:1"] and peak == {"cuda:0": 1, "cuda:1": 1}

    async def cancelled_then_another(service):
        first = asyncio.ensure_future(service.evaluate(toy_task, tmp_path, EvalOptions()))
        await asyncio.sleep(0.01)
        first.cancel()  # its thread still runs: the device stays taken until it is done
        return await service.evaluate(toy_task, tmp_path, EvalOptions())

    peak.clear()
    assert asyncio.run(cancelled_then_another(LocalEvalService(["cpu"]))) == "cpu" and peak == {"cpu": 1}
    assert LocalEvalService(["cuda:0"]).gpu and not LocalEvalService(["cpu"]).gpu
    with pytest.raises(ValueError):
        LocalEvalService([])
