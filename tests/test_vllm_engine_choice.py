"""Whether generation goes through vLLM is read from what was loaded, not from the profile."""

from __future__ import annotations

from types import SimpleNamespace

from trainer.backends import engine_started


def test_fast_generate_alone_is_not_an_engine():
    # without vLLM Unsloth still sets fast_generate (a wrapper of generate that refuses vLLM arguments)
    assert not engine_started(SimpleNamespace(fast_generate=lambda *a, **k: None))
    assert engine_started(SimpleNamespace(vllm_engine=object(), fast_generate=lambda *a, **k: None))
    assert not engine_started(SimpleNamespace(vllm_engine=None))

