"""Reading the tool calls of a multi-turn completion, and the shipped reward on them.

With tools, TRL hands a reward each completion as its messages: the assistant's turns (a turn that calls a
tool carries `tool_calls`) with a `tool` message after each call, holding what the tool returned. A call
that failed (an exception, a made-up tool name; grpo-train's tool guard turns every failure into one) is told
to the model as TRL writes it: `{'error': '...'}`.
"""

from __future__ import annotations

from rewards.parse import as_batch, completion_text

TOOL_ERROR_PREFIX = "{'error': "  # how TRL writes a failed call's reply (str of {"error": text})


def tool_messages(completion) -> list[dict]:
    """The tool messages of one conversational completion (none for a plain string)."""
    if not isinstance(completion, (list, tuple)):
        return []
    return [m for m in completion if isinstance(m, dict) and m.get("role") == "tool"]


def call_count(completion) -> int:
    """Tool calls the completion's assistant turns made."""
    if not isinstance(completion, (list, tuple)):
        return 0
    total = 0
    for message in completion:
        if isinstance(message, dict) and message.get("role", "assistant") == "assistant":
            calls = message.get("tool_calls") or []
            total += len(calls) if isinstance(calls, (list, tuple)) else 0
    return total


def failed(message: dict) -> bool:
    """Whether a tool message tells of a failed call."""
    content = message.get("content")
    text = content if isinstance(content, str) else str(content)
    return text.startswith(TOOL_ERROR_PREFIX)


def call_figures(completion) -> dict:
    """{"calls", "answered", "failed"} of one completion: calls made, calls a tool answered, and of those the
    ones that failed (a call made at the last allowed turn is not answered)."""
    answers = tool_messages(completion)
    return {"calls": call_count(completion), "answered": len(answers), "failed": sum(failed(m) for m in answers)}


def tool_ok(completions, **kwargs) -> list[float]:
    """1.0 when no tool call of the completion failed (one that made none included), else 0.0"""
    scores = []
    for completion in as_batch(completions):
        readable = completion_text(completion) is not None
        scores.append(1.0 if readable and not any(failed(m) for m in tool_messages(completion)) else 0.0)
    return scores


__all__ = ["TOOL_ERROR_PREFIX", "call_count", "call_figures", "failed", "tool_messages", "tool_ok"]
