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
import json
import os
import shutil
import stat
from pathlib import Path

MAX_BYTES = 512 << 20  # a larger cache is not kept
# Triton's record of one compiled kernel's files names them by absolute path, inside the cache folder of the
# process that compiled them; a group whose files are not all there is a cache miss. Kept with paths relative
# to the cache folder, each is rebased onto the folder it is restored into.
GROUP_PREFIX = "__grp__"
MAX_GROUP_BYTES = 1 << 20


def cache_root() -> Path:
    base = os.environ.get("D2K_TRITON_CACHE", str(Path.home() / ".cache" / "d2kbench" / "triton"))
    return Path(base) / "candidates"


def source_key(source: Path) -> str:
    return hashlib.sha256(source.read_bytes()).hexdigest()[:32]


def rebase_group(text: str, old: Path | None, new: Path | None) -> str:
    """A Triton group record with its file paths made relative to `old` (when saving) or joined onto `new`
    (when restoring). A path outside `old`, or one that would climb out of `new`, is left out: the record then
    names a missing file and reads as a cache miss, never as a file elsewhere."""
    try:
        children = json.loads(text).get("child_paths")
    except (ValueError, AttributeError):
        children = None
    if not isinstance(children, dict):
        return json.dumps({"child_paths": None})
    rebased = {}
    for name, path in children.items():
        p = Path(str(path))
        if old is not None:
            rebased[name] = str(p.relative_to(old)) if p.is_relative_to(old) else None
        elif not p.is_absolute() and ".." not in p.parts:
            rebased[name] = str(new / p)
        else:
            rebased[name] = None
    if None in rebased.values():
        return json.dumps({"child_paths": None})  # Triton reads it as no group: a miss, compiled again
    return json.dumps({"child_paths": rebased})


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
        elif path.is_file() and not path.is_symlink() and not path.name.startswith("."):
            target.parent.mkdir(parents=True, exist_ok=True)
            if path.name.startswith(GROUP_PREFIX):
                target.write_text(rebase_group(path.read_text(), None, dest))
            else:
                shutil.copyfile(path, target)
            count += 1
    if uid is not None:
        for path in [dest, *dest.rglob("*")]:
            os.chown(path, uid, uid)
    return count


def save(source: Path, cache: Path, uid: int | None) -> int:
    """Keep the regular, singly linked files of `cache` (owned by `uid`) for `source`, beside what earlier
    evaluations of the same source kept: the files it adds (each whole, by rename), the number added.

    A file kept already stays as it is (a kernel's files are named by its hash). Group records go last, after
    the files they name. Call it only once the candidate's processes are gone.
    """
    target = cache_root() / source_key(source)
    if not cache.is_dir():
        return 0
    kept = sum(p.stat().st_size for p in target.rglob("*") if p.is_file()) if target.is_dir() else 0
    files, total = [], 0
    for folder, _, names in os.walk(cache, followlinks=False):
        for name in names:
            path = Path(folder) / name
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or (uid is not None and st.st_uid != uid):
                continue
            if (target / path.relative_to(cache)).exists():
                continue
            total += st.st_size
            files.append(path)
    if not files or kept + total > MAX_BYTES:
        return 0
    for path in sorted(files, key=lambda p: p.name.startswith(GROUP_PREFIX)):
        out = target / path.relative_to(cache)
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.parent / f".{out.name}.{os.getpid()}.partial"  # never restored (its name starts with '.')
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as src, open(partial, "wb") as dst:
            if path.name.startswith(GROUP_PREFIX):
                dst.write(rebase_group(src.read(MAX_GROUP_BYTES).decode(errors="replace"), cache, None).encode())
            else:
                shutil.copyfileobj(src, dst)
        os.replace(partial, out)
    return len(files)
