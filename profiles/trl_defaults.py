"""WHAT TRL would have run where a recipe leaves a key out: TRL's defaults (GRPOConfig and ModelConfig of the
pinned TRL), those a recipe is read with (what is learnt: every weight without use_peft, 16-bit weights, the
optimisation's numbers), and, for every other key, the project's own value where it differs from TRL's, with why.
A recipe is a file that names its model as TRL does (model_name_or_path); a profile in the project's names keeps
the project's defaults. tests/unit/profiles/test_trl_defaults.py holds the table against the installed TRL."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contract.shell import quoted
from profiles.field_types import AUTO
from profiles.keys import shown
from profiles.recipe_reading import DECIDED, DIFFERS, TRL_DEFAULT, WRITTEN_KINDS, Reading

RECIPE_MARK = "model_name_or_path"  # TRL's and open-r1's name for the model: the file is a recipe
LORA_KEYS = ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")  # ModelConfig's PEFT arguments


@dataclass(frozen=True)
class TrlDefault:
    key: str  # TRL's name
    ours: str  # the project's key it sets
    trl: Any  # TRL's default, as TRL writes it
    as_ours: Any  # the same in the project's spelling
    why: str  # taken: what it means; differs: why the project's value runs instead
    written_as: tuple[str, ...] = ()  # other keys that, written, say it (the project's name, TRL's other spelling)
    when: str = ""  # "lora" / "tools": only for a profile that trains LoRA / calls tools

    def left_out(self, written: dict) -> bool:
        return not any(key in written for key in (self.key, self.ours, *self.written_as))


# What is learnt: a recipe that leaves these out trains what TRL would
TAKEN = (
    TrlDefault("use_peft", "lora_rank", False, 0, "TRL trains every weight; use_peft: true trains LoRA"),
    TrlDefault("load_in_4bit", "load_in_4bit", False, False, "TRL loads 16-bit weights; load_in_4bit: true for QLoRA"),
    TrlDefault("learning_rate", "learning_rate", 1e-6, 1e-6, "TRL's GRPO learning rate"),
    TrlDefault("lr_scheduler_type", "lr_scheduler_type", "linear", "linear", "TRL's schedule"),
    TrlDefault("warmup_steps", "warmup_ratio", 0, 0.0, "no warmup, as TRL", ("warmup_ratio",)),
    TrlDefault("weight_decay", "weight_decay", 0.0, 0.0, "no weight decay, as TRL"),
    TrlDefault("max_grad_norm", "max_grad_norm", 1.0, 1.0, "TRL's gradient clipping"),
    TrlDefault("adam_beta2", "adam_beta2", 0.999, 0.999, "AdamW's second-moment decay, as TRL"),
    TrlDefault("seed", "seed", 42, 42, "TRL's seed"),
)

# What the plan sizes for the card, and how the run is kept: the project's value runs, and is listed
LISTED = (
    TrlDefault("per_device_train_batch_size", "per_device_train_batch_size", 8, 8, "planned for the card's memory"),
    TrlDefault("gradient_accumulation_steps", "gradient_accumulation_steps", 1, 1, "planned for the card"),
    TrlDefault("num_generations", "num_generations", 8, 8, "planned for the card's memory"),
    TrlDefault("use_vllm", "fast_inference", False, False, "vLLM generates: several times faster than transformers"),
    TrlDefault("vllm_gpu_memory_utilization", "gpu_memory_utilization", 0.3, 0.3, "vLLM's share planned for the card"),
    TrlDefault("gradient_checkpointing", "gradient_checkpointing", True, True, "planned: Unsloth's offloads to RAM"),
    TrlDefault(
        "optim",
        "optim",
        "adamw_torch_fused",
        "adamw_torch_fused",
        "8-bit AdamW keeps its states in a quarter of the memory (same update up to rounding)",
    ),
    TrlDefault(
        "num_train_epochs",
        "num_train_epochs",
        3.0,
        3.0,
        "the plan sets the run's length from --hours and min_updates (write num_train_epochs or max_steps to pin it)",
        ("max_steps",),
    ),
    TrlDefault("save_steps", "save_steps", 500, 500, "frequent checkpoints keep what an OOM or a kill loses small"),
    TrlDefault(
        "eval_strategy",
        "eval_steps",
        "no",
        0,
        "held-out accuracy is measured during the run (eval_strategy: no turns it off)",
        ("do_eval", "eval_steps"),
    ),
    TrlDefault("lora_dropout", "lora_dropout", 0.05, 0.05, "Unsloth's fast LoRA path needs dropout 0", when="lora"),
    TrlDefault(
        "lora_target_modules",
        "target_modules",
        None,
        None,
        "every linear layer of a block; PEFT's default for Llama- and Qwen-shaped models adapts q_proj and v_proj",
        when="lora",
    ),
    TrlDefault(
        "max_tool_calling_iterations",
        "max_tool_calls",
        None,
        None,
        "a completion's turns are planned and bounded (TRL's empty default is unbounded)",
        when="tools",
    ),
)


def is_recipe(written: dict) -> bool:
    return RECIPE_MARK in written


def take_trl_defaults(written: dict, out: dict, readings: list[Reading]) -> None:
    """A recipe's left-out keys of what is learnt, set as TRL's defaults in `out`, each said in `readings`."""
    if not is_recipe(written):
        return
    for default in TAKEN:
        if default.left_out(written):
            out[default.ours] = default.as_ours
            readings.append(Reading(default.key, TRL_DEFAULT, default.ours, default.as_ours, default.why, default.trl))
    if out.get("lora_rank") == 0:  # without use_peft: true, TRL builds no adapter: its LoRA keys say nothing
        for reading in readings:
            if reading.key in LORA_KEYS:
                reading.kind, reading.ours = DECIDED, None
                reading.note = "without use_peft: true TRL trains every weight and reads no LoRA key"


def differences(profile, written: dict) -> list[Reading]:
    """Every key a recipe leaves out whose value here differs from TRL's default, with why (empty for a profile
    in the project's names)."""
    if not is_recipe(written):
        return []
    out = []
    for default in LISTED:
        if not default.left_out(written) or not _applies(default, profile):
            continue
        here = getattr(profile, default.ours)
        if _same(here, default.as_ours):
            continue
        shown_here = "auto" if here == AUTO or default.ours in profile.derived else here
        out.append(Reading(default.key, DIFFERS, default.ours, shown_here, default.why, default.trl))
    return out


