"""A reward that is a model (`model:NAME`) is planned for: its weights and the activations of one scoring batch
are in the memory estimate, its forward over the step's completions in the step time, and a model whose size is
not known here is refused with the fix."""

from __future__ import annotations

import json

from commands import main
from launcher.memory.parts import GIB, REWARD_SCORE_BATCH, reward_model_gib
from profiles.catalog import resolve
from support.cli import REPO
from support.model_configs import folder_with

# Skywork-Reward-Llama-3.1-8B-v0.2's config.json (a Llama 3.1 8B with a one-label score head); its published
# bf16 safetensors hold 7.5 billion parameters, about 15.0 GB (13.97 GiB)
SKYWORK_RM = {
    "architectures": ["LlamaForSequenceClassification"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "num_labels": 1,
}
H100 = ["--gpu-name", "NVIDIA H100 80GB HBM3", "--gpu-memory", "79.6"]
PROFILE = str(REPO / "profiles" / "gpu-80gb-qwen2.5-14b.yaml")


def _plan(capsys, *extra) -> dict:
    main(["plan", "--json", "--ignore-ledger", "--profile", PROFILE, *H100, *extra])
    return json.loads(capsys.readouterr().out)["candidates"][0]


def test_the_weights_of_a_published_reward_model(tmp_path):
    arch = resolve(str(folder_with(tmp_path, SKYWORK_RM, "rm")))
    weights, activations = reward_model_gib(arch, 64, 1024, 2)
    assert abs(weights - 15.0e9 / GIB) / (15.0e9 / GIB) < 0.02
    # one batch in flight: the residual stream, attention output and the FFN's two intermediates
    assert activations == REWARD_SCORE_BATCH * 1024 * (3 * 4096 + 2 * 14336) * 2 / GIB
    assert reward_model_gib(arch, 4, 1024, 2)[1] == activations / 4  # fewer completions than a batch


def test_a_reward_model_is_in_the_plans_memory_and_step(tmp_path, capsys):
    folder = folder_with(tmp_path, SKYWORK_RM, "rm")
    plain = _plan(capsys)
    scored = _plan(capsys, "--set", f'rewards={{accuracy: 2.0, "model:{folder}": 0.5}}')
    assert scored["fits"] and "reward_model" not in plain["estimate"]["components"]
    assert scored["estimate"]["components"]["reward_model"] > 14.0
    assert any(note.startswith(f"reward model {folder}: weights") for note in scored["estimate"]["notes"])
    assert scored["speed"]["fixed_s"] > plain["speed"]["fixed_s"]


def test_a_reward_model_of_unknown_size_is_refused_with_the_fix(capsys):
    refused = _plan(capsys, "--set", 'rewards={accuracy: 2.0, "model:someorg/not-here-rm": 0.5}')
    assert not refused["fits"]
    assert refused["reason"].startswith("reward model someorg/not-here-rm: its size is not known here")
    assert "fix: give a folder holding its config.json" in refused["reason"]
