"""The durable store of a run folder: SQLite in WAL mode for cells and attempts, one JSONL file per attempt.

Only the driver process writes it, under an exclusive lock on `DIR/store.lock`. Every state change
is one transaction, so a crash (even `kill -9`) leaves each cell either as it was or fully updated.
"""

from __future__ import annotations

import fcntl
import json
import sqlite3
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from d2kbench.runs.cells import Cell

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cells (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL, task TEXT NOT NULL, task_hash TEXT NOT NULL, config TEXT NOT NULL,
    guidance_hash TEXT NOT NULL, seed INTEGER NOT NULL, turns INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'done', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL, updated_at REAL NOT NULL,
    -- the outcome of the counted attempt (status done), or why the last attempt failed (status failed)
    attempt_id INTEGER REFERENCES attempts(id),
    failure TEXT,            -- failed: model_error | infra | harness_error
    end_reason TEXT, turns_used INTEGER, submitted INTEGER,
    input_tokens INTEGER, output_tokens INTEGER, requests INTEGER, retries INTEGER, cost_usd REAL,
    verdict TEXT, reason TEXT, detail TEXT, mode TEXT, device TEXT,
    task_speedup REAL, fraction_of_expert REAL, sol_fraction REAL,
    workload_speedups TEXT,  -- JSON {workload: speedup or null}, scored workloads
    eval_json TEXT,          -- the final EvalResult as JSON
    solution TEXT,           -- the answer's source
    error TEXT               -- the model error's or harness error's message
);
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    cell_key TEXT NOT NULL REFERENCES cells(key),
    number INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('running', 'finished', 'failed', 'aborted')),
    started_at REAL NOT NULL, ended_at REAL,
    trajectory TEXT NOT NULL, workspace TEXT NOT NULL,
    UNIQUE (cell_key, number)
);
"""

OUTCOME_COLUMNS = (
    "end_reason", "turns_used", "submitted", "input_tokens", "output_tokens", "requests", "retries", "cost_usd",
    "verdict", "reason", "detail", "mode", "device", "task_speedup", "fraction_of_expert", "sol_fraction",
    "workload_speedups", "eval_json", "solution", "error",
)


class StoreBusy(RuntimeError):
    """Another driver process holds the run folder."""


def file_in_the_way(folder: Path) -> Path | None:
    """The nearest of `folder` and its parents that exists, when it is not a folder: `folder` can't be one."""
    for path in (folder, *folder.parents):
        if path.exists():
            return None if path.is_dir() else path
    return None


def check_folder(folder: Path, label: str) -> None:
    """A ValueError naming the file in the way where `folder` (given as `label`, e.g. `--out`) cannot be a folder:
    checked before a command's work, not when it writes at the end."""
    if (in_the_way := file_in_the_way(folder)) is not None:
        raise ValueError(f"{label} must be a folder: {in_the_way} is a file")


STORE_TABLES = {"meta", "cells", "attempts", "sqlite_sequence"}  # SCHEMA's (sqlite_sequence: AUTOINCREMENT)


