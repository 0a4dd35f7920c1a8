"""The design judge and the implementation judge: n samples of one subject, summarised into a record."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from d2kbench.agent.models import ModelClient
from d2kbench.judge.ask import DEFAULT_RETRIES, ask_judge
from d2kbench.judge.prompts import PROMPT_VERSION, judge_messages
from d2kbench.judge.records import content_key, safe_name, text_hash
from d2kbench.judge.scoring import summarise
from d2kbench.runs.cells import task_content_hash
from d2kbench.suite import Task


@dataclass(frozen=True)
class Subject:
    """What is judged: a written design (`kind="design"`) or a run's solution.py (`"implementation"`).

    `source` is `design` or the run's guidance config; `origin` identifies it (the design record's key or
    the run cell's key); `label` names its file."""

    kind: str
    task: Task
    text: str
    model: str
    source: str
    seed: int
    origin: str
    label: str


def judgement_key(subject: Subject, judge_model: str, samples: int) -> str:
    return content_key({"kind": subject.kind, "task": subject.task.id, "task_hash": task_content_hash(subject.task),
                        "origin": subject.origin, "text": text_hash(subject.text), "judge": judge_model,
                        "samples": samples, "prompt_version": PROMPT_VERSION})


def judgement_name(subject: Subject, judge_model: str, samples: int) -> str:
    key = judgement_key(subject, judge_model, samples)
    return (f"{subject.kind}__{subject.task.id}__{safe_name(subject.label)}__{safe_name(judge_model)}"
            f"__n{samples}__{key[:12]}.json")


async def judge_subject(subject: Subject, judge: ModelClient, judge_model: str, *, samples: int = 1,
                        retries: int = DEFAULT_RETRIES) -> dict[str, Any]:
    """Judge `subject` `samples` times (independent requests, seeds 0..n-1) into one judgement record.

    `status` is `ok` when at least one sample is valid (the summary is over the valid ones) and
    `failed` when none is (no summary: a failure is never turned into verdicts)."""
    if samples < 1:
        raise ValueError(f"--samples must be at least 1, got {samples}")
    system, user = judge_messages(subject.task, subject.kind, subject.text)
    results = [await ask_judge(judge, system, user, subject.task.rubric, retries=retries, seed=seed)
               for seed in range(samples)]
    valid = [{pid: v.met for pid, v in r.verdicts.items()} for r in results if r.verdicts is not None]
    return {
        "key": judgement_key(subject, judge_model, samples), "kind": subject.kind, "task": subject.task.id,
        "task_hash": task_content_hash(subject.task), "model": subject.model, "source": subject.source,
        "seed": subject.seed, "origin": subject.origin, "label": subject.label, "judge_model": judge_model,
        "samples_requested": samples, "retries": retries, "prompt_version": PROMPT_VERSION,
        "status": "ok" if valid else "failed", "valid_samples": len(valid),
        "failed_samples": len(results) - len(valid),
        "summary": summarise(subject.task.rubric, valid) if valid else None,
        "samples": [r.to_json() for r in results], "created_at": time.time(),
    }
