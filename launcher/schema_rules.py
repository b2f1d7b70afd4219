"""The longer cross-key rules of a profile: scale-out keys against each other, rewards and dataset that exist.

Called by launcher.schema.Profile's validators; each refusal is a KeyProblem naming the key to change.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from launcher.schema import DATASETS, KeyProblem


def suggest(word: str, known) -> str | None:
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.5)
    return f"did you mean '{close[0]}'?" if close else None


def check_scale_out(p) -> None:
    """The scale-out keys against each other and against the single-device Unsloth path."""
    if p.zero_stage and p.num_gpus == 1:
        raise KeyProblem(f"ZeRO stage {p.zero_stage} shards model states over the data-parallel GPUs, and "
                         "num_gpus is 1: there is nothing to shard over", "set num_gpus above 1, or zero_stage: 0",
                         "zero_stage")
    if p.device == "cpu":
        if p.zero_stage:
            raise KeyProblem("DeepSpeed ZeRO needs GPUs; several cpu processes train with plain DDP (gloo)",
                             "set zero_stage: 0 on a cpu profile", "zero_stage")
        if p.vllm_mode == "server":
            raise KeyProblem("a vLLM server needs GPUs", "set vllm_mode: colocate on a cpu profile", "vllm_mode")
    if p.vllm_mode == "server" and not p.fast_inference:
        raise KeyProblem("server mode generates with vLLM, which is off (fast_inference: false)",
                         "set fast_inference: true, or vllm_mode: colocate", "vllm_mode")
    if p.distributed:
        if p.vllm_standby:
            raise KeyProblem("standby is Unsloth's, and Unsloth trains on one GPU; this profile trains through "
                             "accelerate (num_gpus > 1 or a vLLM server)", "set vllm_standby: false", "vllm_standby")
        if p.gradient_checkpointing == "unsloth":
            raise KeyProblem("'unsloth' (checkpoints offloaded to RAM) needs the single-GPU Unsloth path; this "
                             "profile trains through accelerate", "use gradient_checkpointing: true",
                             "gradient_checkpointing")
    if p.vllm_tensor_parallel > 1:
        _check_tensor_parallel(p)


def _check_tensor_parallel(p) -> None:
    tp = p.vllm_tensor_parallel
    if not p.fast_inference:
        raise KeyProblem("tensor parallelism applies to vLLM, which is off", "set vllm_tensor_parallel: 1",
                         "vllm_tensor_parallel")
    if p.uses_vllm_server and p.vllm_server_gpus % tp:
        raise KeyProblem(f"vllm_server_gpus ({p.vllm_server_gpus}) is not a multiple of vllm_tensor_parallel "
                         f"({tp}): each server copy needs whole GPUs",
                         f"use vllm_server_gpus: {tp * max(1, p.vllm_server_gpus // tp)}", "vllm_tensor_parallel")
    if not p.uses_vllm_server and p.num_gpus % tp:
        raise KeyProblem(f"num_gpus ({p.num_gpus}) is not a multiple of vllm_tensor_parallel ({tp}): colocated "
                         "vLLM splits the model over groups of training GPUs",
                         "use a divisor of num_gpus, or vllm_mode: server", "vllm_tensor_parallel")


def check_rewards_and_dataset(p) -> None:
    from rewards import REWARDS  # the registry; imports neither torch nor unsloth

    for name in p.rewards:
        if name not in REWARDS:
            raise KeyProblem(f"unknown reward '{name}'; known: {', '.join(REWARDS)}", suggest(name, REWARDS),
                             "rewards")
    if p.dataset not in DATASETS and not Path(p.dataset).expanduser().is_file():
        raise KeyProblem(f"{p.dataset!r} is neither {' nor '.join(DATASETS)} nor an existing JSONL file",
                         "give gsm8k, arithmetic or the path of a .jsonl file with question and answer fields",
                         "dataset")
