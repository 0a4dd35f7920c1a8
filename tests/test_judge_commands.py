"""`d2k design`, `d2k judge DIR` and `d2k judge calibrate` with scripted models: records, resume, accuracy."""

import asyncio
import json

import pytest

from d2kbench.agent.prompts import task_text
from d2kbench.cli import main
from d2kbench.judge.calibrate import calibration_set, without_module_docstring
from d2kbench.judge.design import design, design_path
from d2kbench.judge.export import load_judgements, property_verdicts, with_judge_scores
from d2kbench.judge.models import make_judge_model
from d2kbench.judge.records import read_records
from d2kbench.report.records import CellResult
from d2kbench.runs.cells import make_cell
from d2kbench.runs.store import Store
from d2kbench.suite import find_task, load_suite
from tests.test_judge_answers import QUANT, Recording, answer

DESIGN_TEXT = "One kernel, one pass: each program owns a tile of whole groups and keeps the absmax in registers."


@pytest.fixture(scope="module")
def task():
    return find_task(QUANT)


def replies_file(tmp_path, replies):
    path = tmp_path / "replies.json"
    path.write_text(json.dumps(replies))
    return f"scripted/judge:{path}"


def test_design_prompt_is_the_task_text_without_guidance_or_tools(tmp_path, task):
    model = Recording(make_judge_model(replies_file(tmp_path, [DESIGN_TEXT])))
    record = asyncio.run(design(task, model, "scripted/designer", seed=3))
    assert record["status"] == "ok" and record["text"] == DESIGN_TEXT and record["seed"] == 3
    [(role, prompt)] = model.requests[0]
    assert role == "user" and prompt.startswith(task_text(task, gpu=True))
    assert "Design guidance" not in prompt and task.guidance["L1"].strip()[:80] not in prompt
    assert "Do not write code" in prompt


def test_design_command_stores_one_record_per_task_and_resumes(tmp_path, task, capsys):
    spec = replies_file(tmp_path, [DESIGN_TEXT])
    out = tmp_path / "run"
    assert main(["design", "--model", spec, "--tasks", QUANT, "--out", str(out)]) == 0
    [record] = read_records(out / "designs")
    assert (record["task"], record["model"], record["status"], record["text"]) == (QUANT, spec, "ok", DESIGN_TEXT)
    (tmp_path / "replies.json").write_text("[]")  # a second request would now fail
    capsys.readouterr()
    assert main(["design", "--model", spec, "--tasks", QUANT, "--out", str(out)]) == 0
    assert "1 design(s) already stored, 0 to write" in capsys.readouterr().out
    assert read_records(out / "designs") == [record]


def test_a_failed_design_is_kept_and_written_again_only_when_asked(tmp_path, task, capsys):
    spec = replies_file(tmp_path, ["   "])
    out = tmp_path / "run"
    assert main(["design", "--model", spec, "--tasks", QUANT, "--out", str(out)]) == 1
    [record] = read_records(out / "designs")
    assert record["status"] == "failed" and record["error"] == "the model wrote an empty design"
    (tmp_path / "replies.json").write_text(json.dumps([DESIGN_TEXT]))
    assert main(["design", "--model", spec, "--tasks", QUANT, "--out", str(out)]) == 1
    assert read_records(out / "designs")[0]["status"] == "failed"
    assert main(["design", "--model", spec, "--tasks", QUANT, "--out", str(out), "--retry-failed"]) == 0
    assert read_records(out / "designs")[0]["text"] == DESIGN_TEXT


def make_run_folder(tmp_path, task):
    """A run store with a done cell with a solution, a done cell without one and a pending cell."""
    out = tmp_path / "run"
    store = Store(out)
    solved, unsolved, pending = (make_cell("m/a", task, config, 0, 5) for config in ("none", "L1", "L1+L2"))
    store.add_cells([solved, unsolved, pending])
    for cell, outcome in ((solved, {"verdict": "pass", "solution": task.expert_path.read_text()}),
                          (unsolved, {"verdict": "incorrect", "reason": "no_solution"})):
        attempt_id, *_ = store.start_attempt(cell)
        store.finish_attempt(cell, attempt_id, outcome)
    store.close()
    return out, solved


