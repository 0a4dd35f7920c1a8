"""Compiled kernels of a sandboxed candidate, kept between evaluations of the same source file.

A sandboxed candidate compiles into a Triton cache inside its own folder, so without reuse every
evaluation of one file compiles again (an agent's `run_tests`, `benchmark` and final evaluation of
the same solution are three). The parent keeps that cache's files per hash of the source and
copies them into the next sandbox of the same source: a candidate can only ever meet its own
compilations. Only regular files with a single link, owned by the candidate's uid, are kept: a
symbolic or hard link would otherwise make the parent copy a file the candidate may not read.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

MAX_BYTES = 512 << 20  # a larger cache is not kept


def cache_root() -> Path:
    base = os.environ.get("D2K_TRITON_CACHE", str(Path.home() / ".cache" / "d2kbench" / "triton"))
    return Path(base) / "candidates"


def source_key(source: Path) -> str:
    return hashlib.sha256(source.read_bytes()).hexdigest()[:32]


def restore(source: Path, dest: Path, uid: int | None) -> int:
    """Copy the kept cache of `source` into `dest`, owned by `uid`; the number of files copied."""
    stored = cache_root() / source_key(source)
    if not stored.is_dir():
        return 0
    count = 0
    for path in sorted(stored.rglob("*")):
        target = dest / path.relative_to(stored)
        if path.is_dir() and not path.is_symlink():
            target.mkdir(parents=True, exist_ok=True)
        elif path.is_file() and not path.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            count += 1
    if uid is not None:
        for path in [dest, *dest.rglob("*")]:
            os.chown(path, uid, uid)
    return count


def save(source: Path, cache: Path, uid: int | None) -> int:
    """Keep the regular, singly linked files of `cache` (owned by `uid`) for `source`; the number kept.

    Call it only once the candidate's processes are gone. A cache kept earlier is left as it is.
    """
    target = cache_root() / source_key(source)
    if target.exists() or not cache.is_dir():
        return 0
    files, total = [], 0
    for folder, _, names in os.walk(cache, followlinks=False):
        for name in names:
            path = Path(folder) / name
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or (uid is not None and st.st_uid != uid):
                continue
            total += st.st_size
            files.append(path)
    if not files or total > MAX_BYTES:
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".saving-", dir=target.parent))
    for path in files:
        out = staging / path.relative_to(cache)
        out.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
    try:
        staging.rename(target)  # atomic: a concurrent save of the same source keeps the first
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        return 0
    return len(files)
