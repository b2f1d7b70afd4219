"""The `fit` command as a user types it: the printed profile loads back, pins, refusals and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contract import oom as oom
from profiles.load import load_profile
from profiles.schema import profile_from_dict
from support.cli import train_py

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "profiles"


def notebook(settings: dict):
    return profile_from_dict({"dataset": "gsm8k", **settings}, "<notebook>")


def test_fit_prints_a_profile_that_loads(tmp_path):
    done = train_py("--fit", "--set", "model=Qwen/Qwen3-4B", "--gpu-memory", "15", "--gpu-name", "Tesla T4")
    assert done.returncode == 0, done.stderr
    assert "# predicted: " in done.stdout and "prompts per hour" in done.stdout
    assert "# prompts per step limited by" in done.stdout and "# completion cap: gsm8k" in done.stdout
    assert "# the ambition at one prompt a step needs" in done.stdout
    path = tmp_path / "fit.yaml"
    path.write_text(done.stdout)
    profile = load_profile(path)
    assert profile.model == "Qwen/Qwen3-4B" and profile.name.startswith("fit-qwen3-4b-")
    planned = train_py("--profile", str(path), "--dry-run", "--json", "--gpu-memory", "15", "--gpu-name", "Tesla T4")
    plan = json.loads(planned.stdout)
    assert plan["chosen"] == profile.name and plan["candidates"][0]["fits"]


def test_fit_refusals_and_nothing_fits(tmp_path):
    no_model = train_py("--fit", "--gpu-memory", "24")
    assert no_model.returncode == 2 and "--set model=" in no_model.stderr
    both = train_py("--fit", "--auto", "--set", "model=Qwen/Qwen3-4B", "--gpu-memory", "24")
    assert both.returncode == 2
    none = train_py("--fit", "--set", "model=Qwen/Qwen3-14B", "--gpu-memory", "8")
    assert none.returncode == 3 and "nothing fits" in none.stderr and "a card of" in none.stderr
    as_json = train_py("--fit", "--json", "--set", "model=Qwen/Qwen3-4B", "--gpu-memory", "24")
    data = json.loads(as_json.stdout)
    assert data["settings"]["model"] == "Qwen/Qwen3-4B" and data["need_gib"] <= data["usable_gib"]


def test_auto_with_a_model_plans_derived_configurations_with_settings(tmp_path):
    done = train_py(
        "--auto",
        "--dry-run",
        "--json",
        "--set",
        "model=microsoft/phi-4",
        "--gpu-memory",
        "15",
        "--gpu-name",
        "Tesla T4",
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["chosen"].startswith("fit-phi-4-")
    chosen = next(c for c in plan["candidates"] if c["profile"] == plan["chosen"])
    settings = chosen["settings"]
    assert settings["model"] == "microsoft/phi-4" and settings["load_in_4bit"] is True
    assert settings["effective_batch"] % settings["num_generations"] == 0
    assert any("fit solver" in note for note in plan["notes"])
    assert all(c["settings"]["model"] == "microsoft/phi-4" for c in plan["candidates"])


def test_auto_with_gpus_chooses_the_spread_configuration(tmp_path):
    # a 14B on two 24 GB cards: over both it learns more per hour than one card in 4-bit (an 8B on the same pair
    # does not: one card in 4-bit on Unsloth's path outpaces two on plain TRL, and the plan keeps that one)
    done = train_py(
        "--auto", "--dry-run", "--json", "--set", "model=Qwen/Qwen3-14B", "--gpu-memory", "24", "--gpus", "2"
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    chosen = next(c for c in plan["candidates"] if c["profile"] == plan["chosen"])
    assert chosen["gpus"] == 2 and chosen["settings"]["model"] == "Qwen/Qwen3-14B"
    assert (
        chosen["settings"]["num_gpus"]
        + (chosen["settings"]["vllm_server_gpus"] if chosen["settings"]["vllm_mode"] == "server" else 0)
        == 2
    )


def test_fit_says_when_four_bit_was_taken_for_learning_per_hour():
    card = ("--gpu-memory", "22.5", "--gpu-name", "NVIDIA L4")
    done = train_py("fit", "unsloth/Llama-3.1-8B-Instruct", *card, "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["profile"]["load_in_4bit"] is True
    (weights,) = answer["given_up"]
    assert weights["lever"] == "4-bit" and weights["learning_gain"] > 1.0
    pinned = train_py("fit", "unsloth/Llama-3.1-8B-Instruct", *card, "--set", "load_in_4bit=false", "--json")
    assert pinned.returncode == 0, pinned.stderr
    sixteen = json.loads(pinned.stdout)
    assert sixteen["profile"]["load_in_4bit"] is False and sixteen["given_up"] == []
    assert answer["learning_per_hour"] == pytest.approx(
        weights["learning_gain"] * sixteen["learning_per_hour"], rel=0.01
    )
