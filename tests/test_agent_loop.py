"""The turn loop with a fake model and a fake evaluator: turns, reminders, limits, errors, elision."""

import asyncio
import json

from d2kbench.agent import AgentLimits, ModelError, run_agent
from d2kbench.agent.conversation import Conversation, elided_marker
from d2kbench.agent.models.base import ModelReply, ToolCall
from d2kbench.agent.tools import TOOLS
from tests.agent_support import FakeEvals, FakeModel, Reply

WRITE = json.dumps({"path": "solution.py", "content": "def run(x, y, alpha):\n    return x\n"})


def run(toy_task, workspace, model, limits=None, evals=None, config="none"):
    events = []
    outcome = asyncio.run(run_agent(toy_task, config, model, workspace, evals or FakeEvals(), events.append,
                                    limits or AgentLimits(turns=20)))
    json.dumps(events)  # every event is JSON-serialisable
    assert all(isinstance(e["t"], float) and e["type"] for e in events)
    return outcome, events


def results(events):
    return [(e["call_id"], e["output"]) for e in events if e["type"] == "tool_result"]


def test_one_reply_is_one_turn_and_calls_run_in_order(toy_task, tmp_path):
    model = FakeModel([Reply("", [("a", "write_file", WRITE), ("b", "read_file", '{"path": "solution.py"}'),
                                  ("c", "submit", "{}"), ("d", "list_files", "{}")])])
    outcome, events = run(toy_task, tmp_path, model)
    assert (outcome.end_reason, outcome.turns, outcome.submitted) == ("submit", 1, True)
    got = results(events)
    assert [c for c, _ in got] == ["a", "b", "c", "d"]
    assert "return x" in got[1][1] and got[2][1].startswith("submitted") and got[3][1].startswith("skipped")
    assert [e["type"] for e in events] == ["prompt", "response"] + ["tool_result"] * 4 + ["end"]
    assert events[-1]["solution"] == str(tmp_path / "solution.py") and events[-1]["usage"]["input_tokens"] == 10


def test_reply_without_tool_call_gets_a_reminder_and_counts(toy_task, tmp_path):
    model = FakeModel([Reply("hmm"), Reply("still thinking"), Reply("", [("a", "write_file", WRITE)])])
    outcome, events = run(toy_task, tmp_path, model)
    reminders = [e for e in events if e["type"] == "reminder"]
    assert [r["turn"] for r in reminders] == [1, 2] and "submit" in reminders[0]["text"]
    assert outcome.turns == 4 and outcome.end_reason == "submit"
    assert model.seen[1][-1] == ("user", reminders[0]["text"], None)


def test_malformed_arguments_and_unknown_tools_go_back_to_the_model(toy_task, tmp_path):
    bad = [("a", "write_file", '{"path": "s.py", "content": '), ("b", "write_file", '{"path": "s.py"}'),
           ("c", "read_file", '{"path": "s.py", "mode": "r"}'), ("d", "read_file", '{"path": 3}'),
           ("e", "rm_rf", "{}"), ("f", "list_files", "[1]"), ("g", "read_file", '{"path": "missing.py"}')]
    outcome, events = run(toy_task, tmp_path, FakeModel([Reply("", bad), Reply("", [("h", "write_file", WRITE)])]))
    out = dict(results(events)[:len(bad)])
    assert "not valid JSON" in out["a"] and "missing content" in out["b"] and "unexpected mode" in out["c"]
    assert "path must be a string" in out["d"] and "no tool 'rm_rf'" in out["e"]
    assert "must be a JSON object" in out["f"] and "no file 'missing.py'" in out["g"]
    assert all(o.startswith("error: ") for o in out.values())
    assert outcome.end_reason == "submit" and outcome.turns == 3 and not (tmp_path / "s.py").exists()


