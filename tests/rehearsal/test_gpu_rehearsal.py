"""Every shipped single-GPU rung, loaded on a card it targets by the real Unsloth + vLLM code, up to the point
where vLLM would allocate (tests/support/gpu_rehearsal.py says what is stood in for and why).

The rehearsals run in an interpreter of their own with the vLLM side folder (`make vllm-side`: vLLM's Python
code, the bitsandbytes plugin, bitsandbytes) importable, and skip where the folder is absent. Cases that Unsloth
cannot tell apart at import (one compute capability, standby or not, the same packages) share one import, each
loading in a fork of it, once per test run however xdist spreads the tests. Each asserts the engine the rung
implies: 4-bit through bitsandbytes (the out-of-tree plugin), the dtype the card computes in, vLLM's share after
Unsloth's own adjustment, the context length, the LoRA slot and sleep mode.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

from launcher.memory.parts import unsloth_vllm_utilisation
from profiles.load import load_profile
from support.waiting import run_to_end
from trainer.backends import vllm_lora_rank

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "support"))
from test_vllm_glue import SIDE  # noqa: E402  (the one place that finds the side folder)

pytestmark = pytest.mark.skipif(
    not (SIDE / "vllm" / "__init__.py").is_file() or not (SIDE / "vllm_bnb_plugin" / "__init__.py").is_file(),
    reason=f"no vLLM side folder with vllm-bnb-plugin at {SIDE} (run `make vllm-side`)",
)

# Memory in use before Unsloth asks for free memory: the CUDA context and torch's workspace (GiB).
CONTEXT_GIB = 0.5

# A card each rung targets (its profile's header): name, total memory as the CUDA runtime reports it (GiB),
# compute capability. The 16 GB Gemma rung is rehearsed on a bf16 card: on a T4 the plan turns its vLLM off
# (vLLM refuses Gemma 3 in float16), so no engine would start.
RUNG_CARDS = {
    "gpu-8gb-qwen2.5-0.5b": ("NVIDIA GeForce RTX 3070", 7.66, (8, 6)),
    "gpu-8gb-qwen2.5-1.5b": ("NVIDIA GeForce RTX 4060", 7.63, (8, 9)),
    "gpu-12gb-llama3.2-3b": ("NVIDIA GeForce RTX 3060", 11.63, (8, 6)),
    "gpu-16gb-llama3.2-3b": ("Tesla T4", 14.57, (7, 5)),
    "gpu-16gb-gemma3-1b": ("NVIDIA GeForce RTX 4060 Ti", 15.6, (8, 9)),
    "gpu-24gb-llama3.1-8b": ("NVIDIA L4", 22.03, (8, 9)),
    "gpu-40gb-qwen2.5-14b": ("NVIDIA A100-SXM4-40GB", 39.39, (8, 0)),
    "gpu-80gb-qwen2.5-14b": ("NVIDIA H100 80GB HBM3", 79.19, (9, 0)),
}


# Two tiers of Unsloth's standby share (0.825 and 0.925 of a card), on cards of one compute capability: one import
STANDBY_CARDS = {
    "24gb": ("NVIDIA GeForce RTX 4090", 23.99, (8, 9)),
    "48gb": ("NVIDIA L40S", 44.4, (8, 9)),
}

# Every rehearsal the suite makes: id -> (rung, card, --set overrides, packages left out). "tools" is
# tests/rehearsal/test_tool_contracts.py's.
CASES: dict[str, tuple[str, tuple, tuple[str, ...], tuple[str, ...]]] = {
    **{rung: (rung, card, (), ()) for rung, card in RUNG_CARDS.items()},
    "without-bnb-plugin": ("gpu-12gb-llama3.2-3b", RUNG_CARDS["gpu-12gb-llama3.2-3b"], (), ("vllm_bnb_plugin",)),
    **{
        f"standby-{card_id}": ("gpu-24gb-llama3.1-8b", card, ("vllm_standby=true",), ())
        for card_id, card in STANDBY_CARDS.items()
    },
    "tools": (
        "gpu-8gb-qwen2.5-0.5b",
        RUNG_CARDS["gpu-8gb-qwen2.5-0.5b"],
        ("tools=[calculate]", "max_tool_calls=2"),
        (),
    ),
}


@functools.cache  # every test asks it of every case, to find its group
def import_group(case_id: str) -> tuple:
    """What Unsloth's import depends on in a case: the card's compute capability, standby, the packages."""
    rung, card, overrides, without = CASES[case_id]
    standby = load_profile(REPO / "profiles" / f"{rung}.yaml", list(overrides)).vllm_standby
    return card[2], standby, without


def single_gpu_rungs() -> list[str]:
    names = []
    for path in sorted((REPO / "profiles").glob("gpu-*.yaml")):
        profile = load_profile(path)
        if profile.device == "cuda" and profile.gpus_needed == 1 and profile.fast_inference:
            names.append(profile.name)
    return names


def rehearse_group(case_ids: list[str]) -> dict[str, dict]:
    """The cases' results, rehearsed in one interpreter: one import, a fork per case."""
    (without,) = {CASES[case_id][3] for case_id in case_ids}
    cases = []
    for case_id in case_ids:
        rung, (name, total, capability), overrides, _ = CASES[case_id]
        cases.append(
            {
                "profile": str(REPO / "profiles" / f"{rung}.yaml"),
                "total_gib": total,
                "capability": ".".join(map(str, capability)),
                "free_gib": total - CONTEXT_GIB,
                "name": name,
                "overrides": list(overrides),
            }
        )
    argv = [sys.executable, str(REPO / "tests" / "support" / "gpu_rehearsal.py"), "--cases", json.dumps(cases)]
    for module in without:
        argv += ["--without", module]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SIDE), str(REPO)])
    with tempfile.TemporaryDirectory() as scratch:  # Unsloth writes its compiled cache into the working folder
        done = run_to_end(argv, env=env, cwd=scratch)
    lines = [line for line in done.stdout.splitlines() if line.startswith('{"reached"')]
    assert done.returncode == 0 and len(lines) == len(case_ids), (
        f"rehearsal failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return dict(zip(case_ids, map(json.loads, lines)))


def rehearsed(tmp_path_factory, case_id: str) -> dict:
    """The case's result: the cases of its import group are rehearsed together, once per test run."""
    from support.once import once_per_run

    group = import_group(case_id)
    members = [other for other in CASES if import_group(other) == group]
    name = "rehearsal-" + hashlib.sha256(repr(group).encode()).hexdigest()[:12]
    _, results = once_per_run(tmp_path_factory, name, lambda _folder: rehearse_group(members))
    return results[case_id]


def expected_engine(profile, card: tuple) -> dict:
    _, total, capability = card
    return {
        "quantization": "bitsandbytes" if profile.load_in_4bit else None,
        "dtype": "bfloat16" if capability >= (8, 0) else "float16",
        "gpu_memory_utilization": unsloth_vllm_utilisation(
            profile.gpu_memory_utilization, total, total - CONTEXT_GIB, profile.vllm_standby
        ),
        "max_model_len": profile.max_seq_length,
        "max_lora_rank": vllm_lora_rank(profile.lora_rank),
        "enable_sleep_mode": profile.vllm_standby,
    }


def test_every_shipped_single_gpu_rung_has_a_card_to_rehearse_on():
    assert sorted(RUNG_CARDS) == sorted(single_gpu_rungs())


@pytest.mark.parametrize("rung", sorted(RUNG_CARDS))
def test_the_rung_reaches_vllm_with_the_engine_it_implies(rung, tmp_path_factory):
    card = RUNG_CARDS[rung]
    profile = load_profile(REPO / "profiles" / f"{rung}.yaml")
    result = rehearsed(tmp_path_factory, rung)
    assert result["reached"], result.get("error", "") + "\n" + result.get("traceback", "")
    engine = result["engine"]
    want = expected_engine(profile, card)
    assert engine["platform"] == "NvmlCudaPlatform"
    assert engine["enable_lora"] is True
    got = {key: engine[key] for key in want}
    assert got["gpu_memory_utilization"] == pytest.approx(want.pop("gpu_memory_utilization"), abs=1e-6)
    got.pop("gpu_memory_utilization")
    assert got == want
    if profile.load_in_4bit:
        assert engine["load_format"] == "bitsandbytes"
        assert engine["model"].rstrip("/").split("/")[-3].endswith("-unsloth-bnb-4bit")  # Unsloth's 4-bit repo


def test_without_the_bitsandbytes_plugin_a_4bit_rung_cannot_start_vllm(tmp_path_factory):
    # vLLM 0.28 moved bitsandbytes out of its tree; unsloth_zoo refuses 4-bit + fast_inference without the plugin
    result = rehearsed(tmp_path_factory, "without-bnb-plugin")
    assert not result["reached"]
    assert "vllm-bnb-plugin" in result["error"]


@pytest.mark.parametrize("card_id", sorted(STANDBY_CARDS))
def test_standby_share_is_unsloths(card_id, tmp_path_factory):
    # under UNSLOTH_VLLM_STANDBY, Unsloth replaces the profile's share with its own tier, both ways
    card = STANDBY_CARDS[card_id]
    rung = "gpu-24gb-llama3.1-8b"
    profile = load_profile(REPO / "profiles" / f"{rung}.yaml", ["vllm_standby=true"])
    result = rehearsed(tmp_path_factory, f"standby-{card_id}")
    assert result["reached"], result.get("error", "") + "\n" + result.get("traceback", "")
    engine = result["engine"]
    assert engine["enable_sleep_mode"] is True
    want = expected_engine(profile, card)["gpu_memory_utilization"]
    assert engine["gpu_memory_utilization"] == pytest.approx(want, abs=1e-6)