def test_judge_command_judges_solutions_and_designs_with_samples_and_resumes(tmp_path, task, capsys):
    out, solved = make_run_folder(tmp_path, task)
    main(["design", "--model", replies_file(tmp_path, [DESIGN_TEXT]), "--tasks", QUANT, "--out", str(out)])
    replies = [answer(task), answer(task, unmet=["grid_fills_sms"]),  # the solution, two samples
               answer(task, unmet=["single_pass"]), answer(task, unmet=["single_pass"])]  # the design
    spec = replies_file(tmp_path, replies)
    args = ["judge", str(out), "--judge-model", spec, "--samples", "2", "--concurrency", "1"]
    assert main(args) == 0
    records = {r["kind"]: r for r in read_records(out / "judgements")}
    assert set(records) == {"implementation", "design"}
    code = records["implementation"]
    assert (code["origin"], code["source"], code["model"], code["status"]) == (solved.key, "none", "m/a", "ok")
    assert code["summary"]["properties"]["grid_fills_sms"] == {"mean": 0.5, "spread": 0.5}
    assert code["summary"]["scores"]["L3"] == {"mean": pytest.approx(100 * (1 + 4 / 6) / 2),
                                               "spread": pytest.approx(100 * (1 - 4 / 6) / 2)}
    assert records["design"]["summary"]["scores"]["L1"] == {"mean": 100 * 5 / 8, "spread": 0.0}
    (tmp_path / "replies.json").write_text("[]")
    capsys.readouterr()
    assert main(args) == 0
    assert "2 judgement(s) already stored, 0 to make" in capsys.readouterr().out

    assert main(["report", str(out), "--out", str(tmp_path / "rep")]) == 0  # the report shows the judge scores
    rows = (tmp_path / "rep" / "csv" / "judge_scores.csv").read_text().splitlines()
    assert len(rows) == 2 and rows[1].startswith("m/a,none,implementation,")

    loaded = load_judgements(out)
    verdicts = {(v.source, v.property): v.met for v in property_verdicts(loaded, {QUANT: task})}
    assert verdicts[("design", "single_pass")] is False and verdicts[("none", "single_pass")] is True
    assert verdicts[("none", "grid_fills_sms")] is False  # one sample of two: no strict majority
    designer = records["design"]["model"]
    run, other = with_judge_scores([CellResult("m/a", QUANT, "none", 0, True),
                                    CellResult(designer, QUANT, "L1", 0, True)], loaded)
    assert run.implementation_scores == {k: s["mean"] for k, s in code["summary"]["scores"].items()}
    assert run.design_scores is None and other.implementation_scores is None
    assert other.design_scores["L1"] == 100 * 5 / 8  # the design of the same model and task


def test_a_judgement_without_a_valid_sample_is_a_recorded_failure(tmp_path, task, capsys):
    out, _ = make_run_folder(tmp_path, task)
    partial = answer(task, drop=["hw_fp8_conversion"])
    spec = replies_file(tmp_path, [partial] * 2)
    args = ["judge", str(out), "--judge-model", spec, "--retries", "1"]
    assert main(args) == 1
    [record] = read_records(out / "judgements")
    assert record["status"] == "failed" and record["summary"] is None and record["valid_samples"] == 0
    assert "missing properties: hw_fp8_conversion" in record["samples"][0]["failure"]
    (tmp_path / "replies.json").write_text(json.dumps([answer(task)]))
    assert main(args) == 1  # kept as it is without --retry-failed
    assert main(args + ["--retry-failed"]) == 0
    assert read_records(out / "judgements")[0]["summary"]["scores"]["combined"]["mean"] == 100.0


def test_judge_command_refuses_a_folder_with_nothing_to_judge(tmp_path, capsys):
    assert main(["judge", str(tmp_path), "--judge-model", "scripted/judge:x"]) == 2
    assert "nothing to judge" in capsys.readouterr().err


def calibration_replies(task, flips):
    """Answers in calibration order: each candidate's removed property unmet, or `flips[name]` instead."""
    return [answer(task, unmet=flips.get(c.name, [c.removed] if c.removed else [])) for c in calibration_set(task)]


def calibrate(tmp_path, replies, tasks=QUANT):
    out = tmp_path / "calibration"
    code = main(["judge", "calibrate", "--judge-model", replies_file(tmp_path, replies), "--tasks", tasks,
                 "--out", str(out), "--concurrency", "1"])
    return code, json.loads((out / "calibration.json").read_text()), (out / "calibration.md").read_text()


def test_calibration_of_every_task_with_a_judge_that_flips_the_right_properties_is_exact(tmp_path, capsys):
    suite = load_suite()
    code, result, markdown = calibrate(tmp_path, [a for t in suite for a in calibration_replies(t, {})], "all")
    assert code == 0 and result["accuracy"] == 1.0 and all(c["exact"] for c in result["candidates"])
    assert "**100.0%**" in markdown and markdown in capsys.readouterr().out
    assert len(result["rows"]) == sum(len(calibration_set(t)) * len(t.rubric) for t in suite)
    assert {c["task"] for c in result["candidates"] if c["removed"]} == {t.id for t in suite}


def test_calibration_names_the_property_a_judge_flips_wrongly(tmp_path, task):
    ablation = [c for c in calibration_set(task) if c.removed][-1]
    code, result, markdown = calibrate(tmp_path, calibration_replies(task, {ablation.name: ["flat_grid_order"]}))
    total = len(calibration_set(task)) * len(task.rubric)
    assert result["accuracy"] == pytest.approx((total - 2) / total)
    [wrong] = [c for c in result["candidates"] if not c["exact"]]
    assert wrong["candidate"] == ablation.name and wrong["wrong"] == sorted(["flat_grid_order", ablation.name],
                                                                            key=[p.id for p in task.rubric].index)
    assert f"| {QUANT} | {ablation.name} | {ablation.name} | wrong | " in markdown


