"""`fit --gpus N` searches only the topologies that can be the best (O(log N) fits): the same answer as the
whole search wherever that one is affordable, and a handful of fits for 4,096 GPUs instead of minutes."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.card.detect import detect_machine
from launcher.plan import derive
from launcher.plan.levers import quality_key
from profiles.load import load_profiles

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def rung():
    return next(r for r in load_profiles(REPO / "profiles", [], device="cuda") if r.name == "gpu-24gb-llama3.1-8b")


def shape(found):
    p = found.profile if found is not None else None
    return None if p is None else (p.num_gpus, p.vllm_mode, p.vllm_server_gpus, p.vllm_tensor_parallel, quality_key(p))


# colocated data parallel wins; a vLLM server wins (tp 2, tp 4); one GPU wins over two
@pytest.mark.parametrize(
    "model, gib", [("Qwen/Qwen2.5-7B-Instruct", 24), ("Qwen/Qwen2.5-14B-Instruct", 16), ("microsoft/phi-4", 12)]
)
@pytest.mark.parametrize("gpus", [2, 3, 5, 8])
def test_the_pruned_search_finds_what_the_whole_search_finds(rung, monkeypatch, model, gib, gpus):
    machine = detect_machine(what_if_gib=gib, what_if_count=gpus)
    pruned = derive.fit_gpus(rung, model, machine)
    monkeypatch.setattr(derive, "candidate_topologies", derive.topologies)
    assert shape(pruned) == shape(derive.fit_gpus(rung, model, machine))


def test_4096_gpus_take_a_handful_of_fits(rung, monkeypatch):
    calls = []
    real_fit = derive.fit

    def counting_fit(*args, **kwargs):
        calls.append(kwargs.get("topology"))
        return real_fit(*args, **kwargs)

    monkeypatch.setattr(derive, "fit", counting_fit)
    found = derive.fit_gpus(rung, "Qwen/Qwen2.5-7B-Instruct", detect_machine(what_if_gib=24, what_if_count=4096))
    assert len(calls) <= 2 + 12  # N and 1 data parallel, a server of each power of two below 4096
    # every GPU used: training GPUs, and a vLLM server's where the objective prefers one
    assert found is not None and found.profile.gpus_needed == 4096