def test_paths_outside_the_workspace_are_refused(toy_task, tmp_path):
    workspace, outside = tmp_path / "ws", tmp_path / "secret.txt"
    outside.write_text("expert timings")
    workspace.mkdir()
    (workspace / "link").symlink_to(tmp_path)
    calls = [("a", "read_file", json.dumps({"path": str(outside)})),
             ("b", "read_file", '{"path": "../secret.txt"}'),
             ("c", "read_file", '{"path": "link/secret.txt"}'),
             ("d", "write_file", '{"path": "link/new.txt", "content": "x"}'),
             ("e", "write_file", '{"path": "sub/dir/ok.txt", "content": "fine"}')]
    outcome, events = run(toy_task, workspace, FakeModel([Reply("", calls)]))
    out = dict(results(events))
    assert "absolute" in out["a"] and "'..'" in out["b"]
    assert "outside the workspace" in out["c"] and "outside the workspace" in out["d"]
    assert "expert timings" not in "".join(out.values()) and not (tmp_path / "new.txt").exists()
    assert (workspace / "sub/dir/ok.txt").read_text() == "fine" and out["e"] == "wrote 4 bytes to sub/dir/ok.txt"


def test_model_error_mid_run_ends_with_the_recorded_reason(toy_task, tmp_path):
    model = FakeModel([Reply("", [("a", "write_file", WRITE)]), ModelError("429 after 8 attempts")])
    outcome, events = run(toy_task, tmp_path, model)
    assert (outcome.end_reason, outcome.turns, outcome.error) == ("model_error", 1, "429 after 8 attempts")
    assert outcome.solution == tmp_path / "solution.py" and not outcome.submitted
    assert events[-1]["end_reason"] == "model_error" and events[-1]["error"] == "429 after 8 attempts"


def test_turn_budget_ends_the_run(toy_task, tmp_path):
    model = FakeModel([Reply("", [(f"c{i}", "list_files", "{}")]) for i in range(10)])
    outcome, events = run(toy_task, tmp_path, model, AgentLimits(turns=3))
    assert (outcome.end_reason, outcome.turns, outcome.submitted, outcome.solution) == ("turn_budget", 3, False, None)
    assert len(model.seen) == 3


def test_wall_clock_ends_the_run(toy_task, tmp_path):
    model = FakeModel([Reply("", [(f"c{i}", "list_files", "{}")]) for i in range(50)], delay_s=0.1)
    outcome, _ = run(toy_task, tmp_path, model, AgentLimits(turns=50, wall_clock_s=0.35))
    assert outcome.end_reason == "wall_clock" and 1 <= outcome.turns <= 4


def test_submit_without_a_solution_is_refused_and_the_run_goes_on(toy_task, tmp_path):
    model = FakeModel([Reply("", [("a", "submit", "{}")]), Reply("", [("b", "write_file", WRITE)])])
    outcome, events = run(toy_task, tmp_path, model)
    assert "no solution.py" in results(events)[0][1]
    assert (outcome.end_reason, outcome.turns) == ("submit", 3)


def test_long_tool_outputs_are_cut_with_a_marker(toy_task, tmp_path):
    (tmp_path / "big.txt").write_text("h" * 500 + "m" * 1000 + "t" * 500)
    model = FakeModel([Reply("", [("a", "read_file", '{"path": "big.txt"}')])])
    _, events = run(toy_task, tmp_path, model, AgentLimits(tool_output_chars=200))
    out = results(events)[0][1]
    assert out.startswith("h" * 100) and out.endswith("t" * 100) and "[... 1800 characters cut ...]" in out
    assert model.seen[1][-1][1] == out  # the model saw the cut text


def test_tools_never_ask_for_the_expert(toy_task, tmp_path):
    evals = FakeEvals(verdict="incorrect")
    calls = [("a", "write_file", WRITE), ("b", "run_tests", ""), ("c", "benchmark", "{}"), ("d", "profile", "{}")]
    _, events = run(toy_task, tmp_path, FakeModel([Reply("", calls)]), evals=evals)
    options = [o for kind, _, o in evals.calls if kind == "evaluate"]
    assert [(o.expert, o.time, o.include_hidden) for o in options] == [(False, False, False)] * 2
    out = dict(results(events))
    assert "verdict: incorrect" in out["b"] and "reason: mismatch" in out["b"] and "n77_f16 [cpu]: FAILED" in out["b"]
    assert "no timings" in out["c"] and "num_warps=4" in out["d"]
    prompt = events[0]
    assert "expert.py" not in prompt["user"] and toy_task.expert_path.read_text() not in prompt["user"]
    assert "n1001" not in prompt["user"] and "interpreter mode" in prompt["system"]


