"""The harness's retry policy for model requests (the SDKs' own retries are off).

Retried: HTTP 408, 409, 429, 5xx (529 included), timeouts and connection errors. The wait is the
server's Retry-After (seconds or an HTTP date) when it sends one, else exponential backoff with full
jitter; every failed attempt is recorded as a `model_retry` event. After `max_attempts` attempts, or
on an error that is not retryable (400, 401, 403, 404, ...), the request fails with `ModelError`.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from d2kbench.agent.models.base import ModelError

T = TypeVar("T")
RETRYABLE_STATUS = {408, 409, 429}


@dataclass
class RetryPolicy:
    max_attempts: int = 8
    base_s: float = 1.0
    cap_s: float = 60.0
    max_retry_after_s: float = 600.0  # a longer Retry-After is waited only this long


@dataclass
class Failure:
    """A failed attempt as the back end classifies it: `status` is the HTTP status, or None for a network error."""

    retryable: bool
    status: int | None
    message: str
    retry_after_s: float | None = None


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: delta seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def status_is_retryable(status: int) -> bool:
    return status in RETRYABLE_STATUS or status >= 500


def backoff_s(policy: RetryPolicy, attempt: int, rng: random.Random) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**(attempt-1))]."""
    return rng.uniform(0.0, min(policy.cap_s, policy.base_s * 2 ** (attempt - 1)))


async def with_retries(
    attempt_fn: Callable[[], Awaitable[T]],
    classify: Callable[[Exception], Failure | None],
    policy: RetryPolicy,
    record: Callable[[dict[str, Any]], None] | None,
    rng: random.Random | None = None,
) -> tuple[T, int]:
    """Call `attempt_fn` until it succeeds; returns (its result, the number of retries).

    `classify` turns an SDK exception into a `Failure`, or None for an exception that is not the
    service's (a harness bug, which propagates).
    """
    rng = rng or random.Random()
    for attempt in range(1, policy.max_attempts + 1):
        try:
            return await attempt_fn(), attempt - 1
        except Exception as exc:
            failure = classify(exc)
            if failure is None:
                raise
            if not failure.retryable or attempt == policy.max_attempts:
                why = "not retryable" if not failure.retryable else f"gave up after {attempt} attempts"
                raise ModelError(f"{failure.message} (status {failure.status}; {why})") from exc
            if failure.retry_after_s is not None:
                wait = min(failure.retry_after_s, policy.max_retry_after_s)
            else:
                wait = backoff_s(policy, attempt, rng)
            if record is not None:
                record({"type": "model_retry", "t": time.time(), "attempt": attempt, "status": failure.status,
                        "error": failure.message, "wait_s": round(wait, 3)})
            await asyncio.sleep(wait)
    raise AssertionError("unreachable")
