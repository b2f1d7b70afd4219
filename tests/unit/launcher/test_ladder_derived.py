"""The shipped ladder derived for the card: a rung's intents kept, the keys it writes `auto` chosen for the card
detected, a value written in place of `auto` pinned, a profile given with --profile run as written."""

import json

import pytest
import yaml

from commands import main
from support.cli import REPO

PROFILES = REPO / "profiles"
H100 = ["--gpu-memory", "79.6", "--gpu-name", "NVIDIA H100 80GB HBM3"]


def plan_json(capsys, *args):
    code = main(["plan", *H100, "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_the_default_path_derives_the_chosen_rung_for_the_card(capsys):
    code, out = plan_json(capsys)
    chosen = next(c for c in out["candidates"] if c["profile"] == out["chosen"])
    assert code == 0 and chosen["profile"] == "gpu-80gb-qwen2.5-14b"
    written, settings = chosen["written"], chosen["settings"]
    # the intents as written, on every card
    assert (written["model"], written["load_in_4bit"], written["lora_rank"], written["num_generations"]) == (
        "unsloth/Qwen2.5-14B-Instruct",
        False,
        64,
        8,
    )
    for key in ("model", "load_in_4bit", "lora_rank", "num_generations"):
        assert settings[key] == written[key]
    # the rest derived for this card: more than one prompt a step (it ran 1 as written before)
    for key in ("per_device_train_batch_size", "gradient_accumulation_steps", "gpu_memory_utilization", "max_steps"):
        assert written[key] == "auto" and settings[key] != "auto"
    assert settings["effective_batch"] // settings["num_generations"] > 1
    assert chosen["speed"]["limited_by"] in ("objective", "memory", "cap")


def test_the_table_shows_the_rung_as_written_beside_what_was_derived(capsys):
    assert main(["plan", *H100]) == 0
    out = capsys.readouterr().out
    assert "as written: " in out and "per_device_train_batch_size: auto -> " in out
    assert "run: " in out and " steps, " in out and "epochs of the data" in out and "finishing about" in out


def test_a_value_written_in_place_of_auto_is_pinned(tmp_path, capsys):
    data = yaml.safe_load((PROFILES / "gpu-80gb-qwen2.5-14b.yaml").read_text())
    data.update({"name": "mine", "per_device_train_batch_size": 4, "gradient_accumulation_steps": 4, "max_steps": 40})
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump(data))
    code, out = plan_json(capsys, "--profile", str(mine))
    cand = out["candidates"][0]
    assert code == 0 and cand["fits"]
    assert (cand["settings"]["per_device_train_batch_size"], cand["settings"]["gradient_accumulation_steps"]) == (4, 4)
    assert cand["written"]["per_device_train_batch_size"] == 4 and cand["written"]["gpu_memory_utilization"] == "auto"
    assert cand["run"]["steps"] == 40 and cand["run"]["basis"] == "max_steps 40"


def test_a_profile_written_whole_runs_as_written(capsys):
    """The design's example (Gemma-3-1B in 4-bit, LoRA 16, vLLM 0.5, batch 2 x accumulation 2) with --profile."""
    code, out = plan_json(capsys, "--profile", str(PROFILES / "gpu-16gb-gemma3-1b.yaml"))
    cand = out["candidates"][0]
    assert code == 0 and cand["written"] is None
    s = cand["settings"]
    assert (s["load_in_4bit"], s["lora_rank"], s["gpu_memory_utilization"]) == (True, 16, 0.5)
    assert (s["per_device_train_batch_size"], s["gradient_accumulation_steps"]) == (2, 2)


@pytest.mark.parametrize("key", ["lora_rank", "num_generations", "load_in_4bit"])
def test_auto_is_only_for_the_keys_the_plan_derives(tmp_path, capsys, key):
    data = yaml.safe_load((PROFILES / "gpu-80gb-qwen2.5-14b.yaml").read_text())
    data[key] = "auto"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["profiles", "check", str(path)]) == 2
    assert f"key '{key}'" in capsys.readouterr().err


def test_a_rung_nothing_can_be_derived_from_never_runs_its_placeholders(capsys):
    code = main(["plan", "--gpu-memory", "8", "--gpu-name", "NVIDIA GeForce RTX 4060", "--json"])
    out = json.loads(capsys.readouterr().out)
    verdicts = {c["profile"]: c for c in out["candidates"]}
    assert code == 0 and not verdicts["gpu-80gb-qwen2.5-14b"]["fits"]
    assert verdicts["gpu-80gb-qwen2.5-14b"]["reason"].startswith("nothing fits")
