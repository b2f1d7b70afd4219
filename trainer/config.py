"""A profile as TRL's GRPOConfig keywords. Pure: no torch or TRL import, so tests can build the GPU
path's keywords on any machine and check them against the installed GRPOConfig."""

from __future__ import annotations

import os

from contract.attempt import DEFAULT_VLLM_GROUP_PORT, DEFAULT_VLLM_PORT, VLLM_SERVER_TIMEOUT_S
from contract.environment import ENV_VLLM_GROUP_PORT, ENV_VLLM_HOST, ENV_VLLM_PORT
from profiles.schema import LOSS_KEYS

# Seconds a rank waits on the others; trainer.ranks.join_ranks starts the process group with it
DDP_TIMEOUT_S = 3 * 3600


# Every GRPOConfig field that changes the loss or the sampled completions is stated, never left to a default:
# Unsloth's patched GRPOConfig (single GPU) and plain TRL (under accelerate) default some of them differently,
# so stating them makes both paths train the same objective.
#
# The ones a profile may set (profiles.schema, section "loss", and top_k / min_p / repetition_penalty), by
# GRPOConfig name. Their defaults are TRL 1.15's effective ones, with two points to note:
#  - loss_type "dapo" stated: Unsloth then sets mask_truncated_completions True and epsilon_high 0.28 unless
#    they are given (rl.py, "The DAPO paper recommends ..."), so both are always given: the profile's values,
#    and epsilon_high = epsilon when the profile leaves it empty, which is what TRL does with None.
#  - top_k 0 (no top-k): vLLM 0.32 reads 0 as "off"; Unsloth rewrites 0 to -1 under vLLM, the same thing.
PROFILE_LOSS_KEYS = (*LOSS_KEYS, "top_k", "min_p", "repetition_penalty")
# The ones the project pins (TRL 1.15's effective defaults except where noted):
#  - vllm_importance_sampling_correction: TRL True, Unsloth False (unsloth/models/rl.py). False: Unsloth's tested
#    default, and with Unsloth's shared weights vLLM samples from the very weights being trained.
LOSS_SETTINGS = {
    "multi_objective_aggregation": "sum_then_normalize",
    "top_entropy_quantile": 1.0,
    "entropy_coef": 0.0,
    "use_bias_correction_kl": True,
    "off_policy_mask_threshold": None,
    "vllm_importance_sampling_correction": False,
    "router_aux_loss_coef": 0.0,
    "cast_lm_head_to_fp32": False,
    "disable_dropout": False,
    "shuffle_dataset": True,
}


def loss_kwargs(profile) -> dict:
    """The profile's loss and sampling settings as GRPOConfig keywords (see PROFILE_LOSS_KEYS)."""
    kwargs = {key: getattr(profile, key) for key in PROFILE_LOSS_KEYS}
    if kwargs["epsilon_high"] is None:
        kwargs["epsilon_high"] = profile.epsilon
    return kwargs


def grpo_config_kwargs(
    profile, output_dir: str, *, device: str, bf16: bool, use_vllm: bool, switches: dict | None = None
) -> dict:
    """Keywords for trl.GRPOConfig. `device` is where training runs ("cuda" or "cpu"); `bf16` whether the
    card supports bfloat16 (contract.attempt.bf16_capable); `use_vllm` whether generation goes through vLLM;
    `switches` the chat template's (tasks.prompts.template_switches), with which TRL renders every prompt it
    generates from, through vLLM or transformers alike."""
    on_cpu = device == "cpu"
    kwargs = {
        "output_dir": output_dir,
        "max_steps": profile.max_steps,
        "per_device_train_batch_size": profile.per_device_train_batch_size,
        "gradient_accumulation_steps": profile.gradient_accumulation_steps,
        "steps_per_generation": profile.steps_per_generation or profile.gradient_accumulation_steps,
        "num_generations": profile.num_generations,
        "max_completion_length": profile.max_completion_length,
        "temperature": profile.temperature,
        "top_p": profile.top_p,
        "learning_rate": profile.learning_rate,
        "lr_scheduler_type": profile.lr_scheduler_type,
        "lr_scheduler_kwargs": dict(profile.lr_scheduler_kwargs),
        # transformers 5 folds warmup_ratio into warmup_steps: a value below 1 is a share of max_steps
        "warmup_steps": profile.warmup_ratio,
        "weight_decay": profile.weight_decay,
        "adam_beta1": profile.adam_beta1,
        "adam_beta2": profile.adam_beta2,
        "max_grad_norm": profile.max_grad_norm,
        "optim": profile.optim,
        "gradient_checkpointing": profile.gradient_checkpointing != "false",
        "seed": profile.seed,
        "data_seed": profile.seed,
        "reward_weights": [float(w) for w in profile.rewards.values()],
        "logging_steps": 1,
        "logging_first_step": True,
        "save_strategy": "steps",
        "save_steps": profile.save_steps,
        "report_to": "none" if profile.report_to in ("", "none") else profile.report_to,
        # our own progress bar replaces tqdm's
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "use_cpu": on_cpu,
        "bf16": (not on_cpu) and bf16,
        "fp16": (not on_cpu) and not bf16,
        "use_vllm": use_vllm,
        "chat_template_kwargs": dict(switches) if switches else None,
    }
    kwargs.update(loss_kwargs(profile))
    kwargs.update(LOSS_SETTINGS)
    if profile.tools or profile.environment:
        # the turns a completion may take; its tools and environment go to the trainer itself (trainer.stages)
        kwargs["max_tool_calling_iterations"] = profile.max_tool_calls
    if use_vllm:
        # Unsloth's engine already holds this share; TRL's own colocated engine would read it from here.
        # Sleep mode is left to Unsloth, which matches it to the engine it started (standby).
        kwargs["vllm_gpu_memory_utilization"] = profile.gpu_memory_utilization
        if profile.uses_vllm_server:
            kwargs["vllm_mode"] = "server"
            kwargs["vllm_server_host"] = os.environ.get(ENV_VLLM_HOST, "127.0.0.1")
            kwargs["vllm_server_port"] = int(os.environ.get(ENV_VLLM_PORT) or DEFAULT_VLLM_PORT)
            # TRL's weight-sync group: the trainer holding rank 0 hosts it, the server's workers join it
            kwargs["vllm_group_port"] = int(os.environ.get(ENV_VLLM_GROUP_PORT) or DEFAULT_VLLM_GROUP_PORT)
            kwargs["vllm_server_timeout"] = VLLM_SERVER_TIMEOUT_S
        elif profile.distributed:
            # TRL's own engine in every training process, the model split over groups of them
            kwargs["vllm_mode"] = "colocate"
            kwargs["vllm_tensor_parallel_size"] = profile.vllm_tensor_parallel
    if profile.num_gpus > 1:
        # every trainable parameter gets a gradient each step: DDP need not search the graph for unused ones
        kwargs["ddp_find_unused_parameters"] = False
        kwargs["ddp_timeout"] = DDP_TIMEOUT_S  # the group trainer.ranks.join_ranks started, same timeout
    return kwargs


def build_grpo_config(
    profile, output_dir: str, *, device: str, bf16: bool, use_vllm: bool, switches: dict | None = None
):
    from trl import GRPOConfig

    return GRPOConfig(
        **grpo_config_kwargs(profile, output_dir, device=device, bf16=bf16, use_vllm=use_vllm, switches=switches)
    )
