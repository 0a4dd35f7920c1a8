"""The judge's answer format: a JSON object with one verdict per rubric property, and its validation.

```json
{"properties": [{"id": "<property id>", "met": true, "justification": "<one line>"}, ...]}
```

Every property id of the task's rubric appears exactly once, `met` is a JSON boolean and
`justification` a non-empty single line of at most `MAX_JUSTIFICATION_CHARS` characters. The reply
may be the bare object or the object inside one fenced code block; anything else is invalid.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from d2kbench.suite.schema import RubricProperty

MAX_JUSTIFICATION_CHARS = 400
DEFAULT_RETRIES = 2  # corrected answers asked for after an invalid one
_FENCE = re.compile(r"^```[A-Za-z]*\n(.*)\n```$", re.DOTALL)


class AnswerError(ValueError):
    """A judge reply that does not follow the schema; the message says what to fix."""


@dataclass(frozen=True)
class Verdict:
    """One property: met or not, and the judge's one-line reason."""

    property: str
    met: bool
    justification: str


def answer_schema(rubric: Sequence[RubricProperty]) -> dict[str, Any]:
    """The JSON Schema of a valid answer for `rubric` (shown to the judge; `parse_answer` enforces it)."""
    ids = [p.id for p in rubric]
    item = {"type": "object", "additionalProperties": False, "required": ["id", "met", "justification"],
            "properties": {"id": {"enum": ids}, "met": {"type": "boolean"},
                           "justification": {"type": "string", "minLength": 1,
                                             "maxLength": MAX_JUSTIFICATION_CHARS}}}
    return {"type": "object", "additionalProperties": False, "required": ["properties"],
            "properties": {"properties": {"type": "array", "minItems": len(ids), "maxItems": len(ids),
                                          "items": item}}}


def _json_text(reply: str) -> str:
    text = reply.strip()
    fenced = _FENCE.match(text)
    return fenced.group(1) if fenced else text


def parse_answer(reply: str, rubric: Sequence[RubricProperty]) -> dict[str, Verdict]:
    """The verdicts of a judge reply, by property id, in rubric order; raises `AnswerError` otherwise."""
    try:
        data = json.loads(_json_text(reply))
    except ValueError as exc:
        raise AnswerError(f"the reply is not a JSON object ({exc})") from None
    if not isinstance(data, dict) or set(data) != {"properties"}:
        raise AnswerError('the reply must be a JSON object with the single key "properties"')
    items = data["properties"]
    if not isinstance(items, list):
        raise AnswerError('"properties" must be a list')
    known = {p.id for p in rubric}
    found: dict[str, Verdict] = {}
    problems: list[str] = []
    for index, item in enumerate(items):
        item_problems = _item_problems(item, known, found)
        problems += [f"properties[{index}]: {problem}" for problem in item_problems]
        if not item_problems:
            found[item["id"]] = Verdict(item["id"], item["met"], item["justification"].strip())
    named = {item.get("id") for item in items if isinstance(item, dict) and isinstance(item.get("id"), str)}
    missing = [p.id for p in rubric if p.id not in named]
    if missing:
        problems.append(f"missing properties: {', '.join(missing)}")
    if problems:
        raise AnswerError("; ".join(problems))
    return {p.id: found[p.id] for p in rubric}


def _item_problems(item: object, known: set[str], found: dict[str, Verdict]) -> list[str]:
    if not isinstance(item, dict) or set(item) != {"id", "met", "justification"}:
        return ["must be an object with exactly the keys id, met, justification"]
    pid, met, why = item["id"], item["met"], item["justification"]
    problems = []
    if not isinstance(pid, str) or pid not in known:
        problems.append(f"unknown property id {json.dumps(pid)}")
    elif pid in found:
        problems.append(f"property {pid!r} appears twice")
    if not isinstance(met, bool):
        problems.append(f"met must be true or false, got {json.dumps(met)}")
    if not isinstance(why, str) or not why.strip() or "\n" in why.strip():
        problems.append("justification must be a non-empty single-line string")
    elif len(why) > MAX_JUSTIFICATION_CHARS:
        problems.append(f"justification longer than {MAX_JUSTIFICATION_CHARS} characters")
    return problems
