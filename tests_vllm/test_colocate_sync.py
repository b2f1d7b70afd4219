"""TRL's colocate path against the real engine: GRPO steps that generate through vLLM, with the project's
profile, config builder, backend and rewards; the weights the engine holds must follow training."""

from __future__ import annotations

import pytest

# bfloat16 (the engine's dtype on CPU) keeps 8 bits of mantissa: a weight of ~0.1 is held to ~4e-4. The
# weights move by about 0.02 over the steps, 50 times that.
HELD_TO = 2e-3
MOVED_AT_LEAST = 1e-2


@pytest.fixture(scope="module", params=["full", "lora"])
def colocate(request, run_scenario):
    flags = ("--lora",) if request.param == "lora" else ()
    return run_scenario("colocate", "sampling", *flags)


def test_the_run_generates_through_the_colocated_engine(colocate):
    result = colocate.result
    assert result["use_vllm"] is True and result["generation_mode"] == "colocate"
    assert result["steps"] == 3
    # every reward of the profile reached TRL and was logged
    for name in ("xml_count", "xml_soft", "number", "accuracy"):
        assert f"rewards/{name}/mean" in result["rewards_logged"]
    # groups that score differently: the steps had something to learn from, so the weights moved
    assert max(result["reward_std"]) > 0


def test_the_engine_starts_with_the_models_weights(colocate):
    result = colocate.result
    # the fused projections and the embedding are among those compared (vLLM's own names)
    compared = set(result["compared"])
    assert {
        "model.embed_tokens.weight",
        "model.layers.0.self_attn.qkv_proj.weight",
        "model.layers.1.mlp.gate_up_proj.weight",
        "model.layers.1.mlp.down_proj.weight",
    } <= compared
    assert result["engine_start_vs_initial"] <= HELD_TO


def test_the_engines_weights_follow_training(colocate):
    result = colocate.result
    # training moved the policy, and the engine holds the policy of the last sync, not the initial weights
    assert result["trained_moved"] >= MOVED_AT_LEAST
    assert result["engine_end_vs_initial"] >= MOVED_AT_LEAST, "the engine still holds the initial weights"
    assert result["engine_end_vs_synced"] <= HELD_TO, (
        f"the engine's weights differ from the policy after step {result['synced_step']} by "
        f"{result['engine_end_vs_synced']}"
    )
