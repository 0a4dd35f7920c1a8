"""One judge sample: ask, validate the answer against the schema, send the error back and retry.

Retry policy: after an invalid answer the judge sees its own reply and a message with the
validation error, and answers again, up to `retries` more times (default `DEFAULT_RETRIES`). If no
answer is valid by then, or the back end gives up (`ModelError`, after its own transport retries),
the sample is a judge failure: it is recorded with the last error and never replaced by a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from d2kbench.agent.conversation import Conversation
from d2kbench.agent.models import ModelClient, ModelError, Usage
from d2kbench.judge.prompts import retry_message
from d2kbench.judge.schema import DEFAULT_RETRIES, AnswerError, Verdict, parse_answer
from d2kbench.suite.schema import RubricProperty


@dataclass
class Sample:
    """One judge sample: its verdicts when valid, else `failure` (the last validation or model error)."""

    verdicts: dict[str, Verdict] | None
    failure: str | None = None
    attempts: int = 0
    errors: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)

    def to_json(self) -> dict:
        verdicts = None if self.verdicts is None else {
            pid: {"met": v.met, "justification": v.justification} for pid, v in self.verdicts.items()}
        return {"verdicts": verdicts, "failure": self.failure, "attempts": self.attempts, "errors": self.errors,
                "usage": self.usage.to_json()}


async def ask_judge(model: ModelClient, system: str, user: str, rubric: tuple[RubricProperty, ...], *,
                    retries: int = DEFAULT_RETRIES, seed: int = 0) -> Sample:
    """Ask once, plus up to `retries` corrected answers; a `Sample` with verdicts or with a failure."""
    conversation = Conversation(system, seed=seed)
    conversation.add_user(user)
    sample = Sample(None)
    for _ in range(retries + 1):
        sample.attempts += 1
        try:
            reply = await model.complete(conversation, [])
        except ModelError as exc:
            sample.failure = f"model error: {exc}"
            return sample
        sample.usage.add(reply.usage)
        try:
            sample.verdicts = parse_answer(reply.text, rubric)
            return sample
        except AnswerError as exc:
            sample.errors.append(str(exc))
            conversation.add_reply(reply)
            conversation.add_user(retry_message(str(exc)))
    sample.failure = f"no valid answer after {sample.attempts} attempts: {sample.errors[-1]}"
    return sample
