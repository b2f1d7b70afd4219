"""Configurations written for TRL and open-r1, read as profiles: ONE table from their key names (TRL's
GRPOConfig, its script, model and PEFT arguments, open-r1's recipe keys) to the project's.

Every foreign key is one of:
  renamed    the same setting under another name (`model_name_or_path` -> `model`), its value converted where
             the spelling differs (`lora_target_modules: all-linear`, `report_to: [wandb]`);
  decided    a setting the project decides itself (the dtype from the card, the output folder, logging every
             step): read, not used, and said so in `profiles check`;
  refused    no counterpart, and dropping it would train something else than the recipe says: the load stops
             (exit 2) naming the key and what to do.
A setting given twice, once in each spelling (`model` and `model_name_or_path`), is refused: which one was
meant cannot be known.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from contract.errors import ProfileError
from profiles.keys import DEFAULT_TARGET_MODULES, KeyProblem, shown

RENAMED, DECIDED, REFUSED = "renamed", "decided", "refused"

# open-r1's reward names with a counterpart here: its `format` and `tag_count` score the layout the recipe's
# system_prompt asks for, <think>/<answer> (think_format, think_count, open-r1's own) or, with the project's
# default prompt, <reasoning>/<answer> (xml_strict, xml_count)
OPEN_R1_REWARDS = {"accuracy": "accuracy", "format": "xml_strict", "tag_count": "xml_count"}
OPEN_R1_THINK_REWARDS = {"accuracy": "accuracy", "format": "think_format", "tag_count": "think_count"}


@dataclass(frozen=True)
class Alias:
    kind: str
    ours: str | None = None  # the project's key it sets (renamed)
    note: str = ""  # decided: why it is not used; refused: the reason; renamed: how it was converted
    fix: str | None = None  # refused: what to do
    convert: Callable[[Any, dict], Any] | None = None  # renamed: the value in the project's spelling
    unless: Callable[[Any], bool] | None = None  # refused only when this is false of the value (else decided)


def _report_to(value: Any, data: dict) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and len(value) <= 1:
        return value[0] if value else "none"
    raise KeyProblem(f"{shown(value)} names several trackers; one is passed to TRL here", "keep one, or write all")


def _target_modules(value: Any, data: dict) -> Any:
    if value == "all-linear":  # PEFT's shorthand: every linear layer of a block, which for Llama-shaped models
        return list(DEFAULT_TARGET_MODULES)  # is the project's default list
    return value


def _dataset_configs(value: Any, data: dict) -> str:
    if isinstance(value, list) and len(value) == 1:
        return str(value[0])
    if isinstance(value, str):
        return value
    raise KeyProblem(f"{shown(value)}: one dataset configuration is trained on here", "keep one")


def _use_peft(value: Any, data: dict) -> int | None:
    if value is True:
        return None  # LoRA: the project's default rank unless lora_r says otherwise
    return 0  # TRL without PEFT trains every parameter


def _warmup(value: Any, data: dict) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1:
        return float(value)  # transformers 5 reads a value below 1 as a share of the steps
    steps = data.get("max_steps")
    if isinstance(value, int) and isinstance(steps, int) and steps > 0 and value < steps:
        return value / steps
    raise KeyProblem(
        f"warmup_steps {shown(value)} needs max_steps to become a share of the run",
        "write warmup_ratio: STEPS / max_steps",
    )


def _max_steps(value: Any, data: dict) -> Any:
    if value == -1:  # TRL: train by num_train_epochs; here the plan's run length, which honours them
        return 0
    return value


def _eval_strategy(value: Any, data: dict) -> Any:
    if value == "no":
        return 0
    if value == "steps":
        return None  # eval_steps says how often (or auto)
    raise KeyProblem(
        f"eval_strategy {shown(value)}: evaluation during training runs every eval_steps here",
        "write eval_steps: N (or auto), and drop eval_strategy",
    )


def _tool_iterations(value: Any, data: dict) -> Any:
    if value is None:
        raise KeyProblem(
            "max_tool_calling_iterations empty lets a completion call tools without end (TRL's default); turns "
            "are planned and bounded here",
            "write max_tool_calling_iterations: N (or max_tool_calls: N)",
        )
    return value


def _do_eval(value: Any, data: dict) -> Any:
    return None if value else 0


def _model_revision(value: Any) -> bool:
    return value in (None, "main")


def _false(value: Any) -> bool:
    return value in (None, False, 0)


def _one_of(*allowed) -> Callable[[Any], bool]:
    return lambda value: value in allowed


def _decided(note: str) -> Alias:
    return Alias(DECIDED, note=note)


def _refused(note: str, fix: str, unless=None) -> Alias:
    return Alias(REFUSED, note=note, fix=fix, unless=unless)


def _renamed(ours: str, convert=None, note: str = "") -> Alias:
    return Alias(RENAMED, ours=ours, note=note, convert=convert)


ALIASES: dict[str, Alias] = {
    # --- TRL ModelConfig and PEFT arguments ---
    "model_name_or_path": _renamed("model"),
    "lora_r": _renamed("lora_rank"),
    "lora_target_modules": _renamed("target_modules", _target_modules),
    "use_peft": _renamed("lora_rank", _use_peft, "use_peft false: full fine-tuning (lora_rank 0)"),
    "torch_dtype": _decided("the dtype follows the card: bf16 where it supports it, else fp16; fp32 on CPU"),
    "dtype": _decided("the dtype follows the card: bf16 where it supports it, else fp16; fp32 on CPU"),
    "attn_implementation": _decided("Unsloth (or transformers) chooses the attention kernel for the card"),
    "model_revision": _refused(
        "a revision other than main cannot be pinned here",
        "download that revision to a folder and give model: FOLDER",
        _model_revision,
    ),
    "load_in_8bit": _refused("8-bit weights are not a training path here", "use load_in_4bit: true, or false", _false),
    "bnb_4bit_quant_type": _refused("4-bit weights are NF4 here", "remove it (or write nf4)", _one_of("nf4")),
    "use_bnb_nested_quant": _decided("4-bit loading uses double quantisation where it applies"),
    "use_rslora": _refused(
        "rank-stabilised LoRA is not offered here", "remove it (scale = lora_alpha / lora_rank)", _false
    ),
    "lora_task_type": _refused("only causal language models are trained here", "remove it", _one_of("CAUSAL_LM")),
    "lora_modules_to_save": _refused("extra fully trained modules are not offered here", "remove it", _false),
    # --- TRL ScriptArguments and open-r1's data keys ---
    "dataset_name": _renamed("dataset"),
    "dataset_configs": _renamed("dataset_config", _dataset_configs),
    "dataset_train_split": _renamed("train_split"),
    "dataset_test_split": _renamed("test_split"),
    "dataset_prompt_column": _renamed("question_field"),
    "reward_funcs": _renamed("rewards", note="with reward_weights: rewards {name: weight}"),
    "reward_weights": _renamed("rewards", note="with reward_funcs: rewards {name: weight}"),
    "num_processes": _renamed("num_gpus", note="accelerate's processes: one training GPU each"),
    # --- GRPOConfig ---
    "use_vllm": _renamed("fast_inference"),
    "max_tool_calling_iterations": _renamed("max_tool_calls", _tool_iterations),
    "environment_factory": _renamed("environment"),
    "vllm_gpu_memory_utilization": _renamed("gpu_memory_utilization"),
    "vllm_tensor_parallel_size": _renamed("vllm_tensor_parallel"),
    "vllm_enable_sleep_mode": _renamed("vllm_standby", note="Unsloth's standby: vLLM sleeps while training runs"),
    "warmup_steps": _renamed("warmup_ratio", _warmup, "a share of max_steps"),
    "max_steps": _renamed("max_steps", _max_steps, "-1 (TRL: by num_train_epochs): the plan's run length"),
    "eval_strategy": _renamed("eval_steps", _eval_strategy, "no: eval_steps 0; steps: eval_steps"),
    "do_eval": _renamed("eval_steps", _do_eval, "false: eval_steps 0"),
    "vllm_device": _decided("the launcher places vLLM (in the training process, or on the server's GPUs)"),
    "vllm_mode": _renamed("vllm_mode"),
    "report_to": _renamed("report_to", _report_to),  # same name; TRL also takes a list
    "use_cpu": _renamed("device", lambda value, data: "cpu" if value else "cuda"),
    "bf16": _decided("the dtype follows the card: bf16 where it supports it, else fp16; fp32 on CPU"),
    "fp16": _decided("the dtype follows the card: bf16 where it supports it, else fp16; fp32 on CPU"),
    "tf32": _decided("the dtype follows the card"),
    "output_dir": _decided("each run writes OUTPUT_DIR/run-*/attempt-NN-<profile>/ (train --output-dir)"),
    "overwrite_output_dir": _decided("every run gets a new folder; nothing is overwritten"),
    "run_name": _decided("the run is named by its folder and the profile's name"),
    "logging_steps": _decided("every step is logged to metrics.jsonl"),
    "logging_strategy": _decided("every step is logged to metrics.jsonl"),
    "logging_first_step": _decided("every step is logged to metrics.jsonl"),
    "log_level": _decided("the attempt's log is train.log in its folder"),
    "log_completions": _decided("sample answers before and after training are in report.md"),
    "disable_tqdm": _decided("the project prints its own progress line"),
    "save_strategy": _refused(
        "checkpoints are saved every save_steps here: the out-of-memory fallback and --resume continue from them",
        "write save_steps: N and drop save_strategy",
        _one_of("steps"),
    ),
    "save_total_limit": _decided("every whole checkpoint is kept: a fallback or --resume may need any of them"),
    # push_to_hub and num_train_epochs are read with the keys beside them (translate, below)
    "push_to_hub": _decided(
        "true: the adapter is pushed at the end to hub_model_id (needed) when HF_TOKEN is in the environment; "
        "false: nothing is pushed, whatever hub_model_id says"
    ),
    "hub_strategy": _decided("pushed once, at the end"),
    "hub_private_repo": _decided("the repository is created as the hub's default for your account"),
    "per_device_eval_batch_size": _decided("evaluation batches its own generation"),
    "gradient_checkpointing_kwargs": _decided("non-reentrant checkpointing is used wherever it applies"),
    "data_seed": _decided("the data order follows seed"),
    "adam_beta1": _decided("AdamW's betas are 0.9 and 0.99 (Unsloth's GRPO notebooks)"),
    "adam_beta2": _decided("AdamW's betas are 0.9 and 0.99 (Unsloth's GRPO notebooks)"),
    "use_liger_kernel": _decided("Unsloth's fused kernels serve the single-GPU path"),
    "use_liger_loss": _decided("Unsloth's fused GRPO loss serves the single-GPU path"),
    "torch_compile": _decided("Unsloth compiles what it patches"),
    "dataloader_num_workers": _decided("prompts are read in the training process (0 workers)"),
    "wandb_project": _decided("set WANDB_PROJECT in the environment, with report_to: wandb"),
    "wandb_entity": _decided("set WANDB_ENTITY in the environment, with report_to: wandb"),
    "wandb_run_group": _decided("set WANDB_RUN_GROUP in the environment, with report_to: wandb"),
    "generation_batch_size": _refused(
        "a generation batch is per_device_train_batch_size x num_gpus x "
        "gradient_accumulation_steps here (one per optimizer step)",
        "set those instead, and num_iterations to reuse a batch",
    ),
    "steps_per_generation": _refused(
        "one generation batch per optimizer step (x num_iterations) here",
        "set gradient_accumulation_steps and num_iterations instead",
    ),
    "vllm_importance_sampling_correction": _refused(
        "both paths train without vLLM's importance-sampling correction (Unsloth's default, which TRL's plain path "
        "is given too, so that the two train the same objective)",
        "remove it",
        _false,
    ),
    "sync_ref_model": _refused("the reference model is never synced to the policy here", "remove it", _false),
    "deepspeed": _refused("the launcher writes DeepSpeed's configuration itself", "write zero_stage: 0-3 instead"),
    "callbacks": _refused("the trainer's callbacks are the project's own", "remove it"),
    "chat_template": _refused(
        "prompts use the tokenizer's own chat template", "give a model whose tokenizer has the template you want"
    ),
    "max_length": _refused(
        "GRPO's lengths are max_prompt_length and max_completion_length", "write those, and max_seq_length"
    ),
}


@dataclass
class Reading:
    """How one key of a file was read: as the project's key (renamed), or noted and not used (decided)."""

    key: str
    kind: str
    ours: str | None
    value: Any
    note: str

    def to_json(self) -> dict:
        return {"key": self.key, "kind": self.kind, "as": self.ours, "value": self.value, "note": self.note}

    def text(self) -> str:
        if self.kind == RENAMED:
            return f"{self.key} -> {self.ours}: {shown(self.value)}" + (f" ({self.note})" if self.note else "")
        return f"{self.key}: not used ({self.note})"


