"""A card the card table does not know (`plan --gpu-memory N`, or an NVML name it does not list) gets the rung a
known card of its memory gets: its steps are timed at the default card's speed, which errs long on purpose, and
the 0.2-epoch rule never judges a run timed at it (it judges the run of the fastest known card of that memory)."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from commands import main
from launcher.card.detect import MIN_CAPABILITY, detect_machine
from launcher.card.facts import DEFAULT, card_facts, cards_like
from launcher.plan.choose import make_plan
from launcher.plan.duration import RunLength, too_short
from launcher.plan.request import PlanRequest
from launcher.plan.stages.run_length import _coverage_run
from profiles.load import load_profiles
from support.fake_nvml import FakeNvml

PROFILES = Path(__file__).resolve().parents[3] / "profiles"
GIB = 1024**3


def planned(machine):
    rungs = [p for p in load_profiles(PROFILES) if p.device == "cuda"]
    return make_plan(PlanRequest(rungs, machine))


# `plan --gpu-memory N`: the rung the fastest known card of about N GiB gets (as `cards` lists them: the RTX
# 4090 the 14B of the 40 GB rung, the A100 40GB the 80 GB rung's), not the 1.5B every N got before
EXPECTED = {
    8: "gpu-16gb-llama3.2-3b",
    12: "gpu-16gb-llama3.2-3b",
    16: "gpu-24gb-llama3.1-8b",
    24: "gpu-40gb-qwen2.5-14b",
    40: "gpu-80gb-qwen2.5-14b",
    80: "gpu-80gb-qwen2.5-14b",
    141: "gpu-80gb-qwen2.5-14b",
}


@pytest.mark.parametrize("gib", sorted(EXPECTED))
def test_a_card_named_by_its_memory_alone_gets_the_rung_of_its_class(gib):
    plan = planned(detect_machine(what_if_gib=float(gib)))
    assert plan.chosen is not None and plan.chosen.name == EXPECTED[gib], [
        (c.profile.name, c.fits, c.reason[:90]) for c in plan.candidates
    ]


def test_a_20_gib_card_gets_the_8b_rung_and_says_how_it_was_judged(capsys):
    assert main(["plan", "--gpu-memory", "20", "--ignore-ledger", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["chosen"] == "gpu-24gb-llama3.1-8b"
    chosen = next(c for c in out["candidates"] if c["profile"] == out["chosen"])
    assert chosen["speed"]["card_known"] is False  # still timed at the default speed: the run errs long
    assert chosen["run"]["hours"] <= 4.0 + 1e-9
    note = next(n for n in out["notes"] if "not in the card table" in n)
    assert "NVIDIA A10" in note and "errs long" in note
    # a rung that even the fastest 20 GiB card would run for too few updates is still passed over
    fourteen = next(c for c in out["candidates"] if c["profile"] == "gpu-40gb-qwen2.5-14b")
    assert not fourteen["fits"] and "even timed as the fastest card" in fourteen["reason"]


def test_an_nvml_name_the_table_does_not_list_is_planned_like_a_card_of_its_memory():
    card = {"name": "NVIDIA Quantum X9000", "uuid": "GPU-9", "total": 24 * GIB, "free": 24 * GIB, "cc": (9, 0)}
    machine = detect_machine(nvml=FakeNvml([card]))
    assert card_facts(machine.primary.name, 24.0) is None
    plan = planned(machine)
    assert plan.chosen.name == "gpu-40gb-qwen2.5-14b"


def test_known_cards_are_judged_at_their_own_speed():
    # the L4's own plan: the 14B rung passed over on the L4's speed, no word of another card
    plan = planned(detect_machine(what_if_gib=22.5, what_if_name="NVIDIA L4"))
    verdicts = {c.profile.name: c.reason for c in plan.candidates}
    assert verdicts["gpu-40gb-qwen2.5-14b"].startswith("derived for this card its run has")
    assert "even timed as" not in verdicts["gpu-40gb-qwen2.5-14b"]
    assert plan.chosen.name == "gpu-16gb-llama3.2-3b"
    assert not any("not in the card table" in note for note in plan.notes)


@pytest.mark.parametrize("gib", [60.0, 300.0, 4096.0])
def test_a_memory_no_known_card_has_is_not_judged_and_the_plan_says_so(gib):
    assert cards_like(gib, MIN_CAPABILITY) == ()
    plan = planned(detect_machine(what_if_gib=gib))
    assert plan.chosen.name == "gpu-80gb-qwen2.5-14b"
    assert any("the table knows no card of about" in note for note in plan.notes)


def test_a_tiny_card_plans_nothing_without_an_error():
    plan = planned(detect_machine(what_if_gib=0.1))
    assert plan.chosen is None


def test_the_class_of_a_memory_holds_only_cards_the_image_runs():
    like = cards_like(16.0, MIN_CAPABILITY)
    assert "Tesla T4" in {c.name for c in like}
    assert all(c.capability >= MIN_CAPABILITY for c in like)  # not the V100 or the P100
    assert cards_like(None) == () and cards_like(0.0) == () and cards_like(-3.0) == ()


def test_a_measured_step_is_the_cards_own_speed_and_is_judged():
    run = RunLength(steps=10, prompts=80, epochs=0.01, hours=4.0, basis="default: 4 h")
    # timed at the default speed, nothing measured: judged at another speed (here no known card of 1 TiB)
    guessed = SimpleNamespace(speed=SimpleNamespace(card_known=False, measured_s=None), run=run, estimate=None)
    planning = SimpleNamespace(gpu=SimpleNamespace(total_gib=1024.0))
    assert _coverage_run(guessed, planning) == (None, None)
    # measured on this machine: the run's own, judged as it is
    measured = SimpleNamespace(speed=SimpleNamespace(card_known=False, measured_s=5.0), run=run, estimate=None)
    assert _coverage_run(measured, planning) == (run, None)
    assert too_short(run, 100) is not None and too_short(run, 10) is None and too_short(run, 0) is None
    assert DEFAULT.known is False
