"""HOW one value of a profile key is read: the value types of the schema's fields, stricter than pydantic's lax
mode where YAML makes mistakes easy (`true` is not 1, 5e-6 written without a dot is a number), each with the
form editors are told in profiles/schema.json. Each refusal is a KeyProblem naming what was found and the fix.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

from profiles.keys import (
    CHECKPOINTING_MODES,
    EVAL_AUTO,
    SCALE_REWARDS,
    CheckpointingMode,
    KeyProblem,
    LossTypeName,
    SamplingLevelName,
    ScaleRewardsMode,
    shown,
)
from tasks.prompts import switch_problem

# The value that asks the plan to derive a key tagged `derived` (profiles.fields)
AUTO = "auto"


def _whole_number(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise KeyProblem(f"expected a whole number, got {shown(value)}")
    return value


def _number(value: Any) -> float:
    if isinstance(value, str):  # YAML 1.1 reads 5e-6 (no dot) as text
        try:
            value = float(value)
        except ValueError:
            raise KeyProblem(f"expected a number, got {shown(value)}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise KeyProblem(f"expected a number, got {shown(value)}")
    try:
        value = float(value)
    except OverflowError:
        raise KeyProblem(f"expected a finite number, got {shown(value)} (too large)") from None
    if not math.isfinite(value):
        raise KeyProblem(f"expected a finite number, got {shown(value)}")
    return value


def _module_names(value: Any) -> list[str]:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise KeyProblem(f"expected a non-empty list of names, got {shown(value)}")
    twice = sorted({v for v in value if value.count(v) > 1})
    if twice:
        raise KeyProblem(f"{', '.join(twice)} listed more than once", "list each module once")
    return value


def _reward_weights(value: Any) -> dict[str, float]:
    if not isinstance(value, dict) or not value:
        raise KeyProblem(
            f"expected a mapping of reward name to weight, got {shown(value)}",
            "write e.g. `rewards: {accuracy: 2.0, xml_soft: 0.5}`",
        )
    weights = {}
    for name, weight in value.items():
        try:
            weights[str(name)] = _number(weight)
        except KeyProblem as problem:
            raise KeyProblem(f"weight of reward '{name}' must be a number: {problem.reason}") from None
    return weights


def _tool_entries(value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise KeyProblem(
            f"expected a list of tool entries, got {shown(value)}",
            "write e.g. `tools: [calculate]` or `tools: [my_tools.py:lookup]`",
        )
    return [v.strip() for v in value]


def _template_switches(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise KeyProblem(
            f"expected a mapping of switch name to value, got {shown(value)}",
            "write e.g. `chat_template_kwargs: {enable_thinking: true}`",
        )
    switches = {}
    for name, setting in value.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise KeyProblem(f"{shown(name)} is not a template variable name", "use names such as enable_thinking")
        problem = switch_problem(name, setting)  # a name the renderer takes itself, a thinking switch not a bool
        if problem is not None:
            raise KeyProblem(*problem)
        if setting is not None and not isinstance(setting, (bool, int, float, str)):
            raise KeyProblem(
                f"switch '{name}' is {shown(setting)}; a switch is true/false, a number or a word",
                f"write e.g. {name}: true",
            )
        switches[name] = setting
    return switches


def _schedule_arguments(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(name, str) and name.isidentifier() for name in value):
        raise KeyProblem(
            f"expected a mapping of argument name to value, got {shown(value)}",
            "write e.g. `lr_scheduler_kwargs: {min_lr_rate: 0.1}`",
        )
    for name, setting in value.items():
        if not isinstance(setting, (bool, int, float, str)) or isinstance(setting, bool):
            raise KeyProblem(f"'{name}' is {shown(setting)}; an argument is a number or a word", f"write {name}: 0.1")
    return dict(value)


def _checkpointing(value: Any) -> Any:
    if isinstance(value, bool):  # `gradient_checkpointing: true` unquoted
        return "true" if value else "false"
    return value.lower() if isinstance(value, str) else value


def _scale_rewards(value: Any) -> Any:
    if isinstance(value, bool):  # TRL reads true as "group" and false as "none"
        return "group" if value else "none"
    return value.lower() if isinstance(value, str) else value


def _lower(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value  # `loss_type: GRPO` is grpo


def _top_k(value: Any) -> Any:
    value = _whole_number(value)
    return 0 if value == -1 else value  # vLLM's spelling of "no top-k"; TRL and transformers say 0


def _steps(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return 0
    try:
        return _whole_number(value)
    except KeyProblem:
        raise KeyProblem(
            f"expected a whole number of optimizer steps or '{AUTO}', got {shown(value)}",
            f"write max_steps: {AUTO} (the plan's run length) or N",
        ) from None


def _eval_steps(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() == EVAL_AUTO:
        return EVAL_AUTO
    try:
        value = _whole_number(value)
    except KeyProblem:
        raise KeyProblem(
            f"expected '{EVAL_AUTO}' or a whole number of steps, got {shown(value)}",
            f"write eval_steps: {EVAL_AUTO}, 0 (off) or N (every N steps)",
        ) from None
    if value < 0:
        raise KeyProblem(f"{value} must be >= 0", "write 0 to turn evaluation during training off")
    return value


Whole = Annotated[int, BeforeValidator(_whole_number)]
Number = Annotated[float, BeforeValidator(_number)]
# What editors are told (profiles/schema.json) is what the validators accept: a list or one comma-separated
# string of module names; true / false unquoted or the mode's name.
ModuleNames = Annotated[
    list[str],
    BeforeValidator(_module_names),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
                {"type": "string", "minLength": 1, "description": "comma-separated names"},
            ]
        }
    ),
]
RewardWeights = Annotated[dict[str, float], BeforeValidator(_reward_weights)]
ToolEntries = Annotated[
    list[str],
    BeforeValidator(_tool_entries),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "array", "items": {"type": "string", "minLength": 1}},
                {"type": "string", "minLength": 1, "description": "one entry"},
            ]
        }
    ),
]
TemplateSwitches = Annotated[
    dict[str, Any],
    BeforeValidator(_template_switches),
    WithJsonSchema(
        {"type": "object", "additionalProperties": {"type": ["boolean", "integer", "number", "string", "null"]}}
    ),
]
ScheduleArguments = Annotated[
    dict[str, Any],
    BeforeValidator(_schedule_arguments),
    WithJsonSchema({"type": "object", "additionalProperties": {"type": ["integer", "number", "string"]}}),
]
ScaleRewards = Annotated[
    ScaleRewardsMode,
    BeforeValidator(_scale_rewards),
    WithJsonSchema({"anyOf": [{"type": "boolean"}, {"type": "string", "enum": list(SCALE_REWARDS)}]}),
]
TopK = Annotated[int, BeforeValidator(_top_k), WithJsonSchema({"type": "integer", "minimum": -1})]
Steps = Annotated[
    int,
    BeforeValidator(_steps),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "enum": ["auto"]}]}),
]
EvalSteps = Annotated[
    int | str,
    BeforeValidator(_eval_steps),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "enum": [EVAL_AUTO]}]}),
]

Checkpointing = Annotated[
    CheckpointingMode,
    BeforeValidator(_checkpointing),
    WithJsonSchema({"anyOf": [{"type": "boolean"}, {"type": "string", "enum": list(CHECKPOINTING_MODES)}]}),
]
LossType = Annotated[LossTypeName, BeforeValidator(_lower)]
SamplingLevel = Annotated[SamplingLevelName, BeforeValidator(_lower)]
