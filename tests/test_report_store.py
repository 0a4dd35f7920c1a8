"""`d2k report DIR`: a run folder written through the runs store, read back into cells and rendered."""

import pytest

from d2kbench.cli import main
from d2kbench.evaluate.result import EvalResult, Failure, WorkloadResult
from d2kbench.report.from_store import load_cells
from d2kbench.runs.cells import Cell
from d2kbench.runs.metrics import run_scores
from d2kbench.runs.store import Store


def _cell(task, config, seed=0, model="openai/m"):
    return Cell(model=model, task=task, task_hash="h", config=config, guidance_hash="g", seed=seed, turns=5)


def _timed(task):
    result = EvalResult(task=task, candidate="solution.py", mode="gpu", device="cuda:0")
    result.workloads = [
        WorkloadResult("a", "scored", True, speedup=2.0, fraction_of_expert=0.5, sol_fraction=0.3,
                       speedup_vs_comparator=1.5),
        WorkloadResult("b", "scored", True, speedup=8.0, fraction_of_expert=1.0, sol_fraction=0.6),
        WorkloadResult("h", "hidden", True),
    ]
    return result


def _incorrect(task):
    result = EvalResult(task=task, candidate="solution.py")
    result.add(Failure("incorrect", "mismatch", "values differ", "a"))
    return result


@pytest.fixture
def run_dir(tmp_path):
    store = Store(tmp_path)
    finished = [(_cell("t1", "none"), _timed("t1")), (_cell("t2", "none"), _incorrect("t2")),
                (_cell("t1", "L1+L2+L3"), _timed("t1")),
                (_cell("t2", "L1+L2+L3"), EvalResult(task="t2", candidate="solution.py"))]  # correct, untimed
    pending = _cell("t3", "none")
    store.add_cells([c for c, _ in finished] + [pending])
    for cell, result in finished:
        attempt_id, *_ = store.start_attempt(cell)
        store.finish_attempt(cell, attempt_id, run_scores(result))
    store.close()
    return tmp_path


def test_load_cells_from_a_run_folder(run_dir):
    loaded = load_cells(run_dir)
    assert loaded.unfinished == {"pending": 1}
    assert ("openai/m", "t3", "none", 0) in loaded.matrix and len(loaded.matrix) == 5
    by_key = {(c.task, c.config): c for c in loaded.cells}
    timed = by_key[("t1", "none")]
    assert timed.correct and [w.name for w in timed.workloads] == ["a", "b"]  # scored workloads only
    assert [w.expert_speedup for w in timed.workloads] == pytest.approx([4.0, 8.0])  # speedup / fraction of expert
    assert timed.workloads[0].speedup_vs_comparator == 1.5
    assert not by_key[("t2", "none")].correct and by_key[("t2", "none")].workloads == ()
    assert by_key[("t2", "L1+L2+L3")].correct and not by_key[("t2", "L1+L2+L3")].timed


def test_report_command_writes_the_report(run_dir, tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "1 cell(s) pending" in captured.err and "no timings" in captured.err
    assert (out / "report.html").is_file() and (out / "report.md").is_file()
    summary = (out / "csv" / "summary.csv").read_text().splitlines()
    # none: t1 correct, t2 incorrect, t3 pending (missing): 1/3 correct
    assert summary[1].startswith("openai/m,none,3,1,1,0.333,")


def test_report_command_rejects_a_bad_floor(run_dir, capsys):
    assert main(["report", str(run_dir), "--floor", "0"]) == 2
    assert "floor" in capsys.readouterr().err


def test_report_command_without_a_store(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "no run store" in capsys.readouterr().err


def test_report_command_refuses_a_foreign_or_newer_store(tmp_path, capsys):
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "results.sqlite").write_bytes(b"\x00\xffnot sqlite" * 100)
    assert main(["report", str(garbage)]) == 2
    assert "results.sqlite is not a d2k run store (file is not a database)" in capsys.readouterr().err
    newer = tmp_path / "newer"
    store = Store(newer)
    store.db.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    store.close()
    assert main(["report", str(newer)]) == 2
    assert "store schema 999" in capsys.readouterr().err
    assert not (garbage / "report").exists() and not (newer / "report").exists()


def test_report_command_refuses_a_file_for_out(run_dir, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    assert main(["report", str(run_dir), "--out", str(afile)]) == 2
    assert f"--out must be a folder: {afile} is a file" in capsys.readouterr().err
    assert main(["report", str(run_dir), "--out", str(afile / "sub")]) == 2
    assert f"--out must be a folder: {afile} is a file" in capsys.readouterr().err
    assert afile.read_text() == "mine"
