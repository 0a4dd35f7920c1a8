"""`d2k run` killed with SIGKILL in the middle of a cell, then run again: every cell exactly once."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

from tests.conftest import FIXTURES, ROOT

TOY = FIXTURES / "toy_axpy"


# Each evaluation of the solution lasts this long at least (its import waits), so that a cell is surely mid-run
# when the driver is killed (workers start in milliseconds: evaluating the bare toy takes under a second).
SLOW_IMPORT_S = 4.0


def write_replay(path):
    """A recorded trajectory whose one reply writes the toy expert, slowed at import; the replay then submits it."""
    slowed = f"import time\ntime.sleep({SLOW_IMPORT_S})\n" + (TOY / "expert.py").read_text()
    arguments = json.dumps({"path": "solution.py", "content": slowed})
    event = {"type": "response", "t": 0.0, "turn": 1, "text": "", "stop_reason": "tool_use",
             "tool_calls": [{"id": "call_1", "name": "write_file", "arguments": arguments}]}
    path.write_text(json.dumps(event) + "\n")


def statuses(out):
    """The cells' statuses; none while the driver has created the file but not yet its tables."""
    with sqlite3.connect(f"file:{out / 'results.sqlite'}?mode=ro", uri=True) as db:
        try:
            return db.execute("SELECT status FROM cells ORDER BY seed").fetchall()
        except sqlite3.OperationalError:  # no such table (yet), or the database is locked for a moment
            return []


def test_kill_9_mid_cell_then_resume_runs_every_cell_exactly_once(tmp_path):
    replay = tmp_path / "replay.jsonl"
    write_replay(replay)
    out = tmp_path / "run"
    command = [sys.executable, "-m", "d2kbench", "run", "--model", f"scripted/replay:{replay}", "--tasks", str(TOY),
               "--configs", "none", "--seeds", "2", "--turns", "5", "--out", str(out), "--devices", "cpu"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    driver = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and driver.poll() is None:
            # seed 0 done and seed 1 mid-run (each evaluation takes SLOW_IMPORT_S at least)
            if (out / "results.sqlite").exists() and statuses(out) == [("done",), ("running",)]:
                break
            time.sleep(0.2)
        assert driver.poll() is None, "the run finished before it could be killed"
        time.sleep(1.0)
        os.kill(driver.pid, signal.SIGKILL)
    finally:
        driver.kill()
        driver.wait()
    assert statuses(out) == [("done",), ("running",)]

    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "2 cells, 1 done already, 1 to run" in again.stdout
    assert "1 interrupted attempt(s) will restart" in again.stdout

    with sqlite3.connect(out / "results.sqlite") as db:
        cells = db.execute("SELECT key, status, verdict, attempt_id, attempts FROM cells ORDER BY seed").fetchall()
        attempts = db.execute("SELECT id, cell_key, number, status, trajectory FROM attempts ORDER BY id").fetchall()
    assert [c[1:3] for c in cells] == [("done", "pass")] * 2
    by_cell = {key: [a for a in attempts if a[1] == key] for key, *_ in cells}
    assert [len(by_cell[key]) for key, *_ in cells] == [1, 2]
    for key, _, _, counted, started in cells:
        tries = by_cell[key]
        assert started == len(tries)
        assert [a[3] for a in tries] == ["aborted", "finished"][-len(tries):]  # the counted one is the finished one
        assert counted == tries[-1][0]
        assert all((out / a[4]).is_file() for a in tries)  # the aborted attempt's trajectory is kept

    rerun = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0 and "2 cells, 2 done already, 0 to run" in rerun.stdout
    with sqlite3.connect(out / "results.sqlite") as db:
        assert db.execute("SELECT count(*) FROM attempts").fetchone()[0] == len(attempts)
