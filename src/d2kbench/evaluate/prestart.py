"""Workers started ahead for the next evaluation (`EvalOptions.prestart`).

Starting a worker (Python, torch, a CUDA context) takes seconds, and an agent's run evaluates one task again and
again. With `prestart`, each evaluation, once its own workers are up, starts a trusted and a candidate worker for
the next evaluation of the same task, and the next one takes them instead of starting its own. A started worker
has loaded nothing: the evaluation that takes it loads the task and the candidate as always, so a candidate's
worker still never holds code of another candidate.

At most `PAIRS_PER_THREAD` pairs wait per thread, the oldest killed first; every waiting pair is killed when the
process exits. Pairs belong to the thread that started them, and only that thread may take them (the agent's
evaluation service runs each device's evaluations on a thread of its own); the pairs of a thread that ended are
killed by the next `start` (a worker started as a fresh interpreter dies with its thread already:
`worker.die_with_parent`).
"""

from __future__ import annotations

import atexit
import shutil
import threading
from collections.abc import Callable, Hashable
from pathlib import Path

from d2kbench.evaluate import channel
from d2kbench.evaluate.workers import WorkerProcess

ROLES = ("trusted", "candidate")
# pairs waiting per thread, for as many keys (tasks): agents that share a device interleave their evaluations
PAIRS_PER_THREAD = 4


class Prestarted:
    """The pairs of workers waiting for the next evaluation of a key, per thread, and their folders."""

    def __init__(self) -> None:
        # (thread, key) -> role -> worker, oldest first: agents that share a device interleave their tasks
        self.pairs: dict[tuple[int, Hashable], dict[str, WorkerProcess]] = {}
        self.lock = threading.Lock()
        self.work: Path | None = None
        self.spool: Path | None = None

    def folders(self) -> tuple[Path, Path]:
        """Scratch and spool folders of prestarted workers: outside any evaluation's, which its close removes."""
        if self.work is None or self.spool is None:
            self.work = channel.private_folder("d2k-prestart-")
            self.spool = channel.private_folder("d2k-prestart-spool-", channel.spool_root())
        return self.work, self.spool

    def take(self, key: Hashable, role: str) -> WorkerProcess | None:
        """This thread's waiting worker of `role` for `key` if it is alive; else None."""
        with self.lock:
            worker = self.pairs.get((threading.get_ident(), key), {}).pop(role, None)
        if worker is not None and not worker.alive:
            discard_worker(worker)
            return None
        return worker

    def start(self, key: Hashable, spawn: Callable[[str, Path, Path], WorkerProcess]) -> None:
        """Start this thread's next pair for `key`: `spawn(role, scratch, spool)` for each role not waiting yet.
        This thread's oldest pairs beyond `PAIRS_PER_THREAD`, and those of threads that ended, are killed."""
        thread = threading.get_ident()
        with self.lock:
            running = {t.ident for t in threading.enumerate()}
            ended = [k for k in self.pairs if k[0] not in running]
            others = [k for k in self.pairs if k[0] == thread and k[1] != key]  # oldest first
            for old in ended + others[:max(0, len(others) + 1 - PAIRS_PER_THREAD)]:
                self._drop(old)
            waiting = self.pairs.pop((thread, key), {})
            self.pairs[(thread, key)] = waiting  # the newest now
            work, spool = self.folders()
            for role in ROLES:
                if role not in waiting:
                    waiting[role] = spawn(role, work, spool)

    def discard(self) -> None:
        """Kill every waiting worker and remove the folders."""
        with self.lock:
            for pair in list(self.pairs):
                self._drop(pair)
            for folder in (self.work, self.spool):
                if folder is not None:
                    shutil.rmtree(folder, ignore_errors=True)
            self.work = self.spool = None

    def _drop(self, pair: tuple[int, Hashable]) -> None:
        for worker in self.pairs.pop(pair).values():
            discard_worker(worker)


def discard_worker(worker: WorkerProcess) -> None:
    """Kill a worker and remove its folders and log (a prestarted one's live outside any evaluation's)."""
    worker.kill()
    remove_folders(worker)


def remove_folders(worker: WorkerProcess) -> None:
    for folder in (worker.home, worker.spool):
        shutil.rmtree(folder, ignore_errors=True)
    worker.log_path.unlink(missing_ok=True)


PRESTARTED = Prestarted()
atexit.register(PRESTARTED.discard)
