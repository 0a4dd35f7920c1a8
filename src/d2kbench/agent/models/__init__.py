"""Model back ends, named `provider/model`; `make_model` builds one from its name."""

from __future__ import annotations

from collections.abc import Callable

from d2kbench.agent.models.base import ModelClient, ModelError, ModelReply, ToolCall, Usage
from d2kbench.agent.models.retry import RetryPolicy
from d2kbench.suite import Task

DEFAULT_CONTEXT_WINDOW = {"openai": 128_000, "anthropic": 200_000}

__all__ = ["ModelClient", "ModelError", "ModelReply", "RetryPolicy", "ToolCall", "Usage", "make_model"]


def make_model(spec: str, *, base_url: str | None = None, task: Task | None = None,
               record: Callable[[dict], None] | None = None, stream: bool = True,
               context_window: int | None = None, timeout_s: float = 600.0, max_tokens: int | None = None,
               retry: RetryPolicy | None = None, prices: dict[str, dict[str, float]] | None = None) -> ModelClient:
    """The client for `spec`: `openai/NAME`, `anthropic/NAME`, `scripted/expert` or `scripted/replay:PATH`.

    `record` receives the client's `model_retry` events; `prices` (USD per 1M input/output tokens, by
    spec) defaults to the file named by D2K_PRICES; without a price the cost is None.
    """
    provider, _, name = spec.partition("/")
    if not name:
        raise ValueError(f"model {spec!r}: expected provider/model (openai/..., anthropic/..., scripted/...)")
    if provider == "scripted":
        from d2kbench.agent.models.scripted import ExpertScript, ReplayScript

        if name == "expert":
            return ExpertScript(task)
        if name.startswith("replay:") and name.removeprefix("replay:"):
            return ReplayScript(name.removeprefix("replay:"))
        raise ValueError(f"model {spec!r}: scripted models are scripted/expert and scripted/replay:PATH")
    if provider not in DEFAULT_CONTEXT_WINDOW:
        raise ValueError(f"model {spec!r}: unknown provider {provider!r} (openai, anthropic, scripted)")
    from d2kbench.agent.models.sdk import load_prices

    options = dict(base_url=base_url, record=record, stream=stream,
                   context_window=context_window or DEFAULT_CONTEXT_WINDOW[provider], timeout_s=timeout_s,
                   max_tokens=max_tokens, retry=retry or RetryPolicy(),
                   prices=load_prices() if prices is None else prices)
    try:
        if provider == "openai":
            from d2kbench.agent.models.openai_chat import OpenAIChatModel

            return OpenAIChatModel(name, **options)
        from d2kbench.agent.models.anthropic_messages import AnthropicModel

        return AnthropicModel(name, **options)
    except ModuleNotFoundError as exc:
        if exc.name != provider:
            raise
        raise ValueError(f"model {spec!r} needs the {provider} SDK: pip install -e '.[{provider}]' ({exc})") from exc
