"""A key written `auto` holds a placeholder until the plan derives it: the rules that tie it to the keys written
judge only what was written (never a number nobody wrote), and on the CPU, where no fit solver runs, the
completion cap is still the task's, not the schema's default."""

import json
from pathlib import Path

import pytest
import yaml

from commands import main
from contract.errors import EXIT_BAD_INPUT, ProfileError
from launcher.card.detect import detect_machine
from launcher.plan.completion_lengths import completion_plan
from launcher.plan.derive import derive_cpu_lengths, derive_rungs
from profiles.catalog import resolve
from profiles.load import load_profile
from profiles.schema import Profile, profile_from_dict

REPO = Path(__file__).resolve().parents[3]
RUNG = REPO / "profiles" / "gpu-24gb-llama3.1-8b.yaml"
CPU = REPO / "profiles" / "cpu-tiny-8gen.yaml"
DEFAULT_CAP = Profile.model_fields["max_completion_length"].default


def written(path: Path, tmp_path: Path, **changes) -> Path:
    data = yaml.safe_load(path.read_text())
    data.update(changes)
    out = tmp_path / f"{path.stem}-edited.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


def test_a_pinned_sequence_is_not_refused_for_the_caps_placeholder(tmp_path):
    # max_completion_length: auto, max_seq_length: 512 pinned: 256 + 512 > 512 was refused, naming the 512
    # placeholder nobody wrote
    profile = load_profile(written(RUNG, tmp_path, max_seq_length=512))
    assert "max_completion_length" in profile.derived and profile.max_completion_length <= 512 - 256


def test_the_plan_derives_the_cap_within_the_pinned_sequence(tmp_path):
    rung = load_profile(written(RUNG, tmp_path, max_seq_length=512))
    machine = detect_machine(what_if_gib=24.0, what_if_name="NVIDIA GeForce RTX 4090")
    (candidate,), _notes = derive_rungs([rung], machine)
    assert candidate.not_derived is None and candidate.written["max_completion_length"] == "auto"
    derived = candidate.profile
    assert derived.max_seq_length == 512
    assert derived.max_prompt_length + derived.max_completion_length <= 512


def test_a_pinned_expected_length_above_the_default_cap_is_not_refused(tmp_path):
    profile = load_profile(written(RUNG, tmp_path, expected_completion_length=600))
    assert profile.max_completion_length >= 600 and profile.max_seq_length >= 256 + 600


@pytest.mark.parametrize(
    "changes, numbers",
    [
        ({"max_seq_length": 512, "max_prompt_length": 600}, ("512", "600")),
        ({"max_seq_length": 512, "expected_completion_length": 300}, ("512", "256", "300")),
        ({"max_seq_length": 16, "max_prompt_length": 16}, ("16",)),
    ],
)
def test_written_keys_that_leave_the_cap_no_room_are_refused_in_their_own_numbers(tmp_path, changes, numbers):
    with pytest.raises(ProfileError) as error:
        load_profile(written(RUNG, tmp_path, **changes))
    assert error.value.key == "max_seq_length" and "max_completion_length is auto" in error.value.reason
    assert all(number in error.value.reason for number in numbers)
    assert f"+ {DEFAULT_CAP} >" not in str(error.value)  # the placeholder is never named
    assert "max_seq_length" in error.value.fix


def test_a_batch_written_with_the_accumulation_auto_makes_whole_groups():
    base = {"model": "unsloth/Qwen2.5-1.5B-Instruct", "num_generations": 8, "gradient_accumulation_steps": "auto"}
    for batch, gpus, steps in ((3, 1, 8), (4, 1, 2), (8, 1, 1), (3, 2, 4), (16, 1, 1)):
        extra = {"num_gpus": gpus, "gradient_checkpointing": "true"} if gpus > 1 else {}
        profile = profile_from_dict({**base, "per_device_train_batch_size": batch, **extra}, "<test>")
        assert profile.gradient_accumulation_steps == steps
        assert profile.completions_per_step % profile.num_generations == 0


def test_a_short_prompt_and_completion_keep_the_sequence_at_its_floor():
    profile = profile_from_dict(
        {"model": "tiny", "device": "cpu", "load_in_4bit": False, "fast_inference": False, "optim": "adamw_torch",
         "dataset": "arithmetic", "max_prompt_length": 8, "max_completion_length": 1, "max_seq_length": "auto"},
        "<test>",
    )  # fmt: skip
    assert profile.max_seq_length == 16  # the key's own floor, not 9


def test_the_cpu_derives_the_tasks_cap_instead_of_running_the_placeholder(tmp_path):
    profile = load_profile(written(CPU, tmp_path, max_completion_length="auto", max_seq_length="auto"))
    need = completion_plan(profile, resolve(profile.model)).cap
    (derived,), notes = derive_cpu_lengths([profile])
    derived = derived.profile
    assert derived.max_completion_length == need != DEFAULT_CAP
    assert derived.max_seq_length == derived.max_prompt_length + need
    assert any("max_completion_length: auto ->" in note for note in notes)


def test_the_cpu_keeps_a_written_sequence(tmp_path):
    profile = load_profile(written(CPU, tmp_path, max_completion_length="auto", max_seq_length=200))
    (derived,), _notes = derive_cpu_lengths([profile])
    derived = derived.profile
    assert derived.max_seq_length == 200
    assert derived.max_completion_length == min(200 - derived.max_prompt_length, 128)


def test_a_cpu_plan_runs_the_derived_cap(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU visible: the CPU plan, on any machine
    path = written(CPU, tmp_path, max_completion_length="auto", max_seq_length="auto")
    assert main(["plan", "--profile", str(path), "--ignore-ledger", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    settings = out["candidates"][0]["settings"]
    profile = load_profile(path)
    assert settings["max_completion_length"] == completion_plan(profile, resolve(profile.model)).cap
    assert settings["max_completion_length"] != DEFAULT_CAP


def test_a_set_that_leaves_no_room_exits_2_naming_the_key(tmp_path, capsys):
    code = main(["plan", "--profile", str(RUNG), "--set", "max_seq_length=200", "--gpu-memory", "24", "--json"])
    assert code == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "max_seq_length" in err and "max_completion_length is auto" in err
