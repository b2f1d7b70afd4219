"""A profile as TRL's GRPOConfig keywords. Pure: no torch or TRL import, so tests can build the GPU
path's keywords on any machine and check them against the installed GRPOConfig."""

from __future__ import annotations

import os

from contract.attempt import DEFAULT_VLLM_GROUP_PORT, DEFAULT_VLLM_PORT, VLLM_SERVER_TIMEOUT_S
from contract.environment import ENV_VLLM_GROUP_PORT, ENV_VLLM_HOST, ENV_VLLM_PORT

# Seconds a rank waits on the others; trainer.stages.join_ranks starts the process group with it
DDP_TIMEOUT_S = 3 * 3600


# Every GRPOConfig field that changes the loss or the sampled completions, stated. Unsloth's patched GRPOConfig
# (single GPU) and plain TRL (under accelerate) default some of them differently; stating them makes both paths
# train the same objective. Values are TRL 1.15's effective defaults except where noted.
#  - vllm_importance_sampling_correction: TRL True, Unsloth False (unsloth/models/rl.py). False: Unsloth's tested
#    default, and with Unsloth's shared weights vLLM samples from the very weights being trained.
#  - loss_type "dapo" stated: Unsloth then sets mask_truncated_completions True and epsilon_high 0.28 unless
#    they are given (rl.py, "The DAPO paper recommends ..."), so both are given: TRL's False and epsilon_high =
#    epsilon, which is what TRL does with None (grpo_trainer.py).
#  - top_k 0 (no top-k): vLLM 0.32 reads 0 as "off"; Unsloth rewrites 0 to -1 under vLLM, the same thing.
LOSS_SETTINGS = {
    "loss_type": "dapo",
    "epsilon": 0.2,
    "epsilon_high": 0.2,
    "delta": None,
    "importance_sampling_level": "token",
    "scale_rewards": "group",
    "mask_truncated_completions": False,
    "num_iterations": 1,
    "top_k": 0,
    "min_p": None,
    "repetition_penalty": 1.0,
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


def grpo_config_kwargs(profile, output_dir: str, *, device: str, bf16: bool, use_vllm: bool) -> dict:
    """Keywords for trl.GRPOConfig. `device` is where training runs ("cuda" or "cpu"); `bf16` whether the
    card supports bfloat16 (contract.attempt.bf16_capable); `use_vllm` whether generation goes through vLLM."""
    on_cpu = device == "cpu"
    kwargs = {
        "output_dir": output_dir,
        "max_steps": profile.max_steps,
        "per_device_train_batch_size": profile.per_device_train_batch_size,
        "gradient_accumulation_steps": profile.gradient_accumulation_steps,
        "num_generations": profile.num_generations,
        "max_completion_length": profile.max_completion_length,
        "temperature": profile.temperature,
        "top_p": profile.top_p,
        "beta": profile.beta,
        "learning_rate": profile.learning_rate,
        "lr_scheduler_type": profile.lr_scheduler_type,
        # transformers 5 folds warmup_ratio into warmup_steps: a value below 1 is a share of max_steps
        "warmup_steps": profile.warmup_ratio,
        "weight_decay": profile.weight_decay,
        "adam_beta1": 0.9,
        "adam_beta2": 0.99,
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
    }
    kwargs.update(LOSS_SETTINGS)
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
        kwargs["ddp_timeout"] = DDP_TIMEOUT_S  # the group trainer.stages.join_ranks started, same timeout
    return kwargs


def build_grpo_config(profile, output_dir: str, *, device: str, bf16: bool, use_vllm: bool):
    from trl import GRPOConfig

    return GRPOConfig(**grpo_config_kwargs(profile, output_dir, device=device, bf16=bf16, use_vllm=use_vllm))
