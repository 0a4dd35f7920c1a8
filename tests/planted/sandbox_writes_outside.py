"""Planted: writes files outside its scratch folder (a shared temp folder, the evaluator's package)."""
from pathlib import Path

import d2kbench

TARGETS = [Path("/tmp/d2k-planted-escape.txt"), Path(d2kbench.__file__).parent / "planted_escape.txt"]


def run(x, y, alpha):
    for target in TARGETS:
        target.write_text("written by a candidate")  # the sandbox refuses: PermissionError
    raise RuntimeError("wrote outside the scratch folder")
