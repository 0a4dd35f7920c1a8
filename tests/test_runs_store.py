"""The run matrix's cell keys, the durable store and the per-run scores (no agent, no kernel evaluation)."""

import json
import shutil
import sqlite3

import pytest

from d2kbench.evaluate.result import EvalResult, Failure, WorkloadResult
from d2kbench.runs.cells import build_matrix, make_cell, parse_configs, task_content_hash
from d2kbench.runs.metrics import run_scores
from d2kbench.runs.store import OUTCOME_COLUMNS, Store, StoreBusy, Trajectory
from d2kbench.suite import load_task
from tests.conftest import FIXTURES


def test_changed_task_byte_gets_a_new_cell_key(tmp_path, toy_task):
    copy = tmp_path / "toy_axpy"
    shutil.copytree(FIXTURES / "toy_axpy", copy)
    original = make_cell("scripted/expert", toy_task, "none", 0, 5).key
    assert make_cell("scripted/expert", load_task(copy), "none", 0, 5).key == original
    reference = copy / "reference.py"
    data = bytearray(reference.read_bytes())
    data[-2] = ord(" ") if data[-2] != ord(" ") else ord("\t")
    reference.write_bytes(bytes(data))
    changed = load_task(copy)
    assert task_content_hash(changed) != task_content_hash(toy_task)
    assert make_cell("scripted/expert", changed, "none", 0, 5).key != original


def test_calibration_ablations_do_not_change_the_cell_key(tmp_path, toy_task):
    copy = tmp_path / "toy_axpy"
    shutil.copytree(FIXTURES / "toy_axpy", copy)
    (copy / "ablations").mkdir()
    (copy / "ablations" / "some_property.py").write_text("def run(*inputs):\n    pass\n")
    assert task_content_hash(load_task(copy)) == task_content_hash(toy_task)


def test_a_changed_task_supersedes_its_old_cells_in_the_summary_rows(tmp_path, toy_task):
    copy = tmp_path / "toy_axpy"
    shutil.copytree(FIXTURES / "toy_axpy", copy)
    (copy / "guidance.md").write_text((copy / "guidance.md").read_text() + "\n")
    old = make_cell("m/a", toy_task, "none", 0, 5)
    other = make_cell("m/a", toy_task, "none", 1, 5)
    new = make_cell("m/a", load_task(copy), "none", 0, 5)
    store = Store(tmp_path / "run")
    store.add_cells([old, other])
    store.add_cells([new])
    assert {r["key"] for r in store.rows()} == {new.key, other.key} and store.superseded() == 1
    assert [r["key"] for r in store.rows([old.key])] == [old.key]  # kept, and readable by key
    store.close()
    with pytest.raises(ValueError, match="task id twice"):
        build_matrix(["m/a"], [toy_task, load_task(copy)], ["none"], 1, 5)


def test_every_key_field_changes_the_key(toy_task):
    base = make_cell("m/a", toy_task, "none", 0, 5)
    variants = [make_cell("m/b", toy_task, "none", 0, 5), make_cell("m/a", toy_task, "L1+L2+L3", 0, 5),
                make_cell("m/a", toy_task, "none", 1, 5), make_cell("m/a", toy_task, "none", 0, 6)]
    assert len({base.key, *(v.key for v in variants)}) == 5
    assert base.guidance_hash != variants[1].guidance_hash


def test_matrix_and_config_parsing(toy_task):
    cells = build_matrix(["m/a", "m/b"], [toy_task], parse_configs("none,L1+L2+L3"), seeds=3, turns=7)
    assert len(cells) == 12
    assert sorted({c.seed for c, _ in cells}) == [0, 1, 2]
    for bad in ("none,L2", "", "none,none"):
        with pytest.raises(ValueError):
            parse_configs(bad)
    with pytest.raises(ValueError, match="twice"):
        build_matrix(["m/a", "m/a"], [toy_task], ["none"], 1, 7)
    with pytest.raises(ValueError, match="seeds"):
        build_matrix(["m/a"], [toy_task], ["none"], 0, 7)


def test_schema_wal_mode_and_single_writer(tmp_path):
    store = Store(tmp_path / "run")
    try:
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        columns = {r[1] for r in store.db.execute("PRAGMA table_info(cells)")}
        assert set(OUTCOME_COLUMNS) | {"key", "model", "task", "task_hash", "config", "guidance_hash", "seed", "turns",
                                       "status", "attempts", "failure"} <= columns
        assert {r[1] for r in store.db.execute("PRAGMA table_info(attempts)")} >= {"cell_key", "number", "status",
                                                                                    "trajectory", "workspace"}
        with pytest.raises(StoreBusy):
            Store(tmp_path / "run")
    finally:
        store.close()
    Store(tmp_path / "run").close()  # the lock goes with the driver