def test_benchmark_on_a_gpu_reports_times_against_the_reference_only(toy_task, tmp_path):
    evals = FakeEvals(gpu=True)
    calls = [("a", "write_file", WRITE), ("b", "benchmark", "{}"), ("c", "profile", "{}")]
    _, events = run(toy_task, tmp_path, FakeModel([Reply("", calls)]), evals=evals)
    out = dict(results(events))
    assert "n1m [scored]: correct; yours 0.5000 ms, PyTorch reference 1.0000 ms, speedup 2.00x" in out["b"]
    assert "42.0% of speed of light" in out["b"] and "expert" not in out["b"]
    assert [(o.expert, o.time) for kind, _, o in evals.calls if kind == "evaluate"] == [(False, True)]
    assert "H200" in events[0]["system"] and "n1m: bfloat16, N=1048576" in events[0]["user"]
    assert "ncu" in out["c"]  # says plainly that hardware counters are not collected


def test_elision_drops_the_oldest_tool_outputs_first_and_spares_the_latest_turn():
    conv = Conversation("system")
    conv.add_user("task")
    for turn in range(6):
        reply = ModelReply("", [ToolCall(f"c{turn}", "read_file", '{"path": "a"}')])
        conv.add_reply(reply)
        conv.add_tool_result(reply.tool_calls[0], str(turn) * 3000)
    window = conv.estimate_tokens(TOOLS) + 100  # above ELIDE_AT: must shrink to ELIDE_TO of the window
    elided = conv.fit(window, TOOLS)
    assert [e["call_id"] for e in elided] == ["c0", "c1", "c2", "c3"]
    assert conv.estimate_tokens(TOOLS) <= 0.5 * window
    tools = [m for m in conv.messages if m.role == "tool"]
    assert tools[0].text == elided_marker(3000) and tools[5].text == "5" * 3000
    assert conv.fit(window, TOOLS) == []  # under the threshold now: nothing more goes


def test_elision_then_shrinks_old_write_file_contents():
    conv = Conversation("system")
    conv.add_user("task")
    for turn in range(3):
        args = json.dumps({"path": "solution.py", "content": "x" * 6000})
        reply = ModelReply("", [ToolCall(f"w{turn}", "write_file", args)])
        conv.add_reply(reply)
        conv.add_tool_result(reply.tool_calls[0], "wrote 6000 bytes to solution.py")
    elided = conv.fit(int(conv.estimate_tokens(TOOLS) / 0.8), TOOLS)
    kinds = [(e["kind"], e["call_id"]) for e in elided]
    assert ("write_file_content", "w0") in kinds and ("write_file_content", "w2") not in kinds
    first = json.loads(conv.messages[1].tool_calls[0].arguments)
    assert first["path"] == "solution.py" and first["content"].startswith("[elided: 6000 characters")
    assert json.loads(conv.messages[-2].tool_calls[0].arguments)["content"] == "x" * 6000


def test_elision_in_a_run_is_recorded(toy_task, tmp_path):
    (tmp_path / "big.txt").write_text("b" * 12000)
    model = FakeModel([Reply("", [(f"r{i}", "read_file", '{"path": "big.txt"}')]) for i in range(4)],
                      context_window=9000)
    _, events = run(toy_task, tmp_path, model)
    elided, latest = [], None
    for e in events:
        if e["type"] == "response":
            latest = [c["id"] for c in e["tool_calls"]]
        elif e["type"] == "elided":
            assert not {item["call_id"] for item in e["items"]} & set(latest)  # the latest turn is spared
            elided += [item["call_id"] for item in e["items"]]
    assert elided == ["r0", "r1", "r2", "r3"]  # oldest first, each once
    assert any(text.startswith("[elided") for role, text, _ in model.seen[-1] if role == "tool")
