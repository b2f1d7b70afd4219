"""A profile as TRL's GRPOConfig keywords. Pure: no torch or TRL import, so tests can build the GPU
path's keywords on any machine and check them against the installed GRPOConfig."""

from __future__ import annotations

import os

from launcher.contract import DEFAULT_VLLM_PORT, ENV_VLLM_HOST, ENV_VLLM_PORT, VLLM_SERVER_TIMEOUT_S


def grpo_config_kwargs(profile, output_dir: str, *, device: str, bf16: bool, use_vllm: bool) -> dict:
    """Keywords for trl.GRPOConfig. `device` is where training runs ("cuda" or "cpu"); `bf16` whether the
    card supports bfloat16 (launcher.contract.bf16_capable); `use_vllm` whether generation goes through vLLM."""
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
    if use_vllm:
        # Unsloth's engine already holds this share; TRL's own colocated engine would read it from here.
        # Sleep mode is left to Unsloth, which matches it to the engine it started (standby).
        kwargs["vllm_gpu_memory_utilization"] = profile.gpu_memory_utilization
        if profile.uses_vllm_server:
            kwargs["vllm_mode"] = "server"
            kwargs["vllm_server_host"] = os.environ.get(ENV_VLLM_HOST, "127.0.0.1")
            kwargs["vllm_server_port"] = int(os.environ.get(ENV_VLLM_PORT) or DEFAULT_VLLM_PORT)
            kwargs["vllm_server_timeout"] = VLLM_SERVER_TIMEOUT_S
        elif profile.distributed:
            # TRL's own engine in every training process, the model split over groups of them
            kwargs["vllm_mode"] = "colocate"
            kwargs["vllm_tensor_parallel_size"] = profile.vllm_tensor_parallel
    if profile.num_gpus > 1:
        # every trainable parameter gets a gradient each step: DDP need not search the graph for unused ones
        kwargs["ddp_find_unused_parameters"] = False
    return kwargs


def build_grpo_config(profile, output_dir: str, *, device: str, bf16: bool, use_vllm: bool):
    from trl import GRPOConfig

    return GRPOConfig(**grpo_config_kwargs(profile, output_dir, device=device, bf16=bf16, use_vllm=use_vllm))
