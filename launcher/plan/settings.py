"""WHAT a candidate will run with: the profile keys the fit solver moves, as one flat dict for the plan's JSON
(`--dry-run --json` candidates carry it as `settings`), so that tools read what will run without the YAML."""

from __future__ import annotations

# The keys the solver moves (launcher.plan.solve), and the ones that say where generation runs.
SETTINGS_KEYS = (
    "model", "load_in_4bit", "lora_rank", "lora_alpha", "num_generations", "per_device_train_batch_size",
    "gradient_accumulation_steps", "max_prompt_length", "max_completion_length", "max_seq_length",
    "fast_inference", "gpu_memory_utilization", "vllm_standby", "gradient_checkpointing", "optim",
    "num_gpus", "vllm_mode", "vllm_server_gpus", "vllm_tensor_parallel",
)


def settings_of(profile) -> dict:
    """The solver's keys of a profile, with the completions per optimizer step they make."""
    out = {key: getattr(profile, key) for key in SETTINGS_KEYS}
    out["effective_batch"] = profile.effective_batch
    return out
