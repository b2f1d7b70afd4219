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
    assert generation_path(server.replace(num_gpus=2, vllm_mode="colocate"),
                           Backend("transformers", "cuda"), SimpleNamespace()) == "trl-vllm-colocate"
