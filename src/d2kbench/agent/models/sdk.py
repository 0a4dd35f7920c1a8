"""What the two SDK back ends share: error classification, prices, API keys."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from d2kbench.agent.models.base import Usage
from d2kbench.agent.models.retry import Failure, parse_retry_after, status_is_retryable

PLACEHOLDER_KEY = "no-key-needed"  # sent to a local server (a base URL is set) when no key is configured


def classify_sdk_error(exc: Exception, sdk: Any) -> Failure | None:
    """A Failure for an openai/anthropic SDK exception (both SDKs share these class names); None otherwise."""
    if isinstance(exc, sdk.APITimeoutError):
        return Failure(True, None, f"timeout: {exc}")
    if isinstance(exc, sdk.APIConnectionError):
        return Failure(True, None, f"connection error: {exc}")
    if isinstance(exc, sdk.APIStatusError):
        status = exc.status_code
        retryable = status_is_retryable(status)
        if status < 400:  # an error event inside a stream: retry the overload and server kinds
            kind = (exc.body or {}).get("error", {}).get("type", "") if isinstance(exc.body, dict) else ""
            retryable = kind in ("overloaded_error", "api_error", "rate_limit_error")
        headers = exc.response.headers if exc.response is not None else {}
        return Failure(retryable, status, f"{type(exc).__name__}: {exc}", parse_retry_after(headers.get("retry-after")))
    if isinstance(exc, sdk.APIError):
        return Failure(False, None, f"{type(exc).__name__}: {exc}")
    return None


def api_key(env_var: str, base_url: str | None) -> str:
    """The key from `env_var`; a placeholder for a local server (base URL set); else a clear error."""
    key = os.environ.get(env_var)
    if key:
        return key
    if base_url:
        return PLACEHOLDER_KEY
    raise ValueError(f"{env_var} is not set: set it, or give a base URL for a server that needs no key")


def load_prices(path: str | None = None) -> dict[str, dict[str, float]]:
    """The price table: JSON `{"provider/model": {"input": USD per 1M tokens, "output": ...}}` from
    `path` or the file named by D2K_PRICES; empty when neither is given (costs are then None)."""
    path = path or os.environ.get("D2K_PRICES")
    if not path:
        return {}
    table = json.loads(Path(path).read_text())
    for model, price in table.items():
        if not isinstance(price, dict) or not {"input", "output"} <= price.keys():
            raise ValueError(f"{path}: price of {model!r} must be {{'input': USD/1M, 'output': USD/1M}}")
    return table


def cost_usd(prices: dict[str, dict[str, float]], model: str, usage: Usage) -> float | None:
    price = prices.get(model)
    if price is None:
        return None
    return (usage.input_tokens * price["input"] + usage.output_tokens * price["output"]) / 1e6
