"""Configurations written for TRL and open-r1, read as profiles: ONE table from their key names (TRL's
GRPOConfig, its script, model and PEFT arguments, open-r1's recipe keys) to the project's.

Every foreign key is one of:
  renamed    the same setting under another name (`model_name_or_path` -> `model`), its value converted where
             the spelling differs (`lora_target_modules: all-linear`, `report_to: [wandb]`);
  decided    a setting the project decides itself (the dtype from the card, the output folder, logging every
             step): read, not used, and said so in `profiles check`;
  refused    no counterpart, and dropping it would train something else than the recipe says: the load stops
             (exit 2) naming the key and what to do.
A setting given twice, once in each spelling (`model` and `model_name_or_path`), is refused when the two
values differ: which one was meant cannot be known. Every problem of one file is reported at once
(RecipeProblems), so that a recipe is fixed in one pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from contract.errors import ProfileError
from profiles.alias_values import (
    dataset_configs,
    do_eval,
    eval_strategy,
    generation_batch_size,
    is_off,
    max_steps,
    model_revision,
    one_of,
    report_to,
    save_steps,
    save_strategy_note,
    saving,
    target_modules,
    tool_iterations,
    use_peft,
    warmup,
)
from profiles.keys import KeyProblem, shown
from profiles.recipe_joint import derive_sequence, read_epochs, read_push, unsaid
from profiles.recipe_reading import DECIDED, REFUSED, RENAMED, Reading, RecipeProblems, problems_of
from profiles.recipe_rewards import translate_rewards
from profiles.trl_defaults import take_trl_defaults
from profiles.unused_keys import AT_DEFAULT, UNUSED


@dataclass(frozen=True)
class Alias:
    kind: str
    ours: str | None = None  # the project's key it sets (renamed)
    note: str = ""  # decided: why it is not used; refused: the reason; renamed: how it was converted
    fix: str | None = None  # refused: what to do
    convert: Callable[[Any, dict], Any] | None = None  # renamed: the value in the project's spelling
    unless: Callable[[Any], bool] | None = None  # refused only when this is false of the value (else decided)
    note_of: Callable[[Any], str] | None = None  # decided: the note for this value, where it depends on it


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
    "lora_target_modules": _renamed("target_modules", target_modules),
    "use_peft": _renamed("lora_rank", use_peft, "use_peft false: full fine-tuning (lora_rank 0)"),
    "torch_dtype": _decided("the dtype follows the card: bf16 where it supports it, else fp16; fp32 on CPU"),
    "dtype": _decided("the dtype follows the card: bf16 where it supports it, else fp16; fp32 on CPU"),
    "attn_implementation": _decided("Unsloth (or transformers) chooses the attention kernel for the card"),
    "model_revision": _refused(
        "a revision other than main cannot be pinned here",
        "download that revision to a folder and give model: FOLDER",
        model_revision,
    ),
    "load_in_8bit": _refused("8-bit weights are not a training path here", "use load_in_4bit: true, or false", is_off),
    "bnb_4bit_quant_type": _refused("4-bit weights are NF4 here", "remove it (or write nf4)", one_of("nf4")),
    "use_bnb_nested_quant": _decided("4-bit loading uses double quantisation where it applies"),
    "use_rslora": _refused(
        "rank-stabilised LoRA is not offered here", "remove it (scale = lora_alpha / lora_rank)", is_off
    ),
    "lora_task_type": _refused("only causal language models are trained here", "remove it", one_of("CAUSAL_LM")),
    "lora_modules_to_save": _refused("extra fully trained modules are not offered here", "remove it", is_off),
    # --- TRL ScriptArguments and open-r1's data keys ---
    "dataset_name": _renamed("dataset"),
    "dataset_configs": _renamed("dataset_config", dataset_configs),
    "dataset_train_split": _renamed("train_split"),
    "dataset_test_split": _renamed("test_split"),
    "dataset_prompt_column": _renamed("question_field"),
    "reward_funcs": _renamed("rewards", note="with reward_weights: rewards {name: weight}"),
    "reward_weights": _renamed("rewards", note="with reward_funcs: rewards {name: weight}"),
    "reward_model_name_or_path": _renamed("rewards", note="the first reward, model:NAME, as `trl grpo` puts it"),
    "num_processes": _renamed("num_gpus", note="accelerate's processes: one training GPU each"),
    # --- GRPOConfig ---
    "use_vllm": _renamed("fast_inference"),
    "max_tool_calling_iterations": _renamed("max_tool_calls", tool_iterations),
    "environment_factory": _renamed("environment"),
    "vllm_gpu_memory_utilization": _renamed("gpu_memory_utilization"),
    "vllm_tensor_parallel_size": _renamed("vllm_tensor_parallel"),
    "vllm_enable_sleep_mode": _renamed("vllm_standby", note="Unsloth's standby: vLLM sleeps while training runs"),
    "warmup_steps": _renamed("warmup_ratio", warmup, "a share of max_steps"),
    "max_steps": _renamed("max_steps", max_steps, "-1 (TRL: by num_train_epochs): the plan's run length"),
    "eval_strategy": _renamed("eval_steps", eval_strategy, "no: eval_steps 0; steps: eval_steps"),
    "do_eval": _renamed("eval_steps", do_eval, "false: eval_steps 0"),
    "vllm_device": _decided("the launcher places vLLM (in the training process, or on the server's GPUs)"),
    "vllm_mode": _renamed("vllm_mode"),
    "report_to": _renamed("report_to", report_to),  # same name; TRL also takes a list
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
    "save_strategy": Alias(
        REFUSED,
        note="TRL takes no, steps, epoch or best",
        fix="write save_strategy: steps with save_steps: N",
        unless=saving,
        note_of=save_strategy_note,
    ),
    "save_steps": _renamed("save_steps", save_steps, "TRL's share of max_steps, rounded up"),
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
    "use_liger_kernel": _decided("Unsloth's fused kernels serve the single-GPU path"),
    "use_liger_loss": _decided("Unsloth's fused GRPO loss serves the single-GPU path"),
    "torch_compile": _decided("Unsloth compiles what it patches"),
    "dataloader_num_workers": _decided("prompts are read in the training process (0 workers)"),
    "wandb_project": _decided("set WANDB_PROJECT in the environment, with report_to: wandb"),
    "wandb_entity": _decided("set WANDB_ENTITY in the environment, with report_to: wandb"),
    "wandb_run_group": _decided("set WANDB_RUN_GROUP in the environment, with report_to: wandb"),
    "generation_batch_size": _renamed(
        "steps_per_generation", generation_batch_size, "over per_device_train_batch_size x processes"
    ),
    "vllm_importance_sampling_correction": _refused(
        "both paths train without vLLM's importance-sampling correction (Unsloth's default, which TRL's plain path "
        "is given too, so that the two train the same objective)",
        "remove it",
        is_off,
    ),
    "sync_ref_model": _refused("the reference model is never synced to the policy here", "remove it", is_off),
    "deepspeed": _refused("the launcher writes DeepSpeed's configuration itself", "write zero_stage: 0-3 instead"),
    "callbacks": _refused("the trainer's callbacks are the project's own", "remove it"),
    "chat_template": _refused(
        "prompts use the tokenizer's own chat template", "give a model whose tokenizer has the template you want"
    ),
    "max_length": _refused(
        "GRPO's lengths are max_prompt_length and max_completion_length", "write those, and max_seq_length"
    ),
}
# TRL's and open-r1's remaining keys (profiles.unused_keys): not used, or honoured at TRL's default only
ALIASES.update({key: _decided(note) for key, note in UNUSED.items() if key not in ALIASES})
ALIASES.update(
    {
        key: _refused(
            f"{asks} is not offered here", f"remove it (the default, {shown(default)}, runs here)", one_of(default)
        )
        for key, (default, asks) in AT_DEFAULT.items()
        if key not in ALIASES
    }
)


_KEYS_HELP = "run `python train.py --help` for the list of keys"


def translate(data: dict, source: str, context: dict | None = None) -> tuple[dict, list[Reading]]:
    """A mapping read from a file (or --set) in the project's key names, and how each foreign key was read.
    RecipeProblems naming every refused key, and every setting given in two spellings with two values.
    `context`: for a --set, the file's mapping as written, which a key that needs another (warmup_steps needs
    max_steps, reward_weights reward_funcs) reads where the --set does not give it."""
    context = context or {}
    out: dict[str, Any] = {}
    readings: list[Reading] = []
    problems: list[ProfileError] = []
    given_as: dict[str, str] = {}  # the project's key -> the key of the file that set it

    def setting(key: str, ours: str, value: Any) -> None:
        earlier = given_as.get(ours)
        if earlier is not None and earlier != key and out.get(ours) != value:
            spelled = f"'{earlier}' and '{key}'" if ours in (earlier, key) else f"'{earlier}' and '{key}' (both {ours})"
            problems.append(
                ProfileError(
                    source,
                    key,
                    f"{spelled} say the same setting twice, in two spellings, with different values",
                    f"keep one of them (the project's name is {ours})",
                )
            )
            return
        given_as.setdefault(ours, key)
        out[ours] = value

    from profiles.keys import suggest
    from profiles.schema import KEYS

    for key, value in data.items():
        key = str(key)
        alias = ALIASES.get(key)
        if alias is None and key not in KEYS and source != "--set":  # every unknown key of a file at once
            problems.append(ProfileError(source, key, "unknown key", suggest(key, KEYS) or _KEYS_HELP))
            continue
        if alias is None or (alias.kind == RENAMED and alias.ours == key and alias.convert is None):
            setting(key, key, value)
            continue
        if alias.kind == REFUSED and not (alias.unless and alias.unless(value)):
            problems.append(ProfileError(source, key, f"{shown(value)}: {alias.note}", alias.fix))
            continue
        if alias.kind in (DECIDED, REFUSED):
            note = alias.note_of(value) if alias.note_of else alias.note
            readings.append(Reading(key, DECIDED, None, value, note or "the project's own value is used"))
            continue
        if alias.ours == "rewards":
            continue  # reward_funcs and reward_weights make one mapping, below
        assert alias.ours is not None  # the kind left, RENAMED, always names the project's key
        try:
            converted = alias.convert(value, {**context, **data}) if alias.convert else value
        except KeyProblem as problem:
            problems.append(ProfileError(source, key, problem.reason, problem.fix))
            continue
        if converted is None:  # says nothing of its own (use_peft: true, eval_strategy: steps)
            readings.append(Reading(key, DECIDED, None, value, unsaid(key, alias.ours)))
            continue
        setting(key, alias.ours, converted)
        if key != alias.ours or converted != value:
            readings.append(Reading(key, RENAMED, alias.ours, converted, alias.note))
    if any(key in data for key in ("reward_funcs", "reward_weights", "reward_model_name_or_path")):
        try:
            translate_rewards(data, source, context, out, readings)
        except ProfileError as error:
            problems.extend(problems_of(error))
    for check in (read_epochs, read_push):
        try:
            check(data, source, context, out, readings)
        except ProfileError as error:
            problems.append(error)
    if source != "--set":  # before a refusal too: the schema's say on the rest sees what the recipe means
        take_trl_defaults(data, out, readings)
        derive_sequence(data, out, readings)
        if out.get("device") == "cpu" and "use_cpu" in data:
            # TRL's defaults where the project's need a GPU: no vLLM, no 4-bit weights, AdamW in torch
            out.setdefault("fast_inference", False)
            out.setdefault("load_in_4bit", False)
            out.setdefault("optim", "adamw_torch")
    if problems:
        refusal = RecipeProblems(source, problems)
        refusal.partial = out  # what did read, for the schema's say on the rest (profiles.load)
        raise refusal
    return out, readings


def aliases_markdown() -> str:
    """The table as Markdown, by kind (`python train.py profiles aliases`; docs/grpo-settings.md holds it)."""
    lines = ["| their key | read as | note |", "| --- | --- | --- |"]
    for kind in (RENAMED, DECIDED, REFUSED):
        for key, alias in sorted(ALIASES.items()):
            if (DECIDED if alias.note_of else alias.kind) != kind:
                continue
            if alias.note_of:  # every value TRL takes is read; the note depends on it
                shown_as = "not used"
                note = "; ".join(alias.note_of(value) for value in ("no", "epoch")) + f"; anything else: {alias.note}"
            elif kind == RENAMED:
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


__all__ = [
    "ALIASES",
    "DECIDED",
    "REFUSED",
    "RENAMED",
    "Alias",
    "Reading",
    "RecipeProblems",
    "alias_of",
    "aliases_markdown",
    "problems_of",
    "translate",
]
