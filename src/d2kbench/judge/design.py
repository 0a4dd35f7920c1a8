"""Design-only mode: the model reads the task (no guidance, no tools) and writes a design, no code."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from d2kbench.agent.conversation import Conversation
from d2kbench.agent.models import ModelClient, ModelError
from d2kbench.judge.prompts import PROMPT_VERSION, design_messages
from d2kbench.judge.records import DESIGNS, content_key, safe_name
from d2kbench.runs.cells import task_content_hash
from d2kbench.suite import Task


def design_key(model: str, task: Task, seed: int) -> str:
    return content_key({"model": model, "task": task.id, "task_hash": task_content_hash(task), "seed": seed,
                        "prompt_version": PROMPT_VERSION})


def design_path(out: Path, model: str, task: Task, seed: int) -> Path:
    key = design_key(model, task, seed)
    return out / DESIGNS / f"{task.id}__{safe_name(model)}__s{seed}__{key[:12]}.json"


async def design(task: Task, model: ModelClient, model_spec: str, seed: int = 0) -> dict[str, Any]:
    """One written design as a record: `status` `ok` with its `text`, or `failed` with the `error`."""
    system, user = design_messages(task)
    conversation = Conversation(system, seed=seed)
    conversation.add_user(user)
    record: dict[str, Any] = {
        "key": design_key(model_spec, task, seed), "kind": "design", "model": model_spec, "task": task.id,
        "task_hash": task_content_hash(task), "seed": seed, "prompt_version": PROMPT_VERSION,
        "text": None, "error": None, "usage": None, "stop_reason": None}
    try:
        reply = await model.complete(conversation, [])
    except ModelError as exc:
        record["error"] = f"model error: {exc}"
    else:
        record.update(text=reply.text, usage=reply.usage.to_json(), stop_reason=reply.stop_reason)
        if not reply.text.strip():
            record["error"] = "the model wrote an empty design"
    record["status"] = "failed" if record["error"] else "ok"
    record["created_at"] = time.time()
    return record
