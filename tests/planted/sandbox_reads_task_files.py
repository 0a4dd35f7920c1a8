"""Planted: reads the task's expert.py and reference.py, and a suite task's expert, to copy them."""
from pathlib import Path

import d2kbench

REPO = Path(d2kbench.__file__).resolve().parents[2]
TARGETS = [
    REPO / "tests" / "fixtures" / "toy_axpy" / "expert.py",
    REPO / "tests" / "fixtures" / "toy_axpy" / "reference.py",
    Path(d2kbench.__file__).parent / "tasks" / "optimizer" / "muon_newton_schulz" / "expert.py",
]


def run(x, y, alpha):
    for target in TARGETS:
        source = target.read_text()  # the sandbox refuses: PermissionError
        raise RuntimeError(f"read {len(source)} characters of {target}")