def _rewards(data: dict, source: str, context: dict) -> tuple[dict[str, float], list[str]]:
    """reward_funcs [+ reward_weights] as the project's rewards mapping, and a note for each reward named more
    than once (open-r1's `format` is the project's `xml_strict`): TRL adds weight x score for every entry, so
    the entries of one reward are one reward with their weights summed. A --set of reward_weights alone takes
    reward_funcs from the file it changes (`context`); a --set of reward_funcs alone weighs each 1.0, as TRL."""
    funcs = data.get("reward_funcs", context.get("reward_funcs"))
    if isinstance(funcs, str):
        funcs = [funcs]
    if not isinstance(funcs, list) or not funcs or not all(isinstance(f, str) for f in funcs):
        raise ProfileError(
            source,
            "reward_funcs",
            f"expected a list of reward names, got {shown(funcs)}",
            "write e.g. reward_funcs: [accuracy, format]",
        )
    weights = data.get("reward_weights")
    if weights is None and "reward_funcs" not in data:
        weights = context.get("reward_weights")
    if weights is None:
        weights = [1.0] * len(funcs)  # TRL weighs every reward 1.0 when none are given
    if not isinstance(weights, list) or len(weights) != len(funcs):
        raise ProfileError(
            source,
            "reward_weights",
            f"{shown(weights)} does not give one weight per reward of reward_funcs ({len(funcs)})",
            "give as many weights as rewards",
        )
    from rewards import REWARDS
    from rewards.parse import THINK_LAYOUT, asked_layout

    think = asked_layout(data.get("system_prompt", context.get("system_prompt"))) == THINK_LAYOUT
    table = OPEN_R1_THINK_REWARDS if think else OPEN_R1_REWARDS
    out: dict[str, float] = {}
    named: dict[str, list[str]] = {}  # the project's reward -> the entries that named it
    for name, weight in zip(funcs, weights):
        ours = name if name in REWARDS or ":" in name else table.get(name)
        if ours is None:
            raise ProfileError(
                source,
                "reward_funcs",
                f"reward {name!r} has no counterpart here (known: "
                f"{', '.join(REWARDS)}; open-r1's {', '.join(OPEN_R1_REWARDS)})",
                "write your reward as path/to/file.py:function in reward_funcs",
            )
        try:
            if isinstance(weight, bool):
                raise TypeError
            weight = float(weight)
        except (TypeError, ValueError):
            raise ProfileError(
                source, "reward_weights", f"{shown(weight)} is not a number", "give one number per reward"
            ) from None
        out[ours] = out.get(ours, 0.0) + weight
        named.setdefault(ours, []).append(name)
    notes = [
        f"{' and '.join(entries)} are one reward here ({ours}): weights summed to {out[ours]:g}, as TRL adds them"
        for ours, entries in named.items()
        if len(entries) > 1
    ]
    return out, notes


