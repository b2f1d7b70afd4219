"""WHICH of TRL's and open-r1's remaining keys a recipe may carry and the project does not use: those read and
not used whatever their value (logging, the launcher's and the hub's plumbing, what the project decides itself),
and those honoured only at TRL's default, which is what runs here (any other value is listed with the fix).
profiles.aliases adds both to its table; tests/unit/profiles/test_unused_keys.py holds every key of TRL's
GRPOConfig, ModelConfig and `trl grpo`'s script arguments, and open-r1's, to be in one table or the other."""

from __future__ import annotations

from typing import Any

_LOGGING = "logging and progress are the project's own (metrics.jsonl, the report)"
_LAUNCHER = "the launcher sets up processes, devices and DeepSpeed itself"
_EVALUATION = "held-out accuracy is measured before, during (eval_steps) and after training, greedily"
_SAVING = "checkpoints keep the optimizer and data position, for the OOM fallback and --resume"
_HUB = "the adapter (or merged model) is pushed to hub_model_id at the end, with HF_TOKEN from the environment"
_SPEED = "the backend (Unsloth, or plain TRL) chooses its kernels, compilation and caches"
_DATA = "data is read once per process in batches, every column kept for the rewards"
_VLLM = "the launcher starts vLLM (in the process, or as its server) and addresses it"
_IS_OFF = "only with a setting that is off here"
_CODE = "programs run in the local sandbox, every test case, one program per core (docs/code-rewards.md)"

# key -> why it is not used (any value)
UNUSED: dict[str, str] = {
    **dict.fromkeys(
        (
            "log_on_each_node",
            "logging_nan_inf_filter",
            "include_num_input_tokens_seen",
            "log_level_replica",
            "project",
            "trackio_space_id",
            "trackio_bucket_id",
            "trackio_static_space_id",
            "log_multimodal",
            "num_completions_to_print",
            "log_unique_prompts",
            "log_completions_hub_repo",
            "wandb_log_unique_prompts",
            "debug",
            "skip_memory_metrics",
        ),
        _LOGGING,
    ),
    **dict.fromkeys(
        (
            "accelerator_config",
            "parallelism_config",
            "ddp_find_unused_parameters",
            "ddp_bucket_cap_mb",
            "ddp_broadcast_buffers",
            "ddp_static_graph",
            "ddp_backend",
            "ddp_timeout",
            "local_rank",
            "ds3_gather_for_generation",
            "do_train",
            "do_predict",
        ),
        _LAUNCHER,
    ),
    **dict.fromkeys(
        (
            "bf16_full_eval",
            "fp16_full_eval",
            "eval_delay",
            "prediction_loss_only",
            "eval_on_start",
            "eval_do_concat_batches",
            "eval_use_gather_object",
            "eval_accumulation_steps",
            "include_for_metrics",
            "batch_eval_metrics",
            "num_generations_eval",
            "load_best_model_at_end",
            "metric_for_best_model",
            "greater_is_better",
            "benchmarks",
        ),
        _EVALUATION,
    ),
    **dict.fromkeys(
        (
            "save_only_model",
            "save_on_each_node",
            "enable_jit_checkpoint",
            "ignore_data_skip",
            "restore_callback_states_from_checkpoint",
        ),
        _SAVING,
    ),
    **dict.fromkeys(("hub_token", "hub_always_push", "overwrite_hub_revision"), _HUB),
    **dict.fromkeys(
        (
            "torch_compile_backend",
            "torch_compile_mode",
            "liger_kernel_config",
            "use_cache",
            "torch_empty_cache_steps",
            "cache_implementation",
            "pad_to_multiple_of",
            "use_transformers_continuous_batching",
            "transformers_continuous_batching_config",
            "use_transformers_paged",
            "bnb_4bit_quant_storage",
            "auto_find_batch_size",
        ),
        _SPEED,
    ),
    **dict.fromkeys(
        (
            "dataloader_drop_last",
            "dataloader_pin_memory",
            "dataloader_persistent_workers",
            "dataloader_prefetch_factor",
            "dataloader_multiprocessing_context",
            "dataloader_in_order",
            "remove_unused_columns",
            "label_names",
            "length_column_name",
            "dataset_streaming",
            "ignore_bias_buffers",
        ),
        _DATA,
    ),
    **dict.fromkeys(
        (
            "vllm_model_impl",
            "vllm_server_base_url",
            "vllm_server_host",
            "vllm_server_port",
            "vllm_server_timeout",
            "vllm_group_port",
            "vllm_max_model_length",
        ),
        _VLLM,
    ),
    # with sync_ref_model, vLLM's importance-sampling correction or adaptive entropy, all off here
    **dict.fromkeys(
        (
            "ref_model_mixup_alpha",
            "ref_model_sync_steps",
            "vllm_importance_sampling_mode",
            "vllm_importance_sampling_clip_max",
            "vllm_importance_sampling_clip_min",
            "vllm_importance_sampling_cap",
            "entropy_coef_min",
            "entropy_coef_max",
            "entropy_coef_delta",
            "entropy_target",
        ),
        _IS_OFF,
    ),
    # open-r1's reward parameters: for its cosine, repetition and soft-overlong rewards, which are not offered
    # (their names in reward_funcs are refused with the fix)
    **dict.fromkeys(
        (
            "cosine_min_value_wrong",
            "cosine_max_value_wrong",
            "cosine_min_value_correct",
            "cosine_max_value_correct",
            "cosine_max_len",
            "repetition_n_grams",
            "repetition_max_penalty",
            "max_completion_len",
            "soft_punish_cache",
        ),
        "parameters of open-r1's rewards that are not offered here",
    ),
    **dict.fromkeys(
        (
            "code_eval_test_batch_size",
            "parallel_code_exec_per_proc",
            "e2b_router_url",
            "morph_router_url",
            "code_provider",
            "ioi_provider",
            "code_eval_scoring_mode",
            "enforce_same_language",
        ),
        _CODE,
    ),
}

