"""Every benchmark folder under bench/results/ says what made it: a README with the date, the command, the machine
and the torch and Triton versions (in it or in the env.txt files the session scripts write beside the logs), so that
a figure cited in the docs can be traced to its run."""

import re
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
FOLDERS = sorted(p for p in RESULTS.iterdir() if p.is_dir())
NEEDED = {
    "a date": r"\b20\d\d-\d\d-\d\d",
    "the command": r"(?i)\bcommands?\b|\bbash |\bpython3? ",
    "the machine": r"(?i)\bH200\b|\bH100\b|\bCPU\b",
    "the torch version": r"(?i)\btorch[ =]+\d+\.\d+",
    "the Triton version": r"(?i)\btriton[ =]+\d+\.\d+",
}


def test_there_are_results():
    assert len(FOLDERS) > 10


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name for p in FOLDERS])
def test_a_results_folder_says_what_made_it(folder):
    readme = folder / "README.md"
    assert readme.is_file(), f"{folder.name} has no README.md"
    text = "\n".join(p.read_text(errors="replace") for p in [readme, *sorted(folder.rglob("env.txt"))])
    missing = [what for what, pattern in NEEDED.items() if not re.search(pattern, text)]
    assert not missing, f"{folder.name}: README.md and env.txt do not give {', '.join(missing)}"
