"""The prompts of design-only mode and of the two judges. `PROMPT_VERSION` enters every stored key."""

from __future__ import annotations

import json

from d2kbench.agent.prompts import GPU_HARDWARE, task_text
from d2kbench.judge.schema import MAX_JUSTIFICATION_CHARS, answer_schema
from d2kbench.suite import Task

PROMPT_VERSION = 1

DESIGN_SYSTEM = f"""\
You are a GPU kernel engineer. You design a Triton kernel for one task; you do not write its code.
The kernel will run on {GPU_HARDWARE}"""

DESIGN_REQUEST = """

# What to write
Write the design of the fastest correct Triton implementation of `run` you can devise, in prose:
the algorithm, how work is split into programs and tiles, how data flows through registers, shared
memory and global memory, the kernel launches, and the execution details that matter for speed on
this GPU (tiling, pipelining, precision, masks, launch configuration). Do not write code: at most
short formulas or pseudo-code fragments. You have no tools; your reply is the design."""

JUDGE_SYSTEM = (
    "You are a strict reviewer of GPU kernel work. You check a list of design properties against one {subject} "
    "and decide for each property whether it is met. A property is met only when the {subject} clearly {does} "
    "what the property's check describes; intent, vague mentions or partial versions do not count. Judge each "
    "property on its own. You answer with one JSON object and nothing else."
)

SUBJECTS = {"design": "written design", "implementation": "Triton implementation (solution.py)"}
VERBS = {"design": "proposes", "implementation": "implements"}


def design_messages(task: Task) -> tuple[str, str]:
    """(system, user) of design-only mode: the agent's task text (H200, no guidance, no tools) and the request."""
    return DESIGN_SYSTEM, task_text(task, gpu=True) + DESIGN_REQUEST


def rubric_text(task: Task) -> str:
    lines = []
    for p in task.rubric:
        verify = " ".join(p.verify.split())
        lines.append(f"- id `{p.id}` ({p.layer}): {p.title}.\n  Check: {verify}")
    return "\n".join(lines)


def judge_messages(task: Task, kind: str, subject: str) -> tuple[str, str]:
    """(system, user) asking the judge of `kind` (`design` or `implementation`) to score `subject`."""
    if kind not in SUBJECTS:
        raise ValueError(f"judge kind must be one of {', '.join(SUBJECTS)}, got {kind!r}")
    name = SUBJECTS[kind]
    fence = "```python" if kind == "implementation" else "```text"
    user = "\n".join([
        f"# Task: {task.title} (`{task.id}`)", "", task.description.strip(), "",
        f"Entry point: `{task.signature}`. Target GPU: {GPU_HARDWARE}", "",
        f"# The {name} to review", "", fence, subject.strip(), "```", "",
        "# The properties to check", "", rubric_text(task), "",
        "# Your answer",
        f"Reply with one JSON object of this JSON Schema: every property id above exactly once, `met` a "
        f"boolean, `justification` one line of at most {MAX_JUSTIFICATION_CHARS} characters that points "
        f"at what in the {name} meets or misses the check.",
        json.dumps(answer_schema(task.rubric)),
    ])
    return JUDGE_SYSTEM.format(subject=name, does=VERBS[kind]), user


def retry_message(error: str) -> str:
    """The user message after an invalid answer: the validation error, and the request to answer again."""
    return (f"Your answer is invalid: {error}. Reply again with the complete JSON object (every property id "
            f"exactly once), and nothing else.")
