"""A recipe means what TRL would run where it leaves a key out: full fine-tuning without use_peft, 16-bit weights,
TRL's optimisation numbers; every other value that differs from TRL's is listed with why, in `profiles check`,
`plan` and the run's note. The table of TRL's defaults is held against the installed TRL."""

from __future__ import annotations

import dataclasses
import json

import pytest

from commands import main
from profiles.load import load_profile
from profiles.recipe_reading import DECIDED, DIFFERS, TRL_DEFAULT
from profiles.trl_defaults import LISTED, TAKEN, recipe_note
from support.cli import REPO
from support.recipes import OPEN_R1_QWEN_1_5B_DEMO, TRL_CONFIG, check_json, write


def readings(profile, kind):
    return {r.key: r for r in profile.readings if r.kind == kind}


def test_the_table_is_the_installed_trls_defaults():
    trl = pytest.importorskip("trl")
    fields = {}
    for cls in (trl.GRPOConfig, trl.ModelConfig):
        for field in dataclasses.fields(cls):
            if field.default is not dataclasses.MISSING:
                fields.setdefault(field.name, field.default)
            elif field.default_factory is not dataclasses.MISSING:
                fields.setdefault(field.name, field.default_factory())
    for default in (*TAKEN, *LISTED):
        assert default.key in fields, default.key
        assert fields[default.key] == default.trl, (default.key, fields[default.key], default.trl)


def test_open_r1_demo_without_use_peft_trains_every_weight_in_16_bit(tmp_path):
    # open-r1's Qwen2.5-1.5B-Instruct demo writes no use_peft: TRL and open-r1 train every weight in bf16
    profile = load_profile(write(tmp_path, "demo.yaml", OPEN_R1_QWEN_1_5B_DEMO))
    assert profile.lora_rank == 0 and profile.load_in_4bit is False and not profile.uses_lora
    taken = readings(profile, TRL_DEFAULT)
    assert set(taken) >= {"use_peft", "load_in_4bit", "weight_decay", "max_grad_norm"}
    assert profile.weight_decay == 0.0 and profile.max_grad_norm == 1.0
    assert profile.learning_rate == 2.0e-5 and profile.seed == 42  # written: the recipe's own
    assert "learning_rate" not in taken and "seed" not in taken
    differs = readings(profile, DIFFERS)
    assert differs["optim"].value == "adamw_8bit" and differs["optim"].trl == "adamw_torch_fused"
    assert "num_train_epochs" not in differs  # written: one epoch


def test_use_peft_true_is_lora_at_trls_rank_on_16_bit_weights(tmp_path):
    text = "model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct\nuse_peft: true\nreward_funcs: [accuracy]\n"
    profile = load_profile(write(tmp_path, "peft.yaml", text))
    assert profile.lora_rank == 16 and profile.load_in_4bit is False
    differs = readings(profile, DIFFERS)
    assert differs["lora_dropout"].trl == 0.05 and differs["lora_target_modules"].trl is None


def test_lora_keys_without_use_peft_say_nothing_as_in_trl(tmp_path):
    text = "model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct\nlora_r: 32\nreward_funcs: [accuracy]\n"
    path = write(tmp_path, "lora-r.yaml", text)
    profile = load_profile(path)
    assert profile.lora_rank == 0
    assert "reads no LoRA key" in readings(profile, DECIDED)["lora_r"].note
    # the way to LoRA the note gives: use_peft true, at the file's lora_r; the left-out reading then goes
    asked = load_profile(path, ["use_peft=true"])
    assert asked.lora_rank == 32 and "use_peft" not in readings(asked, TRL_DEFAULT)


def test_a_profile_in_the_projects_names_keeps_its_defaults(tmp_path):
    profile = load_profile(REPO / "profiles" / "gpu-16gb-gemma3-1b.yaml")
    assert profile.uses_lora and profile.load_in_4bit
    assert not readings(profile, TRL_DEFAULT) and not readings(profile, DIFFERS)


def test_profiles_check_lists_what_was_left_to_trl_and_what_differs(tmp_path, capsys):
    path = write(tmp_path, "demo.yaml", OPEN_R1_QWEN_1_5B_DEMO.replace("- wandb", "- none"))
    code, out = check_json(capsys, path)
    assert code == 0
    verdict = out["files"][0]
    assert {r["key"] for r in verdict["trl_defaults"]} >= {"use_peft", "load_in_4bit"}
    optim = next(r for r in verdict["differs_from_trl"] if r["key"] == "optim")
    assert optim["trl"] == "adamw_torch_fused" and optim["value"] == "adamw_8bit" and optim["note"]
    assert all(r["kind"] in ("renamed", "decided") for r in verdict["read"])
    assert main(["profiles", "check", str(path)]) == 0
    text = capsys.readouterr().out
    assert "use_peft: False, as lora_rank 0" in text and "optim: 'adamw_8bit' here, TRL 'adamw_torch_fused'" in text


def test_the_runs_note_names_the_left_out_and_the_differing(tmp_path):
    profile = load_profile(write(tmp_path, "trl.yaml", TRL_CONFIG))
    note = recipe_note(profile)
    assert "read as a TRL / open-r1 configuration" in note and "profiles check" in note
    assert "left out, as TRL's defaults: " in note and "weight_decay 0.0" in note  # TRL_CONFIG writes none
    assert "not what TRL would run: " in note and "save_steps" not in note  # written: its own


def test_a_full_fine_tune_that_does_not_fit_names_the_lora_that_does(tmp_path, capsys):
    text = (
        "model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nper_device_train_batch_size: 8\nnum_generations: 8\n"
        "gradient_accumulation_steps: 2\nmax_completion_length: 512\nuse_vllm: true\nmax_steps: 200\n"
        "vllm_gpu_memory_utilization: 0.3\nreport_to: []\nreward_funcs: [accuracy]\n"
    )
    path = write(tmp_path, "seven.yaml", text)
    argv = ["plan", "--json", "--ignore-ledger", "--profile", str(path), "--gpu-name", "NVIDIA A100-SXM4-40GB"]
    code = main([*argv, "--gpu-memory", "40"])
    plan = json.loads(capsys.readouterr().out)
    assert code == 3 and plan["chosen"] is None
    reason = plan["candidates"][0]["reason"]
    assert "full fine-tuning (every weight, as TRL without use_peft) does not fit" in reason
    assert "--set lora_rank=16 --set load_in_4bit=true" in reason
    # and the LoRA it names does fit
    code = main([*argv, "--gpu-memory", "40", "--set", "lora_rank=16", "--set", "load_in_4bit=true"])
    plan = json.loads(capsys.readouterr().out)
    assert code == 0 and plan["chosen"] == "seven"
    assert any("read as a TRL / open-r1 configuration" in note for note in plan["notes"])


def test_a_quoted_use_peft_is_refused_not_read_as_false(tmp_path):
    from contract.errors import ProfileError

    text = 'model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct\nuse_peft: "true"\nreward_funcs: [accuracy]\n'
    error = pytest.raises(ProfileError, load_profile, write(tmp_path, "quoted.yaml", text)).value
    assert error.key == "use_peft" and "unquoted" in error.fix