# key -> (TRL's or open-r1's default, what another value would ask for)
AT_DEFAULT: dict[str, tuple[Any, str]] = {
    "optim_args": (None, "arguments of the optimizer"),
    "adam_epsilon": (1e-8, "another AdamW epsilon"),
    "optim_target_modules": (None, "an optimizer over chosen modules"),
    "average_tokens_across_devices": (True, "a loss not averaged over the devices' tokens"),
    "label_smoothing_factor": (0.0, "label smoothing"),
    "neftune_noise_alpha": (None, "NEFTune noise"),
    "full_determinism": (False, "fully deterministic kernels"),
    "train_sampling_strategy": ("random", "another order of the training rows"),
    "fsdp": (None, "FSDP (ZeRO is offered: zero_stage)"),
    "fsdp_config": (None, "FSDP (ZeRO is offered: zero_stage)"),
    "resume_from_checkpoint": (None, "a resume from the file (train --resume DIR does it)"),
    "hub_revision": (None, "a push to a branch other than main"),
    "hub_model_revision": ("main", "a push to a branch other than main"),
    "push_to_hub_revision": (False, "a push to a branch other than main"),
    "model_init_kwargs": (None, "the model loaded with other arguments (load_in_4bit, trust_remote_code set it)"),
    "router_aux_loss_coef": (0.0, "a mixture-of-experts router loss"),  # TRL's None; 0.0 pinned here
    "disable_dropout": (False, "dropout switched off"),
    "cast_lm_head_to_fp32": (False, "an fp32 output layer"),
    "shuffle_dataset": (True, "the training rows in file order"),
    "generation_kwargs": (None, "other generation arguments"),
    "vllm_structured_outputs_regex": (None, "generation constrained by a regular expression"),
    "sapo_temperature_neg": (1.05, "another SAPO temperature"),
    "sapo_temperature_pos": (1.0, "another SAPO temperature"),
    "vespo_k_pos": (2.0, "other VESPO parameters"),
    "vespo_lambda_pos": (3.0, "other VESPO parameters"),
    "vespo_k_neg": (3.0, "other VESPO parameters"),
    "vespo_lambda_neg": (2.0, "other VESPO parameters"),
    "multi_objective_aggregation": ("sum_then_normalize", "another way of adding the rewards"),
    "top_entropy_quantile": (1.0, "a loss on the highest-entropy tokens only"),
    "entropy_coef": (0.0, "an entropy bonus"),
    "use_adaptive_entropy": (False, "an adaptive entropy bonus"),
    "off_policy_mask_threshold": (None, "off-policy sequence masking"),
    "use_bias_correction_kl": (True, "the KL estimate without its bias correction"),
    "lora_target_parameters": (None, "LoRA on parameters rather than modules"),
    "use_dora": (False, "DoRA"),
    "dataset_mixture": (None, "a mixture of data sets (one is trained on here)"),
    "code_language": ("python", "programs in another language (the local sandbox runs Python)"),
}

__all__ = ["AT_DEFAULT", "UNUSED"]
