"""The attempt contract: outcome records and checkpoints as both the supervisor and the trainer read them."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from safetensors.numpy import save_file

from contract import attempt as contract
from contract.environment import ENV_ESTIMATE_GIB


def make_checkpoint(attempt_dir, step: int, complete: bool = True):
    folder = attempt_dir / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    save_file(
        {"lora_A": np.ones((16, 8), dtype=np.float32), "lora_B": np.zeros((8, 16), dtype=np.float32)},
        str(folder / "adapter_model.safetensors"),
    )
    (folder / "adapter_config.json").write_text(json.dumps({"r": 8}))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (folder / "optimizer.pt").write_bytes(os.urandom(2048))
    if complete:
        contract.mark_checkpoint_complete(folder)
    return folder


def test_newest_complete_checkpoint_is_chosen(tmp_path):
    for step in (5, 10, 15):
        make_checkpoint(tmp_path, step)
    assert contract.latest_checkpoint(tmp_path) == tmp_path / "checkpoint-15"
    assert contract.checkpoint_problem(tmp_path / "checkpoint-15") is None


@pytest.mark.parametrize(
    "damage, expected",
    [
        (lambda f: os.truncate(f / "adapter_model.safetensors", 100), "adapter_model.safetensors is 100 bytes"),
        (lambda f: os.truncate(f / "trainer_state.json", 0), "trainer_state.json is 0 bytes"),
        (lambda f: (f / "optimizer.pt").unlink(), "optimizer.pt is missing"),
        (lambda f: (f / contract.COMPLETE_MARKER).unlink(), "the save was cut short"),
        (lambda f: (f / contract.COMPLETE_MARKER).write_text("{not json"), "is damaged"),
    ],
)
def test_damaged_newest_checkpoint_falls_back_to_the_previous(tmp_path, damage, expected):
    make_checkpoint(tmp_path, 5)
    damage(make_checkpoint(tmp_path, 10))
    skipped: list[str] = []
    assert contract.latest_checkpoint(tmp_path, skipped) == tmp_path / "checkpoint-5"
    assert len(skipped) == 1 and skipped[0].startswith("checkpoint-10: ") and expected in skipped[0]


def test_a_header_that_does_not_read_is_caught_even_with_the_marker(tmp_path):
    folder = make_checkpoint(tmp_path, 3)
    data = bytearray((folder / "adapter_model.safetensors").read_bytes())
    data[0:8] = (10**9).to_bytes(8, "little")  # a header length past the end of the file
    (folder / "adapter_model.safetensors").write_bytes(bytes(data))
    contract.mark_checkpoint_complete(folder)  # sizes match: only the header check can tell
    assert "header" in contract.checkpoint_problem(folder)
    assert contract.latest_checkpoint(tmp_path) is None


def test_no_checkpoint_and_stray_folders(tmp_path):
    assert contract.latest_checkpoint(tmp_path) is None
    (tmp_path / "checkpoint-x").mkdir()
    (tmp_path / "checkpoint-7.damaged").mkdir()
    (tmp_path / "checkpoint-9").write_text("a file, not a folder")
    assert contract.latest_checkpoint(tmp_path) is None
    assert contract.checkpoint_step(tmp_path / "checkpoint-12") == 12
    assert contract.checkpoint_step(None) == 0 and contract.checkpoint_step("adapter") == 0


def test_outcome_round_trip_and_merge(tmp_path):
    contract.Outcome(status="interrupted", steps=7, checkpoint="checkpoint-5", peak_gib=3.0).write(tmp_path, 0)
    contract.Outcome(status="oom", steps=6, error="CUDA out of memory", peak_gib=9.5).write(tmp_path, 3)
    merged = contract.merge_outcomes(tmp_path)
    assert merged.status == "oom" and merged.rank == 3 and merged.ranks == 2
    assert merged.steps == 7 and merged.checkpoint == "checkpoint-5" and merged.peak_gib == 9.5
    assert merged.error == "rank 3: CUDA out of memory"
    assert not list(tmp_path.glob("*.tmp"))


def test_outcome_refuses_what_is_not_one(tmp_path):
    assert contract.Outcome.from_dict({"status": "exploded"}) is None
    assert contract.Outcome.from_dict(["ok"]) is None
    (tmp_path / contract.OUTCOME_FILE).write_text('{"status": "ok", "steps": "seven", "extra": 1}')
    outcome = contract.Outcome.read(tmp_path / contract.OUTCOME_FILE)
    assert outcome.status == "ok" and outcome.steps == 0
    (tmp_path / contract.OUTCOME_FILE).write_text('{"status": "ok", "ste')
    assert contract.merge_outcomes(tmp_path) is None


def test_shape_of_reads_profiles_and_settings_alike():
    from profiles.load import load_profile
    from profiles.schema import shape_of

    profile = load_profile("profiles/cpu-tiny-8gen.yaml")
    assert shape_of(profile) == shape_of(profile.to_dict())
    assert shape_of(profile) != shape_of(profile.replace(lora_rank=profile.lora_rank * 2))


@pytest.mark.parametrize(
    "capability, expected", [((7, 5), False), ((8, 0), True), ((9, 0), True), (None, True), ([8, 6], True)]
)
def test_bf16_rule(capability, expected):
    assert contract.bf16_capable(capability) is expected


def test_estimate_from_env():
    assert contract.estimate_from_env({ENV_ESTIMATE_GIB: "13.5"}) == 13.5
    for bad in ("", "nan", "inf", "-1", "lots"):
        assert contract.estimate_from_env({ENV_ESTIMATE_GIB: bad}) is None
