"""Reward functions and their registry.

A profile names rewards and weights (`rewards: {accuracy: 2.0, xml_soft: 0.5}`); the functions carry no
weights of their own. Every function here follows TRL's calling convention, `fn(completions, answer=None,
**kwargs) -> list[float]`, takes plain-string or conversational completions, returns one float per
completion and never raises: a completion it cannot read scores 0.0. Besides these names, an entry may be
the user's own function, `path/to/file.py:function` or `package.module:function` (rewards.user), imported
only when asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from rewards.accuracy import accuracy, is_correct
from rewards.execution import binary_code, code, code_format
from rewards.format import FORMAT_LAYOUTS, number, think_count, think_format, xml_count, xml_soft, xml_strict
from rewards.latex import math
from rewards.length import soft_overlong
from rewards.parse import REASONING_LAYOUT, extract_answer, parse_number
from rewards.tool_use import tool_ok

RewardFn = Callable[..., list]

# Stable names: profiles refer to them and TRL logs each as rewards/<name>/mean.
REWARDS: dict[str, RewardFn] = {
    "xml_strict": xml_strict,
    "xml_soft": xml_soft,
    "xml_count": xml_count,
    "think_format": think_format,
    "think_count": think_count,
    "number": number,
    "accuracy": accuracy,
    "math": math,
    "tool_ok": tool_ok,
    "soft_overlong": soft_overlong,
    "code": code,
    "binary_code": binary_code,
    "code_format": code_format,
}

__all__ = [
    "REWARDS",
    "describe",
    "extract_answer",
    "for_layout",
    "get_reward",
    "get_reward_funcs",
    "is_correct",
    "parse_number",
]


# Rewards that score something else than a worded answer: a program against tests, a length
NOT_OF_ANSWERS = ("soft_overlong", "code", "binary_code", "code_format")


def for_layout(layout: str = REASONING_LAYOUT) -> dict[str, RewardFn]:
    """The registered rewards that can give an answer in `layout` full marks: every one but the format rewards
    of another layout (rewards.format.FORMAT_LAYOUTS) and those of programs and lengths (NOT_OF_ANSWERS)."""
    return {
        name: fn
        for name, fn in REWARDS.items()
        if FORMAT_LAYOUTS.get(name, layout) == layout and name not in NOT_OF_ANSWERS
    }


def get_reward(name: str) -> RewardFn:
    """The reward function registered as name, the user's function for `file.py:function` /
    `package.module:function` (imported now), or a reward model's for `model:NAME` (loaded now, once per process:
    rewards.model); ValueError listing the known names otherwise."""
    from rewards import model, user
    from usercode.entry import is_user_code, parse_spec

    if model.is_model_reward(name):
        return model.load(name)
    if is_user_code(name):
        return user.load(parse_spec(name))
    try:
        return REWARDS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown reward {name!r}; known rewards: {', '.join(REWARDS)}") from None


def get_reward_funcs(weights: Mapping[str, float]) -> tuple[list[RewardFn], list[float]]:
    """The functions and weights for a profile's `rewards` mapping, in the mapping's order.

    Raises ValueError for an unknown name or a weight that is not a number.
    """
    if not isinstance(weights, Mapping) or not weights:
        raise ValueError(f"expected a mapping of reward name to weight, e.g. {{accuracy: 2.0}}, got {weights!r}")
    funcs, values = [], []
    for name, weight in weights.items():
        funcs.append(get_reward(name))
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise ValueError(f"weight of reward {name!r} must be a number, got {weight!r}")
        values.append(float(weight))
    return funcs, values


def describe() -> dict[str, str]:
    """One line per reward (the first line of its docstring), for --help and reports."""
    return {name: (fn.__doc__ or "").strip().splitlines()[0] for name, fn in REWARDS.items()}