class Store:
    """A run folder: `results.sqlite`, `trajectories/`, `workspaces/`."""

    def __init__(self, root: Path, *, write: bool = True):
        self.root = Path(root)
        self.trajectories = self.root / "trajectories"
        self.workspaces = self.root / "workspaces"
        self._lock: TextIO | None = None
        if write:
            self.root.mkdir(parents=True, exist_ok=True)
            self._lock = open(self.root / "store.lock", "w")
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._lock.close()
                raise StoreBusy(f"another d2k run is writing {self.root} (store.lock is held)") from None
        elif not (self.root / "results.sqlite").is_file():
            raise FileNotFoundError(f"no run store in {self.root} (results.sqlite is missing)")
        uri = (self.root / "results.sqlite").resolve().as_uri() + ("" if write else "?mode=ro")
        self.db = sqlite3.connect(uri, uri=True, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        try:
            self._check_store(write)
            if write:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=FULL")
                self.db.executescript(SCHEMA)
                with self.transaction():
                    self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        except sqlite3.OperationalError as exc:  # a store, busy or unreadable: "database is locked", ...
            self.close()
            raise ValueError(f"{self.root}: cannot read results.sqlite ({exc})") from exc
        except sqlite3.DatabaseError as exc:
            self.close()
            raise ValueError(f"{self.root}: results.sqlite is not a d2k run store ({exc})") from exc
        except ValueError:
            self.close()
            raise
        if write:
            self.trajectories.mkdir(exist_ok=True)
            self.workspaces.mkdir(exist_ok=True)

    def _check_store(self, write: bool) -> None:
        """Refuse another application's database or another schema before anything is written. An empty
        database (a 0-byte file too) becomes a store when opened to write; opened to read, it is none."""
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        # opened to write, a store whose creation was cut off (some of its own tables) is completed
        complete = {"meta", "cells"} <= tables or write and tables <= STORE_TABLES
        if tables and not complete:
            raise sqlite3.DatabaseError(f"its tables are {', '.join(sorted(tables))}; a store has meta and cells")
        if not tables and not write:
            raise sqlite3.DatabaseError("an empty database (no run store yet)")
        if tables:
            self._check_version()

    def _check_version(self) -> None:
        row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is not None and row[0] != str(SCHEMA_VERSION):
            raise ValueError(f"{self.root}: results.sqlite has store schema {row[0]}; this d2kbench reads schema "
                             f"{SCHEMA_VERSION} only (use the d2kbench that wrote it)")

    def transaction(self):
        """`with store.transaction():` one atomic change (BEGIN IMMEDIATE ... COMMIT, ROLLBACK on error)."""
        return _Transaction(self.db)

    def close(self) -> None:
        self.db.close()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    # -- cells ----------------------------------------------------------------------------------
    def add_cells(self, cells: list[Cell]) -> None:
        """Register the matrix's cells; cells already in the store keep their state."""
        now = time.time()
        with self.transaction():
            self.db.executemany(
                "INSERT OR IGNORE INTO cells (key, model, task, task_hash, config, guidance_hash, seed, turns, status,"
                " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)",
                [(c.key, c.model, c.task, c.task_hash, c.config, c.guidance_hash, c.seed, c.turns, now, now)
                 for c in cells])

    def abort_interrupted(self) -> int:
        """Mark the attempts that a dead driver left running as aborted; their cells will run again."""
        now = time.time()
        with self.transaction():
            count = self.db.execute(
                "UPDATE attempts SET status='aborted', ended_at=? WHERE status='running'", (now,)).rowcount
            self.db.execute("UPDATE cells SET status='pending', updated_at=? WHERE status='running'", (now,))
        return count

    def status(self, key: str) -> str | None:
        row = self.db.execute("SELECT status FROM cells WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def start_attempt(self, cell: Cell) -> tuple[int, int, Path, Path]:
        """Open a new attempt of `cell`: (attempt id, number, trajectory path, fresh workspace path)."""
        now = time.time()
        with self.transaction():
            number = self.db.execute("SELECT attempts FROM cells WHERE key=?", (cell.key,)).fetchone()[0] + 1
            trajectory = self.trajectories / f"{cell.stem}__a{number}.jsonl"
            workspace = self.workspaces / f"{cell.stem}__a{number}"
            attempt_id = self.db.execute(
                "INSERT INTO attempts (cell_key, number, status, started_at, trajectory, workspace)"
                " VALUES (?, ?, 'running', ?, ?, ?)",
                (cell.key, number, now, str(trajectory.relative_to(self.root)), str(workspace.relative_to(self.root))),
            ).lastrowid
            self.db.execute("UPDATE cells SET status='running', attempts=?, updated_at=? WHERE key=?",
                            (number, now, cell.key))
        workspace.mkdir(parents=True)
        return attempt_id, number, trajectory, workspace

    def finish_attempt(self, cell: Cell, attempt_id: int, outcome: dict[str, Any], failure: str | None = None) -> None:
        """Record the attempt's outcome in one transaction: `done` (counted) or `failed` with `failure`."""
        unknown = set(outcome) - set(OUTCOME_COLUMNS)
        if unknown:
            raise ValueError(f"unknown outcome fields {sorted(unknown)}")
        values = {column: outcome.get(column) for column in OUTCOME_COLUMNS}
        now = time.time()
        with self.transaction():
            self.db.execute("UPDATE attempts SET status=?, ended_at=? WHERE id=?",
                            ("failed" if failure else "finished", now, attempt_id))
            assignments = ", ".join(f"{column}=?" for column in values)
            self.db.execute(
                f"UPDATE cells SET status=?, failure=?, attempt_id=?, updated_at=?, {assignments} WHERE key=?",
                ("failed" if failure else "done", failure, attempt_id, now, *values.values(), cell.key))

    def rows(self, keys: list[str] | None = None) -> list[sqlite3.Row]:
        """The rows of `keys`, or else the current cells: those that no later-registered cell supersedes.

        A cell is superseded by one with the same model, task, config and seed registered later under
        another key (the task or its guidance changed, or another turn budget): summaries read the newest.
        """
        rows = self.db.execute("SELECT * FROM cells ORDER BY task, config, model, seed, created_at, rowid").fetchall()
        if keys is not None:
            wanted = set(keys)
            return [r for r in rows if r["key"] in wanted]
        newest = {(r["model"], r["task"], r["config"], r["seed"]): r for r in rows}
        return [r for r in rows if newest[r["model"], r["task"], r["config"], r["seed"]] is r]

    def superseded(self) -> int:
        """How many cells a later-registered cell supersedes (see `rows`)."""
        return self.db.execute("SELECT count(*) FROM cells").fetchone()[0] - len(self.rows())

    def attempts(self, key: str) -> list[sqlite3.Row]:
        return self.db.execute("SELECT * FROM attempts WHERE cell_key=? ORDER BY number", (key,)).fetchall()


class _Transaction:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type, exc, tb) -> None:
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")


class Trajectory:
    """One attempt's JSONL file: a header line, then every event verbatim, each flushed as it is written."""

    def __init__(self, path: Path, cell: Cell, attempt: int, settings: dict[str, Any]):
        self.path = path
        self._file = open(path, "x", encoding="utf-8")
        self.write({"type": "header", "t": time.time(), "key": cell.key, "cell": asdict(cell), "attempt": attempt,
                    "settings": settings})

    def write(self, event: dict[str, Any]) -> None:
        self._file.write(json.dumps(event, ensure_ascii=False, default=str) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()
