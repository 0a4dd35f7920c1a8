"""Design and judgement records: one JSON file each, written atomically, named after a content key.

`DIR/designs/<task>__<model>__s<seed>__<key12>.json` and
`DIR/judgements/<kind>__<task>__<subject label>__<judge>__n<samples>__<key12>.json`. A file is written
to a temporary name and renamed, so a crash leaves either no record or a complete one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from d2kbench.runs.store import file_in_the_way

DESIGNS = "designs"
JUDGEMENTS = "judgements"


def content_key(fields: dict[str, Any]) -> str:
    """First 32 hex digits of the sha256 of `fields` as canonical JSON."""
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


NAME_PART_CHARS = 48  # file names stay far below the usual 255-byte limit; the key keeps them unique


def safe_name(text: str) -> str:
    """`text` as a file-name part: unusual characters replaced, cut to `NAME_PART_CHARS`."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:NAME_PART_CHARS]


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Write `record` as JSON at `path`, atomically (temporary file, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as file:
            json.dump(record, file, indent=1, ensure_ascii=False)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        raise


def ensure_folder(folder: Path) -> None:
    """Create `folder` (and its parents) unless it exists; ValueError, naming the path, if it cannot be one.

    Called before any model call, so that a record cannot be lost for want of a place to write it.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        culprit = file_in_the_way(folder)
        if culprit is not None:
            held = "" if culprit == folder else f", to hold {folder}"
            raise ValueError(f"{culprit} is not a folder; it must be a folder{held}") from None
        raise ValueError(f"cannot create the folder {folder} ({exc.strerror or exc}); it must be a folder") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write in the folder {folder}")


def write_record_or_keep(path: Path, record: dict[str, Any]) -> None:
    """`write_record`; if that fails, keep `record` elsewhere and raise an OSError naming `path` and where it went.

    The record holds a model's answer, maybe a paid one: it goes to a file in the temporary folder, or, if
    even that fails, to standard error.
    """
    try:
        write_record(path, record)
    except OSError as exc:
        try:
            handle, kept = tempfile.mkstemp(prefix="d2k-unwritten-", suffix=f"-{path.name}")
            with open(handle, "w", encoding="utf-8") as file:
                json.dump(record, file, indent=1, ensure_ascii=False)
            where = f"kept in {kept}"
        except OSError:
            print(json.dumps(record, ensure_ascii=False), file=sys.stderr)
            where = "printed above"
        raise OSError(f"could not write {path} ({exc.strerror or exc}); the record is {where}") from exc


def read_record(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path}: not a readable record ({exc}); move it away to redo it") from None
    if not isinstance(record, dict) or "key" not in record:
        raise ValueError(f"{path}: not a d2k record (no key); move it away to redo it")
    return record


def read_records(folder: Path) -> list[dict[str, Any]]:
    """Every record of a `designs/` or `judgements/` folder, in file-name order (none if it is absent)."""
    if not folder.is_dir():
        return []
    return [read_record(p) for p in sorted(folder.glob("*.json"))]


def needs_work(path: Path, retry_failed: bool) -> bool:
    """True unless `path` holds a record that is done (or failed, when failures are not retried)."""
    if not path.exists():
        return True
    return retry_failed and read_record(path)["status"] != "ok"
