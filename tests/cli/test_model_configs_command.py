"""Odd model configs met on the command line: plan and fit refuse them by file, key and fix (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.card.detect import GpuInfo
from launcher.memory.estimate import GIB, estimate
from launcher.memory.parts import weights_bytes
from profiles.catalog import from_config
from profiles.load import load_profile

REPO = Path(__file__).resolve().parents[2]

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


def test_mixtral_weights_are_every_expert_and_nothing_fits_a_24_gib_card_in_16_bit(tmp_path):
    arch = from_config(MIXTRAL_8X7B, "mixtral", "config.json")
    assert weights_bytes(arch, load_in_4bit=False) / GIB == pytest.approx(46.7e9 * 2 / GIB, rel=0.01)  # ~87 GiB
    done = train_py(
        "fit", str(folder_with(tmp_path, MIXTRAL_8X7B)), "--gpu-memory", "24", "--set", "load_in_4bit=false", "--json"
    )
    assert done.returncode == 3, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["profile"] is None and result["ambition"]["need_gib"] > 87


def test_qwen3_moe_does_not_fit_in_16_gib_and_its_estimate_holds_every_expert(tmp_path):
    arch = from_config(QWEN3_30B_A3B, "qwen3-moe", "config.json")
    profile = load_profile(REPO / "profiles" / "gpu-24gb-llama3.1-8b.yaml").model_copy(update={"model": "x"})
    est = estimate(profile, arch, CARD_24)
    assert est.components["weights"] > 15.5  # 4-bit: 30.5B x ~0.56 bytes, not 3B
    assert "expert_dequant" in est.components  # Unsloth dequantises one block's experts at a time
    assert any("128 experts" in note for note in est.notes)
    done = train_py("fit", str(folder_with(tmp_path, QWEN3_30B_A3B)), "--gpu-memory", "16", "--json")
    assert done.returncode == 3, done.stderr[-2000:]
    assert json.loads(done.stdout)["profile"] is None


@pytest.mark.parametrize(
    "change, key",
    [
        ({}, "kv_lora_rank"),  # DeepSeek-V3: latent attention
        ({"kv_lora_rank": None, "q_lora_rank": None, "layer_types": ["linear_attention"] * 61}, "layer_types"),
        ({"kv_lora_rank": None, "q_lora_rank": None, "ssm_state_size": 128}, "ssm_state_size"),
        ({"kv_lora_rank": None, "q_lora_rank": None, "num_experts_per_tok": None}, "n_routed_experts"),
    ],
    ids=["latent-attention", "linear-attention", "state-space", "experts-without-top-k"],
)
def test_an_architecture_the_estimator_cannot_count_is_refused_by_name(tmp_path, change, key):
    config = {k: v for k, v in {**DEEPSEEK_V3, **change}.items() if v is not None}
    done = train_py("fit", str(folder_with(tmp_path, config)), "--gpu-memory", "24")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"'{key}'" in done.stderr and "fix:" in done.stderr and "Traceback" not in done.stderr


def test_absurd_sizes_end_in_exit_2_on_the_command_line(tmp_path):
    for number, change in enumerate(
        (
            {"num_attention_heads": 0},
            {"hidden_size": True},
            {"num_hidden_layers": float("inf")},
            {"num_hidden_layers": 10**30},
        )
    ):
        done = train_py("fit", str(folder_with(tmp_path, {**LLAMA_1B, **change}, f"m{number}")), "--gpu-memory", "16")
        assert done.returncode == 2, done.stderr[-2000:]
        assert "Traceback" not in done.stderr and "fix:" in done.stderr
