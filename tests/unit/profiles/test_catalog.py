"""profiles.catalog: architecture facts, name resolution, config.json from a folder or the HF cache; offline."""

import json

import pytest

from contract.errors import UsageError
from profiles import catalog
from profiles.catalog import CATALOGUE, TINY, resolve

# models.md's published parameter counts
PUBLISHED = {
    "google/gemma-3-1b-it": 1.00e9,
    "google/gemma-3-4b-it": 3.88e9,
    "meta-llama/Llama-3.2-1B-Instruct": 1.24e9,
    "meta-llama/Llama-3.2-3B-Instruct": 3.21e9,
    "meta-llama/Llama-3.1-8B-Instruct": 8.03e9,
    "Qwen/Qwen2.5-0.5B-Instruct": 0.49e9,
    "Qwen/Qwen2.5-1.5B-Instruct": 1.54e9,
    "Qwen/Qwen2.5-3B-Instruct": 3.09e9,
    "Qwen/Qwen2.5-7B-Instruct": 7.62e9,
    "Qwen/Qwen2.5-14B-Instruct": 14.7e9,
    "Qwen/Qwen3-0.6B": 0.60e9,
    "Qwen/Qwen3-1.7B": 1.72e9,
    "Qwen/Qwen3-4B": 4.02e9,
    "Qwen/Qwen3-8B": 8.19e9,
    "Qwen/Qwen3-14B": 14.8e9,
    "mistralai/Mistral-7B-Instruct-v0.3": 7.25e9,
    "microsoft/phi-4": 14.7e9,
}


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    """Never the network: offline flag set, an empty HF cache, and the hub call replaced by a failure."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))

    def no_network(model):
        raise AssertionError(f"the hub was asked for {model}")

    monkeypatch.setattr(catalog, "_hub_config", no_network)


def test_catalogue_holds_every_model_of_models_md():
    assert sorted(a.name for a in CATALOGUE) == sorted(PUBLISHED)


@pytest.mark.parametrize("arch", CATALOGUE, ids=lambda a: a.name)
def test_parameter_count_from_the_shape_matches_the_published_one(arch):
    # 1%: published counts are rounded to 2-3 digits (0.49B) and leave out biases (Qwen2's q/k/v biases)
    assert arch.computed_params == pytest.approx(PUBLISHED[arch.name], rel=0.01)
    assert arch.params == int(PUBLISHED[arch.name])


@pytest.mark.parametrize(
    "spelling",
    [
        "unsloth/Llama-3.2-3B-Instruct",
        "meta-llama/Llama-3.2-3B-Instruct",
        "UNSLOTH/llama-3.2-3b-instruct",
        "unsloth/Llama-3.2-3B-Instruct-bnb-4bit",
        "unsloth/Llama-3.2-3B-Instruct-unsloth-bnb-4bit",
        "Llama-3.2-3B-Instruct",
    ],
)
def test_hub_id_resolves_whatever_its_case_prefix_or_4bit_suffix(spelling):
    arch = resolve(spelling)
    assert arch.name == "meta-llama/Llama-3.2-3B-Instruct"
    assert (
        arch.hidden,
        arch.layers,
        arch.heads,
        arch.kv_heads,
        arch.head_dim,
        arch.intermediate,
        arch.vocab,
        arch.tied_embeddings,
    ) == (3072, 28, 24, 8, 128, 8192, 128256, True)


def test_unsloth_meta_llama_spelling_is_llama_3_1_8b():
    arch = resolve("unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit")
    assert arch.name == "meta-llama/Llama-3.1-8B-Instruct"
    assert arch.tied_embeddings is False


def test_gemma_3_1b_facts():
    arch = resolve("unsloth/gemma-3-1b-it")
    assert (
        arch.hidden,
        arch.layers,
        arch.heads,
        arch.kv_heads,
        arch.head_dim,
        arch.intermediate,
        arch.vocab,
        arch.tied_embeddings,
    ) == (1152, 26, 4, 1, 256, 6912, 262144, True)
    assert arch.q_dim == 1024 and arch.kv_dim == 256


def test_tiny_is_the_offline_cpu_model():
    assert resolve("tiny") is TINY and resolve("TINY") is TINY
    assert (
        TINY.hidden,
        TINY.layers,
        TINY.heads,
        TINY.kv_heads,
        TINY.head_dim,
        TINY.intermediate,
        TINY.vocab,
        TINY.tied_embeddings,
    ) == (64, 2, 4, 2, 16, 256, 512, True)
    # 512x64 embeddings + 2 x (64x64 + 2x64x32 + 64x64 + 3x64x256) + norms
    assert TINY.params == 512 * 64 + 2 * (4096 + 4096 + 4096 + 49152) + 2 * 2 * 64 + 64


def test_hand_computed_kv_cache_and_lora_sizes():
    llama8 = resolve("meta-llama/Llama-3.1-8B-Instruct")
    assert llama8.kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2 == 128 * 1024  # 128 KiB/token (memory.md)
    llama3 = resolve("meta-llama/Llama-3.2-3B-Instruct")
    # r x (in + out) per matrix: q 3072+3072, k/v 3072+1024, o 3072+3072, gate/up 3072+8192, down 8192+3072
    per_layer = 16 * ((6144) + 2 * 4096 + 6144 + 2 * 11264 + 11264)
    assert (
        llama3.lora_params(16, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
        == 28 * per_layer
    )
    assert llama3.lora_params(16, ["q_proj", "v_proj", "lm_head"]) == 28 * 16 * (6144 + 4096)


def _config(**extra):
    config = {
        "model_type": "llama",
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 1024,
        "vocab_size": 1000,
        "tie_word_embeddings": False,
    }
    config.update(extra)
    return config


def test_local_folder_config_is_read(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(_config()))
    arch = resolve(str(tmp_path))
    assert (
        arch.hidden,
        arch.layers,
        arch.heads,
        arch.kv_heads,
        arch.head_dim,
        arch.intermediate,
        arch.vocab,
        arch.tied_embeddings,
        arch.family,
    ) == (256, 4, 8, 2, 32, 1024, 1000, False, "llama")
    assert arch.params == arch.computed_params and arch.source.endswith("config.json")


def test_multimodal_config_uses_its_text_part(tmp_path):
    text = _config(model_type="gemma3_text", head_dim=64)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma3", "text_config": text}))
    arch = resolve(str(tmp_path))
    assert (arch.hidden, arch.head_dim, arch.family) == (256, 64, "gemma3_text")


def test_hf_cache_config_is_found_case_insensitively(tmp_path, monkeypatch):
    cache = tmp_path / "hf-cache"
    repo = cache / "models--SomeOrg--Tiny-Model"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text(json.dumps(_config(hidden_size=512)))
    arch = resolve("someorg/tiny-model")
    assert arch.hidden == 512 and arch.name == "someorg/tiny-model"


def test_unknown_model_names_what_was_tried():
    with pytest.raises(UsageError) as info:
        resolve("nobody/not-a-model")
    text = str(info.value)
    assert "'nobody/not-a-model': unknown architecture" in text
    assert "the catalogue of 17 models as 'not-a-model'" in text
    assert "the Hugging Face cache" in text
    assert "the hub (skipped: offline)" in text
    assert info.value.exit_code == 2


def test_hub_is_asked_only_when_allowed(monkeypatch):
    calls = []
    monkeypatch.setattr(catalog, "_hub_config", lambda model: calls.append(model) or _config(hidden_size=128))
    assert resolve("someorg/online-model", allow_hub=True).hidden == 128
    assert calls == ["someorg/online-model"]
    with pytest.raises(UsageError):
        resolve("someorg/online-model")  # HF_HUB_OFFLINE=1 from the fixture
    assert calls == ["someorg/online-model"]


def test_config_without_needed_keys_is_a_usage_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(UsageError, match="config.json lacks 'hidden_size'"):
        resolve(str(tmp_path))


def test_unknown_model_in_a_profile_exits_2(tmp_path, capsys):
    import train

    path = tmp_path / "p.yaml"
    path.write_text("model: nobody/not-a-model\ndataset: arithmetic\n")
    assert train.main(["--profile", str(path), "--dry-run", "--gpu-memory", "24"]) == 2
    assert "error: model 'nobody/not-a-model': unknown architecture" in capsys.readouterr().err
