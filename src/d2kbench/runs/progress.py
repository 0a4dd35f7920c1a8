"""Progress of a matrix: a rich progress bar on a terminal (cells, turns, tokens, ETA), plain lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import Any

from d2kbench.runs.cells import Cell


class Progress:
    """Counts cells, turns and tokens; prints one plain line per finished cell."""

    def __init__(self, total: int, already_done: int):
        self.total, self.done = total, already_done
        self.turns = self.tokens = 0
        self.started = time.monotonic()
        self.cells_this_session = 0

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def event(self, event: dict[str, Any]) -> None:
        """Account one trajectory event: a `response` is a turn; its usage adds tokens."""
        if event.get("type") != "response":
            return
        self.turns += 1
        usage = event.get("usage") or {}
        self.tokens += int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)

    def eta_s(self) -> float | None:
        if not self.cells_this_session:
            return None
        per_cell = (time.monotonic() - self.started) / self.cells_this_session
        return per_cell * (self.total - self.done)

    def cell_finished(self, cell: Cell, line: str) -> None:
        self.done += 1
        self.cells_this_session += 1
        eta = self.eta_s()
        eta_text = f", ETA {eta:.0f} s" if eta is not None else ""
        self.print(f"[{self.done}/{self.total}] {cell.label}: {line} (turns {self.turns}, tokens {self.tokens}"
                   f"{eta_text})")

    def print(self, text: str) -> None:
        print(text, flush=True)


class RichProgress(Progress):
    """The same counts drawn as a rich progress bar; finished cells are printed above it."""

    def __init__(self, total: int, already_done: int):
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        from rich.progress import Progress as Bar

        super().__init__(total, already_done)
        self.bar = Bar(TextColumn("cells"), BarColumn(), MofNCompleteColumn(), TextColumn("turns {task.fields[turns]}"),
                       TextColumn("tokens {task.fields[tokens]}"), TimeElapsedColumn(), TextColumn("ETA"),
                       TimeRemainingColumn())
        self.bar_task = self.bar.add_task("cells", total=total, completed=already_done, turns=0, tokens=0)

    def __enter__(self) -> RichProgress:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def event(self, event: dict[str, Any]) -> None:
        super().event(event)
        self.bar.update(self.bar_task, turns=self.turns, tokens=self.tokens)

    def cell_finished(self, cell: Cell, line: str) -> None:
        super().cell_finished(cell, line)
        self.bar.update(self.bar_task, completed=self.done)

    def print(self, text: str) -> None:
        self.bar.console.print(text, markup=False, highlight=False)


def make_progress(total: int, already_done: int) -> Progress:
    """A rich bar when stdout is a terminal and rich is installed; plain lines otherwise."""
    if sys.stdout.isatty():
        try:
            return RichProgress(total, already_done)
        except ImportError:
            pass
    return Progress(total, already_done)
