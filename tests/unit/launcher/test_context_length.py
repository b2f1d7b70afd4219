"""The planner never plans past the positions a model reads (config.json's max_position_embeddings): a derived
configuration's completions are cut to what is left after the prompt, a profile written past them is refused
naming the key and the fix, and a model with no room after the prompt is refused, not planned at 896."""

from __future__ import annotations

import json

import pytest

from commands import main
from profiles.catalog import from_config
from support.model_configs import LLAMA_1B, folder_with


def plan_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["plan", "--gpu-memory", "24", "--json", *argv])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("key", ["max_position_embeddings", "n_positions"])
def test_the_positions_are_read_from_the_config(key):
    assert from_config(dict(LLAMA_1B, **{key: 512}), "m", "<test>").max_positions == 512
    assert from_config(dict(LLAMA_1B), "m", "<test>").max_positions == 0  # not stated: no limit known


def test_a_derived_configuration_stays_within_the_positions(tmp_path, capsys):
    model = folder_with(tmp_path, dict(LLAMA_1B, max_position_embeddings=512))
    code, plan = plan_json(capsys, "--set", f"model={model}")
    assert code == 0 and plan["chosen"] is not None
    for candidate in plan["candidates"]:
        settings = candidate["settings"]
        assert settings["max_seq_length"] <= 512, candidate["profile"]
        assert settings["max_prompt_length"] + settings["max_completion_length"] <= 512


def test_a_model_with_no_room_after_the_prompt_is_refused_saying_why(tmp_path, capsys):
    model = folder_with(tmp_path, dict(LLAMA_1B, max_position_embeddings=256))
    code, plan = plan_json(capsys, "--set", f"model={model}")
    assert code == 3 and plan["chosen"] is None
    assert any("256 positions" in c["reason"] and "max_prompt_length" in c["reason"] for c in plan["candidates"])
    assert not any(c["fits"] for c in plan["candidates"])


def test_a_profile_written_past_the_positions_is_refused_naming_the_key(tmp_path, capsys):
    model = folder_with(tmp_path, dict(LLAMA_1B, max_position_embeddings=512))
    profile = tmp_path / "mine.yaml"
    profile.write_text(
        f"model: {model}\nload_in_4bit: false\nmax_seq_length: 1024\nmax_prompt_length: 256\n"
        "max_completion_length: 768\n"
    )
    code, plan = plan_json(capsys, "--profile", str(profile))
    assert code == 3
    reason = plan["candidates"][0]["reason"]
    assert "max_seq_length 1024" in reason and "512 positions" in reason and "--set max_seq_length=" in reason
