"""A model's config.json as the estimator reads it: mixtures of experts counted whole (every expert resident,
the chosen ones for compute), architectures it cannot count refused by name, and absurd sizes refused with the
file, the key and the fix (exit 2), never a traceback or a plan."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from contract.errors import UsageError
from launcher.card.detect import GpuInfo
from launcher.memory.parts import weights_bytes
from profiles.catalog import CATALOGUE, from_config, resolve

REPO = Path(__file__).resolve().parents[3]

# Public config.json facts (the keys the estimator reads), with the published total and active parameters.
MIXTRAL_8X7B = {
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
}
QWEN3_30B_A3B = {
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_attention_heads": 32,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "vocab_size": 151936,
    "tie_word_embeddings": False,
}
# shared experts and a dense first block (first_k_dense_replace), without latent attention
GLM_45_AIR = {
    "model_type": "glm4_moe",
    "hidden_size": 4096,
    "num_hidden_layers": 46,
    "num_attention_heads": 96,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "n_routed_experts": 128,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 1,
    "vocab_size": 151552,
    "tie_word_embeddings": False,
}
# a shared expert of its own width
QWEN15_MOE = {
    "model_type": "qwen2_moe",
    "hidden_size": 2048,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "intermediate_size": 5632,
    "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632,
    "num_experts": 60,
    "num_experts_per_tok": 4,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
}
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "num_attention_heads": 128,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "vocab_size": 129280,
    "tie_word_embeddings": False,
}
LLAMA_1B = {
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_attention_heads": 32,
    "num_hidden_layers": 16,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": True,
}

CARD_24 = GpuInfo(
    name="24 GiB card",
    total_gib=24.0,
    free_gib=24.0,
    used_gib=0.0,
    compute_capability=(8, 9),
    driver=None,
    cuda_driver=None,
    index=0,
    source="what-if",
)


def folder_with(tmp_path: Path, config: dict, name: str = "model") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def train_py(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"},
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