def translate(data: dict, source: str, context: dict | None = None) -> tuple[dict, list[Reading]]:
    """A mapping read from a file (or --set) in the project's key names, and how each foreign key was read.
    ProfileError for a refused key or a setting given in both spellings. `context`: for a --set, the file's
    mapping as written, which a key that needs another (warmup_steps needs max_steps, reward_weights
    reward_funcs) reads where the --set does not give it."""
    context = context or {}
    out: dict[str, Any] = {}
    readings: list[Reading] = []
    given_as: dict[str, str] = {}  # the project's key -> the key of the file that set it

    def setting(key: str, ours: str) -> None:
        earlier = given_as.get(ours)
        if earlier is not None and earlier != key:
            spelled = f"'{earlier}' and '{key}'" if ours in (earlier, key) else f"'{earlier}' and '{key}' (both {ours})"
            raise ProfileError(
                source,
                key,
                f"{spelled} say the same setting twice, in two spellings",
                f"keep one of them (the project's name is {ours})",
            )
        given_as[ours] = key

    for key, value in data.items():
        key = str(key)
        alias = ALIASES.get(key)
        if alias is None or (alias.kind == RENAMED and alias.ours == key and alias.convert is None):
            setting(key, key)
            out[key] = value
            continue
        if alias.kind == REFUSED and not (alias.unless and alias.unless(value)):
            raise ProfileError(source, key, f"{shown(value)}: {alias.note}", alias.fix)
        if alias.kind in (DECIDED, REFUSED):
            readings.append(Reading(key, DECIDED, None, value, alias.note or "the project's own value is used"))
            continue
        if alias.ours == "rewards":
            continue  # reward_funcs and reward_weights make one mapping, below
        assert alias.ours is not None  # the kind left, RENAMED, always names the project's key
        try:
            converted = alias.convert(value, {**context, **data}) if alias.convert else value
        except KeyProblem as problem:
            raise ProfileError(source, key, problem.reason, problem.fix) from None
        if converted is None:  # says nothing of its own (use_peft: true, eval_strategy: steps)
            readings.append(Reading(key, DECIDED, None, value, f"{alias.ours} says it (or its default)"))
            continue
        setting(key, alias.ours)
        out[alias.ours] = converted
        if key != alias.ours:
            readings.append(Reading(key, RENAMED, alias.ours, converted, alias.note))
    if "reward_funcs" in data or "reward_weights" in data:
        _translate_rewards(data, source, context, out, readings)
    _read_epochs(data, source, context)
    _read_push(data, source, context, out, readings)
    return out, readings


