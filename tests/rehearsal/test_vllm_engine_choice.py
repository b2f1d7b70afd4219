"""Whether generation goes through vLLM is read from what was loaded, not from the profile."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from trainer.backends import engine_started


def test_fast_generate_alone_is_not_an_engine():
    # without vLLM Unsloth still sets fast_generate (a wrapper of generate that refuses vLLM arguments)
    assert not engine_started(SimpleNamespace(fast_generate=lambda *a, **k: None))
    assert engine_started(SimpleNamespace(vllm_engine=object(), fast_generate=lambda *a, **k: None))
    assert not engine_started(SimpleNamespace(vllm_engine=None))


def test_the_loaded_model_decides_the_generation_path():
    from profiles.load import load_profile
    from trainer.backends import Backend, generation_path

    repo = Path(__file__).resolve().parents[2]
    single = load_profile(repo / "profiles" / "gpu-16gb-llama3.2-3b.yaml")
    assert single.fast_inference
    unsloth = Backend("unsloth", "cuda")
    # the profile asked for vLLM, Unsloth turned it off (old card, GB10): transformers generates, not vLLM
    assert generation_path(single, unsloth, SimpleNamespace(fast_generate=print)) == "transformers"
    assert generation_path(single, unsloth, SimpleNamespace(vllm_engine=object())) == "unsloth-vllm"
    server = load_profile(repo / "profiles" / "multi-2x24gb-llama3.1-8b.yaml")
    assert generation_path(server, Backend("transformers", "cuda"), SimpleNamespace()) == "trl-vllm-server"
    assert (
        generation_path(
            server.replace(num_gpus=2, vllm_mode="colocate"), Backend("transformers", "cuda"), SimpleNamespace()
        )
        == "trl-vllm-colocate"
    )


def test_sample_answers_through_vllm_only_when_an_engine_started(tmp_path, monkeypatch):
    """`sample` decides as the training load does: a fast_inference profile whose load started no engine has
    its adapter's weights put into the model and answers with transformers. The card and Unsloth's GPU load
    are stood in for."""
    import peft
    import safetensors.torch

    from profiles.load import load_profile
    from trainer import backends, sample

    repo = Path(__file__).resolve().parents[2]
    profile = load_profile(repo / "profiles" / "gpu-16gb-llama3.2-3b.yaml")
    assert profile.fast_inference and profile.uses_lora
    loaded_into = []
    monkeypatch.setattr(backends, "open_backend", lambda p: backends.Backend("unsloth", "cuda"))
    monkeypatch.setattr(peft, "set_peft_model_state_dict", lambda model, weights: loaded_into.append(model))
    monkeypatch.setattr(safetensors.torch, "load_file", lambda path: {})
    no_engine = SimpleNamespace(fast_generate=print)
    monkeypatch.setattr(backends, "load_model", lambda backend, p, path: (no_engine, SimpleNamespace()))
    _, model, _, lora_path = sample.load_trained(profile, tmp_path, "base")
    assert lora_path is None and loaded_into == [no_engine]
    with_engine = SimpleNamespace(vllm_engine=object())
    monkeypatch.setattr(backends, "load_model", lambda backend, p, path: (with_engine, SimpleNamespace()))
    _, model, _, lora_path = sample.load_trained(profile, tmp_path, "base")
    assert lora_path == str(tmp_path) and loaded_into == [no_engine]  # vLLM takes the adapter as a LoRA request