def test_the_judge_never_sees_an_ablation_docstring(task):
    ablation = [c for c in calibration_set(task) if c.removed][0]
    shown = without_module_docstring(ablation.path.read_text())
    assert "removed" not in shown.split("\n", 3)[0] and shown.startswith("import")
    assert shown in ablation.path.read_text()


def test_record_names_stay_short_for_long_model_specs(tmp_path, task):
    long_model = "openai/" + "very-long-model-name" * 20
    path = design_path(tmp_path, long_model, task, 0)
    assert len(path.name) < 150 and path.name.endswith(".json")
    assert design_path(tmp_path, long_model + "x", task, 0).name != path.name  # the key tells them apart


@pytest.fixture
def made(monkeypatch):
    """The judge/designer clients the commands make, each recording its requests."""
    clients = []

    def make(spec, **kwargs):
        clients.append(Recording(make_judge_model(spec, **kwargs)))
        return clients[-1]

    monkeypatch.setattr("d2kbench.judge.models.make_judge_model", make)
    return clients


def test_design_into_a_file_is_a_usage_error_before_any_model_call(tmp_path, made, capsys):
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    spec = replies_file(tmp_path, [DESIGN_TEXT])
    assert main(["design", "--model", spec, "--tasks", QUANT, "--out", str(afile)]) == 2
    out, err = capsys.readouterr()
    assert f"{afile} is not a folder; it must be a folder, to hold {afile / 'designs'}" in err
    assert "to write" not in out and [c.requests for c in made] == [[]] and afile.read_text() == "keep me"


def test_judge_with_a_judgements_file_is_a_usage_error_before_any_model_call(tmp_path, task, made, capsys):
    out, _ = make_run_folder(tmp_path, task)
    (out / "judgements").write_text("not a folder")
    assert main(["judge", str(out), "--judge-model", replies_file(tmp_path, [answer(task)])]) == 2
    stdout, err = capsys.readouterr()
    assert f"{out / 'judgements'} is not a folder; it must be a folder" in err
    assert "to make" not in stdout and [c.requests for c in made] == [[]]


def test_a_record_that_cannot_be_written_after_the_call_is_kept_elsewhere(tmp_path, task, monkeypatch, capsys):
    def refuse(source, target):
        raise PermissionError(13, "Permission denied", str(target))

    monkeypatch.setattr("os.replace", refuse)  # the rename that ends write_record
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    out = tmp_path / "run"
    spec = replies_file(tmp_path, [DESIGN_TEXT])
    assert main(["design", "--model", spec, "--tasks", QUANT, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    path = design_path(out, spec, task, 0)
    assert f"could not write {path} (Permission denied); the record is kept in " in err
    [kept] = tmp_path.glob(f"d2k-unwritten-*-{path.name}")
    assert str(kept) in err and json.loads(kept.read_text())["text"] == DESIGN_TEXT
    assert not path.exists() and list(path.parent.iterdir()) == []  # nor its temporary file


@pytest.mark.parametrize("command", ["design", "judge", "calibrate"])
def test_tasks_that_name_no_task_are_a_usage_error(tmp_path, task, made, command, capsys):
    spec = replies_file(tmp_path, [DESIGN_TEXT])
    if command == "design":
        args = ["design", "--model", spec, "--out", str(tmp_path / "run")]
    else:
        where = str(make_run_folder(tmp_path, task)[0]) if command == "judge" else "calibrate"
        args = ["judge", where, "--judge-model", spec, "--out", str(tmp_path / "cal")]
    for tasks in (",", " , ", ""):
        assert main(args + ["--tasks", tasks]) == 2
        assert "--tasks names no task" in capsys.readouterr().err
    assert all(c.requests == [] for c in made)


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--samples", "abc", "argument --samples: expected a positive integer, got 'abc'"),
    ("--samples", "0", "argument --samples: must be at least 1, got 0"),
    ("--retries", "x", "argument --retries: expected a non-negative integer, got 'x'"),
    ("--concurrency", "1.5", "argument --concurrency: expected a positive integer, got '1.5'"),
])
def test_bad_counts_are_told_in_plain_words(tmp_path, option, value, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["judge", str(tmp_path), "--judge-model", "scripted/judge:x", option, value])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and "invalid" not in err


def test_judging_a_file_says_it_is_not_a_folder(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    assert main(["judge", str(afile), "--judge-model", "scripted/judge:x"]) == 2
    err = capsys.readouterr().err
    assert f"{afile} is not a folder" in err and "no such folder" not in err
    assert main(["judge", str(tmp_path / "absent"), "--judge-model", "scripted/judge:x"]) == 2
    assert "no such folder" in capsys.readouterr().err
