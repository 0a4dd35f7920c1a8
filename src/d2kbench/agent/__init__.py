"""The agent: the turn loop, its tools, prompts and model back ends (see docs/agent.md)."""

from d2kbench.agent.evalservice import EvalService, LocalEvalService
from d2kbench.agent.loop import AgentLimits, AgentOutcome, run_agent
from d2kbench.agent.models import ModelClient, ModelError, ModelReply, ToolCall, Usage, make_model

__all__ = [
    "AgentLimits",
    "AgentOutcome",
    "EvalService",
    "LocalEvalService",
    "ModelClient",
    "ModelError",
    "ModelReply",
    "ToolCall",
    "Usage",
    "make_model",
    "run_agent",
]
