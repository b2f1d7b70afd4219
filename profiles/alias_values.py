"""HOW a TRL or open-r1 value is spelt in the project's terms: one converter per foreign key whose value differs
(profiles.aliases names which key each serves). A converter returns the project's value, None where the key
leaves it to another key or its default, or raises KeyProblem with the fix."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from profiles.keys import DEFAULT_TARGET_MODULES, KeyProblem, shown


def report_to(value: Any, data: dict) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and len(value) <= 1:
        return value[0] if value else "none"
    raise KeyProblem(f"{shown(value)} names several trackers; one is passed to TRL here", "keep one, or write all")


def target_modules(value: Any, data: dict) -> Any:
    if value == "all-linear":  # PEFT's shorthand: every linear layer of a block, which for Llama-shaped models
        return list(DEFAULT_TARGET_MODULES)  # is the project's default list
    return value


def dataset_configs(value: Any, data: dict) -> str:
    if isinstance(value, list) and len(value) == 1:
        return str(value[0])
    if isinstance(value, str):
        return value
    raise KeyProblem(f"{shown(value)}: one dataset configuration is trained on here", "keep one")


TRL_LORA_RANK = 16  # ModelConfig.lora_r's default: the rank of use_peft: true alone


def use_peft(value: Any, data: dict) -> Any:
    if not isinstance(value, bool):  # a quoted "true" would silently train every weight
        raise KeyProblem(f"{shown(value)} is not true or false", "write use_peft: true (LoRA) or false, unquoted")
    if value:  # LoRA at lora_r's rank (or the project's lora_rank), else TRL's
        return next((data[key] for key in ("lora_r", "lora_rank") if key in data), TRL_LORA_RANK)
    return 0  # TRL without PEFT trains every parameter


def generation_batch_size(value: Any, data: dict) -> int:
    """TRL's generation_batch_size, as micro-batches: it is per_device_train_batch_size (TRL's 8) x processes x
    steps_per_generation."""
    per = data.get("per_device_train_batch_size", 8)
    processes = data.get("num_processes", data.get("num_gpus", 1))
    if "steps_per_generation" in data:
        raise KeyProblem(
            "generation_batch_size and steps_per_generation say the same thing twice (TRL refuses both)", "keep one"
        )
    whole = all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in (value, per, processes))
    if not whole or value % (per * processes):
        raise KeyProblem(
            f"{shown(value)} is not a whole number of micro-batches of {shown(per)} x {shown(processes)} processes",
            "write steps_per_generation: N (micro-batches one generation serves) instead",
        )
    return value // (per * processes)


def warmup(value: Any, data: dict) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1:
        return float(value)  # transformers 5 reads a value below 1 as a share of the steps
    steps = data.get("max_steps")
    if isinstance(value, int) and isinstance(steps, int) and steps > 0 and value < steps:
        return value / steps
    raise KeyProblem(
        f"warmup_steps {shown(value)} needs max_steps to become a share of the run",
        "write warmup_ratio: STEPS / max_steps",
    )


def max_steps(value: Any, data: dict) -> Any:
    if value == -1:  # TRL: train by num_train_epochs; here the plan's run length, which honours them
        return 0
    return value


def eval_strategy(value: Any, data: dict) -> Any:
    if value == "no":
        return 0
    if value in ("steps", "epoch"):
        return None  # eval_steps says how often (or auto): evaluation runs every eval_steps here
    raise KeyProblem(f"{shown(value)}: TRL takes no, steps or epoch", "write eval_strategy: no, steps or epoch")


def tool_iterations(value: Any, data: dict) -> Any:
    if value is None:
        raise KeyProblem(
            "max_tool_calling_iterations empty lets a completion call tools without end (TRL's default); turns "
            "are planned and bounded here",
            "write max_tool_calling_iterations: N (or max_tool_calls: N)",
        )
    return value


def do_eval(value: Any, data: dict) -> Any:
    if "eval_strategy" in data:
        return None  # transformers sets do_eval from eval_strategy, which wins: read there
    return None if value else 0


def save_steps(value: Any, data: dict) -> Any:
    """TRL's save_steps below 1 is a share of the run's steps (transformers rounds it up)."""
    if not isinstance(value, float) or not 0 < value < 1:
        return value  # a whole number, or a value the schema refuses with its own message
    steps = data.get("max_steps")
    if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0:
        return max(1, math.ceil(value * steps))
    return None  # the plan sets the run's length: the default interval serves (said in the reading)


def save_strategy_note(value: Any) -> str:
    kept = "checkpoints every save_steps (the out-of-memory fallback and --resume continue from them)"
    if value == "no":
        return f"no: {kept} stay in the attempt's folder; the trained adapter is saved at the end"
    if value == "epoch":
        return f"epoch: {kept}; the trained adapter is saved at the end, the last epoch's end"
    return f"{value}: {kept}; the trained adapter is saved at the end"


def model_revision(value: Any) -> bool:
    return value in (None, "main")


def is_off(value: Any) -> bool:
    return value in (None, False, 0)


def one_of(*allowed) -> Callable[[Any], bool]:
    return lambda value: value in allowed


def saving(value: Any) -> bool:
    return value in ("no", "steps", "epoch", "best")