def _translate_rewards(data: dict, source: str, context: dict, out: dict, readings: list[Reading]) -> None:
    if "rewards" in data:
        other = "reward_funcs" if "reward_funcs" in data else "reward_weights"
        raise ProfileError(
            source,
            other,
            f"'rewards' and '{other}' say the same setting twice, in two spellings",
            "keep one of them (the project's name is rewards)",
        )
    if "reward_funcs" not in data and "reward_funcs" not in context:
        raise ProfileError(
            source,
            "reward_weights",
            "reward_weights without reward_funcs"
            + (" (the file names its rewards as rewards: {name: weight})" if "rewards" in context else ""),
            "give reward_funcs too, or write rewards: {name: weight}"
            + (" (--set rewards={accuracy: 2.0, ...})" if source == "--set" else ""),
        )
    out["rewards"], merged = _rewards(data, source, context)
    funcs = data.get("reward_funcs", context.get("reward_funcs")) or ()
    if merged:
        note = "; ".join(merged)
    elif set([funcs] if isinstance(funcs, str) else funcs) & {"format", "tag_count"}:
        from rewards.parse import THINK_LAYOUT, asked_layout

        system_prompt = data.get("system_prompt", context.get("system_prompt"))
        note = (
            "open-r1's format / tag_count score the <think>/<answer> layout its system_prompt asks for"
            if asked_layout(system_prompt) == THINK_LAYOUT
            else "open-r1's format / tag_count check the <reasoning>/<answer> layout the system_prompt asks for here"
        )
    elif "reward_weights" in data or "reward_weights" in context:
        note = "with reward_weights"
    else:
        note = "weights 1.0, as TRL's"
    readings.append(Reading("reward_funcs", RENAMED, "rewards", out["rewards"], note))


