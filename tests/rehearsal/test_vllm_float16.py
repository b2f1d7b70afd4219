"""Models vLLM refuses in float16 (Gemma 2/3, GLM-4) on cards without bfloat16 (compute capability < 8.0).

Below 8.0 Unsloth hands vLLM float16, and vLLM refuses these model types at start. The plan therefore runs such
a rung without vLLM (transformers generates), estimates it so, says so, and hands the attempt that profile; a
named what-if card (--gpu-name) gets its compute capability from its name, so a T4 plan shows it. Should the
refusal ever happen anyway, it reads as `unsupported` and the ladder goes on.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from contract import failure
from contract import oom as oom
from launcher.card.detect import detect_machine, known_capability
from launcher.plan.choose import make_plan
from launcher.plan.request import PlanRequest
from launcher.run.request import RunRequest
from launcher.run.supervise import supervise
from profiles.catalog import CATALOGUE, VLLM_FLOAT16_REFUSED, resolve, vllm_refuses
from profiles.load import load_profile
from support.cli import train_py

REPO = Path(__file__).resolve().parents[2]
GEMMA = REPO / "profiles" / "gpu-16gb-gemma3-1b.yaml"
FAKE_CHILD = [sys.executable, str(REPO / "tests" / "support" / "fake_child.py")]


@pytest.mark.parametrize(
    "name, capability",
    [
        ("Tesla T4", (7, 5)),
        ("Tesla V100-SXM2-16GB", (7, 0)),
        ("NVIDIA L4", (8, 9)),
        ("NVIDIA A10G", (8, 6)),
        ("NVIDIA A100-SXM4-80GB", (8, 0)),
        ("NVIDIA H100 80GB HBM3", (9, 0)),
        ("NVIDIA GeForce RTX 3090", (8, 6)),
        ("RTX 4090", (8, 9)),
        ("NVIDIA L40S", (8, 9)),
        ("NVIDIA RTX 6000 Ada Generation", (8, 9)),
        ("my lab card", None),
        (None, None),
    ],
)
def test_a_named_what_if_card_gets_its_compute_capability(name, capability):
    assert known_capability(name) == capability
    machine = detect_machine(what_if_gib=16, what_if_name=name)
    if capability is not None and capability < (7, 5):
        # the card table gives a V100 its capability, which the image cannot run (issue 30): refused as when NVML
        # reports one, the plan goes to the CPU ladder
        assert machine.primary is None and "compute capability 7.0" in machine.message
        return
    assert machine.primary.compute_capability == capability  # an unknown name stays unknown: bf16 assumed


def test_the_refused_families_are_in_the_catalogue():
    families = {arch.family for arch in CATALOGUE}
    assert {"gemma3", "gemma3_text"} <= families
    refused = [arch.name for arch in CATALOGUE if arch.family in VLLM_FLOAT16_REFUSED]
    assert refused and all(vllm_refuses(resolve(name), bf16=False) for name in refused)
    assert all(vllm_refuses(resolve(name), bf16=True) is None for name in refused)
    assert vllm_refuses(resolve("unsloth/Llama-3.2-3B-Instruct"), bf16=False) is None


def gemma_candidate(card_name: str, gib: float):
    plan = make_plan(PlanRequest([load_profile(GEMMA)], detect_machine(what_if_gib=gib, what_if_name=card_name)))
    return plan, plan.candidates[0]


def test_a_t4_plans_gemma3_without_vllm_and_estimates_it_so():
    plan, cand = gemma_candidate("Tesla T4", 15)
    assert cand.profile.fast_inference is False and cand.profile.vllm_standby is False
    assert cand.profile.source == str(GEMMA)  # still the shipped file, run as planned
    assert cand.fits and plan.chosen == cand.profile
    components = cand.estimate.components
    assert "generate_kv_cache" in components and "vllm_cache" not in components
    assert cand.estimate.vllm_share_gib is None
    assert cand.reason.startswith("vLLM off: vLLM refuses float16 for gemma3_text")
    assert any("no bfloat16" in note for note in plan.notes)


def test_an_l4_keeps_vllm_for_gemma3():
    plan, cand = gemma_candidate("NVIDIA L4", 22.5)
    assert cand.profile.fast_inference is True
    assert "vllm_cache" in cand.estimate.components and not cand.reason.startswith("vLLM off")
    # a card of unknown name: capability unknown, bf16 assumed, vLLM kept
    assert gemma_candidate("some 16 GiB card", 16)[1].profile.fast_inference is True


def test_a_vllm_server_for_a_refused_model_is_not_planned_below_8_0():
    server = load_profile(GEMMA).replace(
        vllm_mode="server", vllm_server_gpus=1, vllm_standby=False, gradient_checkpointing="true"
    )
    plan = make_plan(PlanRequest([server], detect_machine(what_if_gib=15, what_if_name="Tesla T4", what_if_count=2)))
    assert not plan.candidates[0].fits and "refuses float16" in plan.candidates[0].reason


def test_the_attempt_runs_the_profile_the_plan_chose(tmp_path, monkeypatch):
    # the supervisor writes the profile each attempt runs; on a T4 that is Gemma with fast_inference off
    plan, cand = gemma_candidate("Tesla T4", 15)
    monkeypatch.setenv("FAKE_CHILD_PLAN", json.dumps({cand.profile.name: {"do": "ok"}}))
    code = supervise(
        plan,
        RunRequest(tmp_path / "out"),
        child_command=FAKE_CHILD,
        console=Console(file=io.StringIO(), width=200),
    )
    assert code == 0
    written = next((tmp_path / "out").glob("run-*/attempt-01-*/profile.yaml"))
    assert yaml.safe_load(written.read_text())["fast_inference"] is False


def test_the_dry_run_shows_the_gemma_rung_without_vllm_on_a_t4_and_with_it_on_an_l4():
    def gemma(*card: str) -> dict:
        done = train_py("--auto", "--dry-run", "--json", "--ignore-ledger", *card)
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        return out, next(c for c in out["candidates"] if c["profile"] == "gpu-16gb-gemma3-1b")

    out, t4 = gemma("--gpu-memory", "15", "--gpu-name", "Tesla T4")
    assert out["gpu"]["compute_capability"] == "7.5"
    assert t4["vllm_mode"] is None and t4["reason"].startswith("vLLM off")
    assert "vllm_cache" not in t4["estimate"]["components"]
    _out, l4 = gemma("--gpu-memory", "22.5", "--gpu-name", "NVIDIA L4")
    assert l4["vllm_mode"] == "colocate" and "vllm_cache" in l4["estimate"]["components"]


def test_vllms_float16_refusal_reads_as_unsupported():
    text = (REPO / "tests" / "data" / "oom" / "vllm_float16_refused.txt").read_text()
    assert failure.classify_failure(text, 1) == "unsupported"
    assert "does not support float16" in failure.read_unsupported(text)
