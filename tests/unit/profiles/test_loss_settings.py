"""The single-GPU path (Unsloth's patched GRPOConfig) and the distributed path (plain TRL under accelerate) must
train the same objective. Unsloth rewrites some of GRPOConfig's defaults (vllm_importance_sampling_correction
False where TRL has True, router_aux_loss_coef 0.0, and with an explicit loss_type "dapo" it turns on
mask_truncated_completions and epsilon_high 0.28), so every field that changes the loss or the sampled
completions is stated by trainer.config, never left to a default, and both configurations state the same."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from profiles.load import load_profile
from trainer.config import grpo_config_kwargs

REPO = Path(__file__).resolve().parents[3]

# GRPOConfig fields (TRL 1.15) that change the loss, the advantages or the sampled completions. Written out
# here, not taken from trainer.config, so a field dropped there fails this test.
LOSS_FIELDS = (
    "loss_type",
    "beta",
    "epsilon",
    "epsilon_high",
    "delta",
    "scale_rewards",
    "importance_sampling_level",
    "mask_truncated_completions",
    "num_iterations",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "vllm_importance_sampling_correction",
    "multi_objective_aggregation",
    "top_entropy_quantile",
    "entropy_coef",
    "use_bias_correction_kl",
    "off_policy_mask_threshold",
    "router_aux_loss_coef",
    "reward_weights",
    "num_generations",
    "max_completion_length",
    "learning_rate",
    "max_grad_norm",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "cast_lm_head_to_fp32",
    "disable_dropout",
)
# the ones a profile sets: equal when the two profiles say the same
FROM_PROFILE = {
    "beta",
    "temperature",
    "top_p",
    "reward_weights",
    "num_generations",
    "max_completion_length",
    "learning_rate",
    "max_grad_norm",
    "weight_decay",
}


def configurations():
    single = load_profile(REPO / "profiles" / "gpu-80gb-qwen2.5-14b.yaml")
    multi = load_profile(REPO / "profiles" / "multi-4x80gb-qwen2.5-14b.yaml")
    assert not single.distributed and multi.distributed and multi.num_gpus > 1
    one = grpo_config_kwargs(single, "out", device="cuda", bf16=True, use_vllm=True)
    many = grpo_config_kwargs(multi, "out", device="cuda", bf16=True, use_vllm=True)
    return (single, one), (multi, many)


def test_the_loss_fields_are_grpo_config_fields():
    from trl import GRPOConfig

    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert not set(LOSS_FIELDS) - names


@pytest.mark.parametrize("field", LOSS_FIELDS)
def test_both_paths_state_every_loss_field_alike(field):
    (single, one), (multi, many) = configurations()
    # stated, not defaulted: a default is where Unsloth's GRPOConfig and TRL's part ways
    assert field in one and field in many, f"{field} is left to GRPOConfig's default"
    if field in FROM_PROFILE:
        mine = [getattr(p, field, None) for p in (single, multi)]
        if field == "reward_weights":
            mine = [[float(w) for w in p.rewards.values()] for p in (single, multi)]
        assert [one[field], many[field]] == mine
    else:
        assert one[field] == many[field]


def test_trl_keeps_what_was_stated():
    # built by the installed TRL on this CPU: the stated values survive __post_init__ on both paths
    from trl import GRPOConfig

    (_s, one), (_m, many) = configurations()
    built = []
    for kwargs in (one, many):
        kwargs = {**kwargs, "use_cpu": True, "bf16": False, "fp16": False}
        built.append(GRPOConfig(**kwargs))
    for field in set(LOSS_FIELDS) - FROM_PROFILE:
        assert getattr(built[0], field) == getattr(built[1], field) == one[field], field
    assert built[0].vllm_importance_sampling_correction is False