def _read_epochs(data: dict, source: str, context: dict) -> None:
    """A --set of num_train_epochs alone, on a file that pins max_steps: max_steps wins (TRL's order), so the
    --set would change nothing, silently. Refused, naming what to set with it."""
    if source != "--set" or "num_train_epochs" not in data or "max_steps" in data:
        return
    pinned = context.get("max_steps")
    if pinned in (None, 0, "auto", -1):
        return
    raise ProfileError(
        source,
        "num_train_epochs",
        f"{shown(data['num_train_epochs'])}: the file pins max_steps {shown(pinned)}, which wins over epochs (as in "
        "TRL), so this --set would change nothing",
        "add --set max_steps=auto, so the epochs set the run's length",
    )


def _read_push(data: dict, source: str, context: dict, out: dict, readings: list[Reading]) -> None:
    """push_to_hub: false is the user's "do not publish" and wins over hub_model_id; true needs hub_model_id
    (TRL would make up a repository name from the output folder: here nothing would be pushed, silently)."""
    if "push_to_hub" not in data:
        return
    push = data["push_to_hub"]
    repo = data.get("hub_model_id", context.get("hub_model_id")) or ""
    reading = next(r for r in readings if r.key == "push_to_hub")
    if push is False:
        out["hub_model_id"] = ""
        reading.note = "false: nothing is pushed" + (f" (hub_model_id {repo} is not used)" if repo else "")
    elif push is True:
        if not repo:
            raise ProfileError(
                source,
                "push_to_hub",
                "true, but no hub_model_id names the repository to push to",
                "write hub_model_id: org/name, or push_to_hub: false",
            )
        reading.note = f"true: the adapter is pushed to {repo} at the end when HF_TOKEN is set"
    elif push is not None:
        raise ProfileError(source, "push_to_hub", f"expected true or false, got {shown(push)}", None)


def aliases_markdown() -> str:
    """The table as Markdown, by kind (`python train.py profiles aliases`; docs/grpo-settings.md holds it)."""
    lines = ["| their key | read as | note |", "| --- | --- | --- |"]
    for kind in (RENAMED, DECIDED, REFUSED):
        for key, alias in sorted(ALIASES.items()):
            if alias.kind != kind:
                continue
            if kind == RENAMED:
                shown_as = f"`{alias.ours}`" + (" (same name, converted)" if alias.ours == key else "")
                note = alias.note
            elif kind == DECIDED:
                shown_as, note = "not used", alias.note
            else:
                allowed = " (a harmless value is read as not used)" if alias.unless else ""
                shown_as, note = "refused (exit 2)" + allowed, f"{alias.note}; fix: {alias.fix}"
            lines.append(f"| `{key}` | {shown_as} | {note.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def alias_of(key: str) -> Alias | None:
    return ALIASES.get(key)


__all__ = ["ALIASES", "DECIDED", "REFUSED", "RENAMED", "Alias", "Reading", "alias_of", "aliases_markdown", "translate"]
