"""Whether generation goes through vLLM is read from what was loaded, not from the profile."""

from __future__ import annotations

from types import SimpleNamespace

from launcher.catalog import resolve, vllm_refuses
from trainer.backends import engine_started


def test_fast_generate_alone_is_not_an_engine():
    # without vLLM Unsloth still sets fast_generate (a wrapper of generate that refuses vLLM arguments)
    assert not engine_started(SimpleNamespace(fast_generate=lambda *a, **k: None))
    assert engine_started(SimpleNamespace(vllm_engine=object(), fast_generate=lambda *a, **k: None))
    assert not engine_started(SimpleNamespace(vllm_engine=None))


def test_vllm_refuses_gemma3_only_without_bfloat16():
    gemma = resolve("unsloth/gemma-3-1b-it")
    assert "float16" in vllm_refuses(gemma, bf16=False)
    assert vllm_refuses(gemma, bf16=True) is None
    assert vllm_refuses(resolve("unsloth/Llama-3.2-3B-Instruct"), bf16=False) is None
