"""WHAT must hold between a profile's keys: the short cross-key rules, and the order in which every cross-key
rule is checked and reported (the longer ones live in profiles.rules and profiles.tool_rules).

profiles.schema.Profile runs `check_cross_keys` once its single keys are read; the first rule broken is the one
reported. Each refusal is a KeyProblem naming the key to change.
"""

from __future__ import annotations

from profiles.keys import MIN_LR_SCHEDULERS, VLLM_LORA_RANKS, KeyProblem
from profiles.rules import check_loss_settings, check_rewards_and_dataset, check_scale_out
from profiles.tool_rules import check_tools


def _whole_groups_per_step(p) -> None:
    # TRL's GRPOConfig: generation_batch_size = per-device batch x processes x steps_per_generation
    # (= gradient_accumulation_steps), and it must hold whole groups of num_generations.
    if p.completions_per_step % p.num_generations:
        raise KeyProblem(
            f"per_device_train_batch_size x num_gpus x gradient_accumulation_steps = "
            f"{p.per_device_train_batch_size} x {p.num_gpus} x {p.gradient_accumulation_steps} = "
            f"{p.completions_per_step} is not divisible by num_generations ({p.num_generations}); GRPO "
            f"needs whole groups of completions per step",
            f"make the product a multiple of {p.num_generations}",
            "per_device_train_batch_size",
        )


def _whole_updates_per_generation(p) -> None:
    if p.steps_per_generation and p.steps_per_generation % p.gradient_accumulation_steps:
        raise KeyProblem(
            f"steps_per_generation {p.steps_per_generation} is not a whole number of optimizer steps of "
            f"gradient_accumulation_steps {p.gradient_accumulation_steps} micro-batches",
            f"make it a multiple of {p.gradient_accumulation_steps} (or 0: one generation per optimizer step)",
            "steps_per_generation",
        )


def _lengths_fit(p) -> None:
    total = p.max_prompt_length + p.max_completion_length
    if total > p.max_seq_length:
        raise KeyProblem(
            f"max_prompt_length + max_completion_length = {p.max_prompt_length} + "
            f"{p.max_completion_length} > max_seq_length ({p.max_seq_length})",
            f"raise max_seq_length to {total} or shorten the others",
            "max_seq_length",
        )


def _evaluations_within_the_run(p) -> None:
    if isinstance(p.eval_steps, int) and p.max_steps and p.eval_steps >= p.max_steps and p.eval_samples:
        raise KeyProblem(
            f"eval_steps {p.eval_steps} >= max_steps ({p.max_steps}): no evaluation would run during "
            "training (the one after it always runs)",
            f"use eval_steps below {p.max_steps}, 0 for none during training, or auto",
            "eval_steps",
        )


def _expected_within_the_cap(p) -> None:
    if p.expected_completion_length > p.max_completion_length:
        raise KeyProblem(
            f"expected_completion_length {p.expected_completion_length} > max_completion_length "
            f"({p.max_completion_length}): a completion cannot run longer than its cap on average",
            f"set it to at most {p.max_completion_length}, or 0 to derive it from the task",
            "expected_completion_length",
        )


def _cpu_has_no_gpu_features(p) -> None:
    if p.device != "cpu":
        return
    if p.fast_inference:
        raise KeyProblem(
            "vLLM needs a GPU; a cpu profile generates with transformers",
            "set fast_inference: false",
            "fast_inference",
        )
    if p.load_in_4bit:
        raise KeyProblem("4-bit weights (bitsandbytes) need a GPU", "set load_in_4bit: false", "load_in_4bit")
    if "8bit" in p.optim:
        raise KeyProblem(f"{p.optim} needs bitsandbytes on a GPU", "use adamw_torch on a cpu profile", "optim")
    if p.save_merged:  # the merge is Unsloth's, on the GPU path; on CPU it would be skipped silently
        raise KeyProblem(
            "the merged 16-bit model is saved by Unsloth on a GPU; a cpu profile saves the adapter only",
            "set save_merged: false",
            "save_merged",
        )


def _standby_needs_vllm(p) -> None:
    if p.vllm_standby and not p.fast_inference:
        raise KeyProblem("standby applies to the vLLM engine, which is off", "set fast_inference: true", "vllm_standby")


def _lora_rank_fits(p) -> None:
    if p.fast_inference and p.uses_lora and p.lora_rank not in VLLM_LORA_RANKS:
        nearest = min(VLLM_LORA_RANKS, key=lambda r: (abs(r - p.lora_rank), r))
        raise KeyProblem(
            f"vLLM serves LoRA ranks {', '.join(map(str, VLLM_LORA_RANKS))}, not {p.lora_rank}",
            f"use lora_rank: {nearest}, or fast_inference: false",
            "lora_rank",
        )
    if not p.uses_lora and p.load_in_4bit:
        raise KeyProblem(
            "full fine-tuning (lora_rank 0) cannot update 4-bit weights",
            "set load_in_4bit: false or a LoRA rank",
            "lora_rank",
        )


def _schedule_has_its_floor(p) -> None:
    """transformers refuses a min-lr cosine without its floor only when the trainer builds its schedule."""
    if p.lr_scheduler_type in MIN_LR_SCHEDULERS and not {"min_lr", "min_lr_rate"} & set(p.lr_scheduler_kwargs):
        raise KeyProblem(
            f"{p.lr_scheduler_type} needs its floor, min_lr or min_lr_rate, in lr_scheduler_kwargs",
            "write e.g. lr_scheduler_kwargs: {min_lr_rate: 0.1}",
            "lr_scheduler_kwargs",
        )


# Every rule that involves more than one key, in the order they are reported.
CROSS_KEY_RULES = (
    _whole_groups_per_step,
    _whole_updates_per_generation,
    _lengths_fit,
    _evaluations_within_the_run,
    _expected_within_the_cap,
    _cpu_has_no_gpu_features,
    _standby_needs_vllm,
    _lora_rank_fits,
    _schedule_has_its_floor,
    check_loss_settings,
    check_scale_out,
    check_rewards_and_dataset,
    check_tools,
)


def check_cross_keys(p) -> None:
    """Each rule of CROSS_KEY_RULES in turn on a profile whose single keys are read: KeyProblem at the first
    broken."""
    for rule in CROSS_KEY_RULES:
        rule(p)