def _applies(default: TrlDefault, profile) -> bool:
    if default.when == "lora":
        return bool(profile.uses_lora)
    if default.when == "tools":
        return bool(profile.tools or profile.environment)
    return True


def _same(here: Any, trl: Any) -> bool:
    if isinstance(here, (int, float)) and isinstance(trl, (int, float)) and not isinstance(here, bool):
        return float(here) == float(trl)
    return here == trl


def recipe_note(profile) -> str:
    """The run's and the plan's one note on a recipe: how many keys were read in TRL's names, what was left to
    TRL's defaults, every value that differs from what TRL would run, and the command that says why."""
    source = profile.source.removesuffix(" with --set")
    written = sum(r.kind in WRITTEN_KINDS for r in profile.readings)
    taken = [f"{r.key} {shown(r.trl)}" for r in profile.readings if r.kind == TRL_DEFAULT]
    differs = [f"{r.key} {shown(r.value)} (TRL {shown(r.trl)})" for r in profile.readings if r.kind == DIFFERS]
    text = f"{source} is read as a TRL / open-r1 configuration ({written} of its keys in their names"
    if taken:
        text += f"; left out, as TRL's defaults: {', '.join(taken)}"
    if differs:
        text += f"; not what TRL would run: {', '.join(differs)}"
    return text + f"; `python train.py profiles check {quoted(source)}` says why each)"


__all__ = [
    "LISTED",
    "RECIPE_MARK",
    "TAKEN",
    "TrlDefault",
    "differences",
    "is_recipe",
    "recipe_note",
    "take_trl_defaults",
]
