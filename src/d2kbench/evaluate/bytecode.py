"""A bytecode cache for the workers' imports (`PYTHONPYCACHEPREFIX`).

Where the installed packages hold no compiled bytecode (the H200's torch: its installer wrote none, and the
evaluator may not write there), every worker compiles the source of each module it imports as it starts: torch,
Triton, and torch._dynamo with sympy for the op guard's first op. That is seconds of CPU per worker (3.7 s in
`compile` for the op guard's imports alone, bench/results/2026-12-04-h200-owed-19 call5), paid by each
evaluation's cold start and by the prestarted pair, which starts beside the evaluation it is started for.

A warm-up process (`python -m d2kbench.evaluate.bytecode FOLDER`), started once per cache folder and Python,
torch and Triton versions, imports what a worker imports and writes their bytecode under one folder; workers
then read it and write nothing (`PYTHONDONTWRITEBYTECODE` stays). Until the warm-up has finished (its marker
written) workers get no prefix: a prefix makes Python skip the packages' own `__pycache__`, so a half-written
cache would be slower than none where the packages have bytecode.

Trust: the folder is the evaluator's, not writable by anyone else (checked before each use), so a candidate
confined to a uid of its own can only read it (landlock opens it to reading, `sandbox._read_roots`): the
bytecode the trusted worker runs is only ever the warm-up's. The warm-up imports no task code (the candidate may
read the folder, and the experts must stay hidden from it).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib
import importlib.metadata
import os
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# What a worker imports as it starts and as it serves (`worker.main`, the op guard's first op, a Triton compile).
# Optional ones may be missing on a machine (no CUDA backend): they are skipped.
IMPORTS = ("d2kbench.evaluate.worker", "d2kbench.evaluate.timing", "d2kbench.evaluate.sandbox")
OPTIONAL_IMPORTS = ("triton.language", "triton.compiler.compiler", "triton.runtime.jit", "triton.runtime.driver",
                    "triton.backends.nvidia.compiler", "triton.backends.nvidia.driver", "numpy")

_started: set[Path] = set()  # folders whose warm-up this process started
_lock = threading.Lock()


def cache_dir() -> Path:
    """`D2K_BYTECODE_CACHE`, else a folder of this uid's in the temporary folder (which a candidate's uid can
    walk into: a folder under root's home it could not read)."""
    default = Path(tempfile.gettempdir()) / f"d2kbench-bytecode-{os.getuid()}"
    return Path(os.environ.get("D2K_BYTECODE_CACHE") or default)


@functools.cache
def versions() -> str:
    """What the cached bytecode is valid for: this Python and the torch and Triton it imports (read once: every
    evaluation asks)."""
    parts = [sys.executable, sys.version.split()[0]]
    for package in ("torch", "triton"):
        try:
            parts.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{package} none")
    return " | ".join(parts)


def marker(folder: Path) -> Path:
    """The warm-up's last write, naming the versions it compiled for: one per Python and packages, so that the
    evaluators of several environments share a folder without undoing each other's."""
    return folder / f"complete-{hashlib.sha256(versions().encode()).hexdigest()[:16]}"


def owned_folder(folder: Path) -> bool:
    """A real folder of this uid that no one else may write (so that no other uid planted bytecode in it)."""
    try:
        info = folder.lstat()
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def ready(folder: Path) -> bool:
    """The warm-up has filled `folder` for these versions."""
    try:
        return owned_folder(folder) and marker(folder).read_text() == versions()
    except OSError:
        return False


def prefix(env: dict[str, str]) -> str | None:
    """The bytecode folder for workers started with `env`, once it is warm; else None, and its warm-up started
    in the background (once per folder in this process)."""
    folder = cache_dir()
    if ready(folder):
        return str(folder)
    with _lock:
        if folder not in _started:
            _started.add(folder)
            start_warmup(folder, env)
    return None


def start_warmup(folder: Path, env: dict[str, str]) -> subprocess.Popen | None:
    """Start the warm-up process for `folder` (made 0755 if missing); None where the folder is not this uid's
    alone."""
    try:
        folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError:
        return None
    if not owned_folder(folder):
        return None
    child_env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    child_env.update(PYTHONPYCACHEPREFIX=str(folder), CUDA_VISIBLE_DEVICES="")
    return subprocess.Popen([sys.executable, "-m", "d2kbench.evaluate.bytecode", str(folder)], env=child_env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def warm(folder: Path) -> bool:
    """Import what a worker imports, writing its bytecode under `folder` (`sys.pycache_prefix`), then the
    marker. False where another warm-up holds the folder."""
    os.umask(0o022)  # folders 0755, files as their sources: the candidate's uid must read them
    with open(folder / ".lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        sys.pycache_prefix, sys.dont_write_bytecode = str(folder), False
        for name in IMPORTS:
            importlib.import_module(name)
        for name in OPTIONAL_IMPORTS:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a backend this machine lacks: its workers will not import it either
                pass
        from d2kbench.evaluate import worker

        worker.warm_op_guard()
        written = folder / f".{marker(folder).name}.tmp"
        written.write_text(versions())
        written.replace(marker(folder))
    return True


if __name__ == "__main__":
    sys.exit(0 if warm(Path(sys.argv[1])) else 1)
