"""A model's config.json as the estimator reads it: mixtures of experts counted whole (every expert resident,
the chosen ones for compute), architectures it cannot count refused by name, and absurd sizes refused with the
file, the key and the fix (exit 2), never a traceback or a plan."""

from __future__ import annotations

import pytest

from contract.errors import UsageError
from launcher.memory.parts import weights_bytes
from profiles.catalog import CATALOGUE, from_config, resolve
from support.model_configs import (
    GLM_45_AIR,
    LLAMA_1B,
    MIXTRAL_8X7B,
    QWEN3_30B_A3B,
    QWEN15_MOE,
    folder_with,
)

# ---------------------------------------------------------------------------------------------------
# Mixtures of experts


@pytest.mark.parametrize(
    "config, total, active",
    [
        (MIXTRAL_8X7B, 46.7e9, 12.9e9),
        (QWEN3_30B_A3B, 30.5e9, 3.3e9),
        (QWEN15_MOE, 14.3e9, 2.7e9),
        # GLM-4.5-Air publishes 106B total, 12B active without its embeddings and head (2 x 0.62B)
        (GLM_45_AIR, 106e9, 12e9 + 2 * 151552 * 4096),
    ],
    ids=["mixtral-8x7b", "qwen3-30b-a3b", "qwen1.5-moe-a2.7b", "glm-4.5-air"],
)
def test_every_expert_is_counted_and_the_chosen_ones_are_the_active_parameters(config, total, active):
    arch = from_config(config, "m", "config.json")
    assert arch.is_moe
    assert arch.computed_params == pytest.approx(total, rel=0.015)
    assert arch.params == arch.computed_params
    assert arch.active_params == pytest.approx(active, rel=0.03)


def test_dense_layers_and_shared_experts_follow_the_config():
    glm = from_config(GLM_45_AIR, "m", "config.json")
    assert (glm.moe_layers, glm.dense_layers) == (45, 1)  # first_k_dense_replace: 1
    assert glm.shared_intermediate == 1408 and glm.ffn_width == 8 * 1408 + 1408
    qwen = from_config({**QWEN3_30B_A3B, "mlp_only_layers": [0, 1], "decoder_sparse_step": 2}, "m", "config.json")
    assert qwen.moe_layers == len([i for i in range(48) if i not in (0, 1) and (i + 1) % 2 == 0])
    assert from_config(QWEN15_MOE, "m", "config.json").shared_intermediate == 5632


def test_catalogue_models_are_dense_and_unchanged():
    for arch in CATALOGUE:
        assert not arch.is_moe and arch.active_params == arch.computed_params and arch.ffn_width == arch.intermediate


def test_plain_trl_keeps_the_experts_16_bit_under_4_bit_loading():
    arch = from_config(QWEN3_30B_A3B, "qwen3-moe", "config.json")
    unsloth = weights_bytes(arch, True)
    plain = weights_bytes(arch, True, experts_quantised=False)
    assert plain - unsloth == pytest.approx(arch.expert_params * (2 - 0.5625))


def test_lora_on_the_mlp_names_adapts_every_expert():
    arch = from_config(QWEN3_30B_A3B, "qwen3-moe", "config.json")
    attention_only = arch.lora_params(16, ["q_proj", "k_proj", "v_proj", "o_proj"])
    every = arch.lora_params(16, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    assert every - attention_only == 48 * 128 * 3 * 16 * (2048 + 768)


# ---------------------------------------------------------------------------------------------------
# Absurd sizes


@pytest.mark.parametrize(
    "change, key",
    [
        ({"num_attention_heads": 0}, "num_attention_heads"),
        ({"hidden_size": 0}, "hidden_size"),
        ({"hidden_size": True}, "hidden_size"),
        ({"num_hidden_layers": float("inf")}, "num_hidden_layers"),
        ({"vocab_size": float("nan")}, "vocab_size"),
        ({"num_hidden_layers": -4}, "num_hidden_layers"),
        ({"num_key_value_heads": -8}, "num_key_value_heads"),
        ({"num_key_value_heads": 7}, "num_key_value_heads"),
        ({"num_hidden_layers": 10**30}, "num_hidden_layers"),
        ({"intermediate_size": "8192"}, "intermediate_size"),
        ({"intermediate_size": 8192.5}, "intermediate_size"),
        ({"tie_word_embeddings": "false"}, "tie_word_embeddings"),
        ({"num_local_experts": 8, "num_experts_per_tok": 9}, "num_experts_per_tok"),
        ({"num_local_experts": 8, "num_experts_per_tok": 2, "mlp_only_layers": "all"}, "mlp_only_layers"),
    ],
)
def test_an_absurd_size_is_refused_naming_the_file_and_key(tmp_path, change, key):
    config_file = folder_with(tmp_path, {**LLAMA_1B, **change}) / "config.json"
    with pytest.raises(UsageError) as refused:
        resolve(str(config_file.parent))
    text = str(refused.value)
    assert str(config_file) in text and f"'{key}'" in text and "fix:" in text


def test_a_whole_float_size_is_read_as_the_number():
    assert from_config({**LLAMA_1B, "hidden_size": 2048.0}, "m", "config.json").hidden == 2048


def test_a_config_that_is_not_an_object_or_nests_too_deep_is_refused(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("[" * 100000 + "]" * 100000, encoding="utf-8")
    with pytest.raises(UsageError, match="config.json"):
        resolve(str(folder))
    (folder / "config.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(UsageError, match="not a JSON object"):
        resolve(str(folder))
