"""Odd model configs met on the command line: plan and fit refuse them by file, key and fix (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.memory.estimate import GIB, estimate
from launcher.memory.parts import weights_bytes
from profiles.catalog import from_config
from profiles.load import load_profile
from support import cli
from support.model_configs import (
    CARD_24,
    DEEPSEEK_V3,
    LLAMA_1B,
    MIXTRAL_8X7B,
    QWEN3_30B_A3B,
    folder_with,
)

REPO = Path(__file__).resolve().parents[2]


def train_py(*args: str):
    return cli.train_py(*args, HF_HUB_OFFLINE="1")


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