def test_interrupted_attempt_is_aborted_and_restarts_fresh(tmp_path, toy_task):
    cell = make_cell("m/a", toy_task, "none", 0, 5)
    store = Store(tmp_path)
    store.add_cells([cell])
    first_id, number, path, workspace = store.start_attempt(cell)
    trajectory = Trajectory(path, cell, number, {"turns": 5})
    trajectory.write({"type": "response", "t": 1.0, "turn": 1})
    (workspace / "solution.py").write_text("half written")
    store.close()  # the driver dies here, its attempt still running

    store = Store(tmp_path)
    assert store.status(cell.key) == "running"
    assert store.abort_interrupted() == 1
    assert store.status(cell.key) == "pending"
    second_id, number, path2, workspace2 = store.start_attempt(cell)
    assert number == 2 and path2 != path and workspace2 != workspace and not any(workspace2.iterdir())
    header = json.loads(path.read_text().splitlines()[0])
    assert header["type"] == "header" and header["key"] == cell.key and header["cell"]["task"] == "toy_axpy"
    store.finish_attempt(cell, second_id, {"verdict": "pass", "turns_used": 3})
    assert [(a["number"], a["status"]) for a in store.attempts(cell.key)] == [(1, "aborted"), (2, "finished")]
    row = store.rows([cell.key])[0]
    assert (row["status"], row["attempt_id"], row["verdict"], row["attempts"]) == ("done", second_id, "pass", 2)
    store.close()


def test_a_bad_outcome_changes_nothing(tmp_path, toy_task):
    cell = make_cell("m/a", toy_task, "none", 0, 5)
    store = Store(tmp_path)
    store.add_cells([cell])
    attempt_id, *_ = store.start_attempt(cell)
    with pytest.raises(ValueError, match="unknown outcome"):
        store.finish_attempt(cell, attempt_id, {"verdict": "pass", "bogus": 1})
    with pytest.raises(sqlite3.IntegrityError):  # a failed statement inside a transaction rolls all of it back
        _fail_midway(store, cell, attempt_id)
    assert store.status(cell.key) == "running"
    assert store.attempts(cell.key)[0]["status"] == "running"
    store.close()


def _fail_midway(store, cell, attempt_id):
    with store.transaction() as db:
        db.execute("UPDATE attempts SET status='finished' WHERE id=?", (attempt_id,))
        db.execute("UPDATE cells SET status='bogus' WHERE key=?", (cell.key,))  # violates the CHECK


def test_task_speedup_is_the_geomean_over_scored_workloads_when_correct():
    result = EvalResult(task="t", candidate="c", mode="gpu", device="cuda:0", workloads=[
        WorkloadResult("a", "scored", True, speedup=2.0, fraction_of_expert=0.5, sol_fraction=0.2),
        WorkloadResult("b", "scored", True, speedup=8.0, fraction_of_expert=2.0, sol_fraction=0.8),
        WorkloadResult("h", "hidden", True)])
    scores = run_scores(result)
    assert scores["task_speedup"] == pytest.approx(4.0)
    assert scores["fraction_of_expert"] == pytest.approx(1.0) and scores["sol_fraction"] == pytest.approx(0.4)
    assert json.loads(scores["workload_speedups"]) == {"a": 2.0, "b": 8.0}
    result.add(Failure("incorrect", "mismatch", "off by one", "h"))
    scores = run_scores(result)
    assert (scores["verdict"], scores["task_speedup"], scores["fraction_of_expert"]) == ("incorrect", None, None)


def _foreign_files(tmp_path):
    """results.sqlite that no d2k run wrote: garbage bytes, and another application's SQLite database."""
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "results.sqlite").write_bytes(b"not a database, just bytes\n" * 200)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    db = sqlite3.connect(foreign / "results.sqlite")
    db.execute("CREATE TABLE notes (text TEXT)")
    db.execute("INSERT INTO notes VALUES ('mine')")
    db.commit()
    db.close()
    return {garbage: "file is not a database", foreign: "its tables are notes"}


@pytest.mark.parametrize("write", [True, False])
def test_a_foreign_results_file_is_refused_and_left_as_it_was(tmp_path, write):
    for root, why in _foreign_files(tmp_path).items():
        before = (root / "results.sqlite").read_bytes()
        with pytest.raises(ValueError, match=f"not a d2k run store \\({why}") as failed:
            Store(root, write=write)
        assert (root / "results.sqlite").read_bytes() == before
        assert not (root / "trajectories").exists() and not (root / "results.sqlite-wal").exists()
        with pytest.raises(ValueError):  # not StoreBusy: the failed open (alive in `failed`) let the lock go
            Store(root)
        del failed


def test_an_empty_results_file_becomes_a_store_to_write_and_is_none_to_read(tmp_path):
    (tmp_path / "results.sqlite").write_bytes(b"")
    with pytest.raises(ValueError, match="not a d2k run store \\(an empty database"):
        Store(tmp_path, write=False)
    Store(tmp_path).close()
    Store(tmp_path, write=False).close()


@pytest.mark.parametrize("write", [True, False])
def test_another_store_schema_is_refused(tmp_path, write):
    store = Store(tmp_path)
    store.db.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    store.close()
    with pytest.raises(ValueError, match="store schema 999; this d2kbench reads schema 1"):
        Store(tmp_path, write=write)


def test_a_store_whose_creation_was_cut_off_is_completed_by_the_next_run(tmp_path):
    """The schema's tables are made one statement at a time: a run killed in between leaves some of them, which the
    next writer completes (and a reader refuses, naming them) rather than taking it for a foreign database."""
    db = sqlite3.connect(tmp_path / "results.sqlite")
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.commit()
    db.close()
    with pytest.raises(ValueError, match="its tables are meta"):
        Store(tmp_path, write=False)
    Store(tmp_path).close()
    store = Store(tmp_path, write=False)
    assert store.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "1"
    store.close()
