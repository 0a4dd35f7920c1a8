"""The run matrix: cells (model x task x config x seed) and the content-addressed key of each."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from d2kbench.suite import Task

CONFIGS = ("none", "L1", "L1+L2", "L1+L2+L3")


def task_content_hash(task: Task) -> str:
    """sha256 over every file of the task folder (sorted relative paths, then bytes).

    The judge's calibration kernels (`ablations/`) are left out: they change neither what the agent sees
    nor how its answer is evaluated.
    """
    digest = hashlib.sha256()
    for file in sorted(p for p in task.path.rglob("*") if p.is_file() and not _outside_hash(p.relative_to(task.path))):
        relative = file.relative_to(task.path).as_posix().encode()
        content = file.read_bytes()
        digest.update(len(relative).to_bytes(8, "little") + relative)
        digest.update(len(content).to_bytes(8, "little") + content)
    return digest.hexdigest()


def _outside_hash(relative: Path) -> bool:
    return "__pycache__" in relative.parts or relative.parts[0] == "ablations"


def guidance_hash(task: Task, config: str) -> str:
    """sha256 of the guidance text that `config` gives the agent (the empty string for `none`)."""
    return hashlib.sha256(task.guidance_for(config).encode()).hexdigest()


@dataclass(frozen=True)
class Cell:
    """One run of the matrix. `key` changes whenever any field does, the task's content included."""

    model: str
    task: str
    task_hash: str
    config: str
    guidance_hash: str
    seed: int
    turns: int

    @property
    def key(self) -> str:
        canonical = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:32]

    @property
    def label(self) -> str:
        return f"{self.task} {self.config} {self.model} seed={self.seed}"

    @property
    def stem(self) -> str:
        """A file-name-safe name for this cell's trajectories and workspaces."""
        safe_model = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.model)
        return f"{self.task}__{self.config}__{safe_model}__s{self.seed}__{self.key[:12]}"


def make_cell(model: str, task: Task, config: str, seed: int, turns: int) -> Cell:
    return Cell(model=model, task=task.id, task_hash=task_content_hash(task), config=config,
                guidance_hash=guidance_hash(task, config), seed=seed, turns=turns)


def parse_configs(text: str) -> list[str]:
    """`none,L1+L2+L3` -> the configs, each checked; duplicates are refused."""
    configs = [c.strip() for c in text.split(",") if c.strip()]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown or not configs:
        raise ValueError(f"--configs takes a comma-separated list of {', '.join(CONFIGS)}; got {text!r}")
    if len(set(configs)) != len(configs):
        raise ValueError(f"--configs names a config twice: {text!r}")
    return configs


def build_matrix(models: list[str], tasks: list[Task], configs: list[str], seeds: int, turns: int
                 ) -> list[tuple[Cell, Task]]:
    """Every cell of models x tasks x configs x seeds 0..seeds-1, task-major so a task's runs sit together."""
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        raise ValueError(f"--tasks names a task id twice: {', '.join(sorted({i for i in ids if ids.count(i) > 1}))}")
    if seeds < 1:
        raise ValueError(f"--seeds must be at least 1, got {seeds}")
    if turns < 1:
        raise ValueError(f"--turns must be at least 1, got {turns}")
    cells = [(make_cell(m, t, c, s, turns), t) for t in tasks for c in configs for m in models for s in range(seeds)]
    keys = [cell.key for cell, _ in cells]
    if len(set(keys)) != len(keys):
        raise ValueError("the matrix names a cell twice (a model or task given twice?)")
    return cells
