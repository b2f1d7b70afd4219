"""Configurations written for TRL (a `--config` YAML of GRPOConfig, ModelConfig and ScriptArguments names) and
open-r1 (a recipe) load through one table (profiles.aliases); `profiles check` says how each key was read; a key
with no counterpart is named with what to do; a setting given in both spellings exits 2. The slow tests plan
and train both recipes on CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from commands import main
from contract.errors import ProfileError
from profiles.aliases import ALIASES, DECIDED, REFUSED, RENAMED
from profiles.load import load_profile
from profiles.schema import KEYS
from support.recipes import OPEN_R1_RECIPE, TRL_CONFIG, check_json, write

REPO = Path(__file__).resolve().parents[3]


def test_the_table_maps_to_keys_that_exist():
    for key, alias in ALIASES.items():
        assert alias.kind in (RENAMED, DECIDED, REFUSED), key
        if alias.kind == RENAMED:
            assert alias.ours in KEYS, key
        else:
            assert alias.note, f"{key}: a key not used must say why"
        if alias.kind == REFUSED:
            assert alias.fix, f"{key}: a refused key must say what to do"
        assert key not in KEYS or alias.ours == key, f"{key} is one of the project's own keys"


def test_a_trl_config_loads(tmp_path):
    profile = load_profile(write(tmp_path, "trl.yaml", TRL_CONFIG))
    assert (profile.model, profile.device, profile.dataset, profile.train_split) == (
        "tiny",
        "cpu",
        "arithmetic",
        "train",
    )
    assert (profile.lora_rank, profile.lora_alpha, profile.fast_inference) == (16, 32, False)
    assert profile.target_modules == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert profile.rewards == {"math": 2.0, "xml_count": 1.0}  # TRL's accuracy verifies LaTeX
    assert (profile.loss_type, profile.importance_sampling_level, profile.scale_rewards) == ("grpo", "sequence", "none")
    assert profile.warmup_ratio == 0.05 and profile.report_to == "none"


def test_an_open_r1_recipe_loads_and_check_says_how(tmp_path, capsys):
    path = write(tmp_path, "config_demo.yaml", OPEN_R1_RECIPE)
    code, out = check_json(capsys, path)
    assert code == 0
    verdict = out["files"][0]
    assert verdict["ok"] and verdict["spelling"] == "TRL / open-r1 names"
    read = {r["key"]: r for r in verdict["read"]}
    assert read["model_name_or_path"] == {
        "key": "model_name_or_path",
        "kind": "renamed",
        "as": "model",
        "value": "tiny",
        "note": "",
    }
    assert read["reward_funcs"]["as"] == "rewards"
    assert read["reward_funcs"]["value"] == {"math": 2.0, "xml_strict": 0.5, "xml_count": 1.0}
    assert read["num_processes"]["as"] == "num_gpus"
    for key in (
        "torch_dtype",
        "bf16",
        "output_dir",
        "logging_steps",
        "save_total_limit",
        "push_to_hub",
        "attn_implementation",
    ):
        assert read[key]["kind"] == "decided" and read[key]["note"], key
    # nothing of the file is silently dropped: every key is the project's own or was read by the table
    written = [line.split(":")[0] for line in OPEN_R1_RECIPE.splitlines() if line and line[0].isalpha()]
    unread = [key for key in written if key not in KEYS and key not in read and key != "reward_weights"]
    assert unread == []
    assert verdict["loss"]["loss_type"] == "dapo"
    profile = load_profile(path)
    assert profile.eval_steps == 2 and profile.num_gpus == 1


def test_check_prints_the_readings(tmp_path, capsys):
    code = main(["profiles", "check", str(write(tmp_path, "r.yaml", OPEN_R1_RECIPE))])
    out = capsys.readouterr().out
    assert code == 0
    assert "model_name_or_path -> model: 'tiny'" in out
    assert "output_dir: not used: " in out


def test_trl_epochs_are_the_run_length_and_max_steps_minus_one_leaves_it_to_them(tmp_path):
    path = write(tmp_path, "epochs.yaml", OPEN_R1_RECIPE.replace("max_steps: 4", "max_steps: -1"))
    profile = load_profile(path)
    assert profile.max_steps == 0 and profile.num_train_epochs == 1.0


def test_our_own_profile_reads_as_ours(capsys):
    code, out = check_json(capsys, REPO / "profiles" / "cpu-tiny-8gen.yaml")
    assert code == 0 and out["files"][0]["spelling"] == "grpo-train" and out["files"][0]["read"] == []


@pytest.mark.parametrize(
    "lines, key",
    [
        ("model: tiny\nmodel_name_or_path: other\n", "model_name_or_path"),
        ("lora_rank: 16\nlora_r: 32\n", "lora_r"),
        ("gpu_memory_utilization: 0.5\nvllm_gpu_memory_utilization: 0.6\n", "vllm_gpu_memory_utilization"),
        ("dataset: gsm8k\ndataset_name: arithmetic\n", "dataset_name"),
        ("rewards: {accuracy: 1.0}\nreward_funcs: [accuracy]\n", "reward_funcs"),
        ("eval_steps: 10\neval_strategy: 'no'\n", "eval_strategy"),
    ],
)
def test_a_setting_in_both_spellings_exits_2(tmp_path, capsys, lines, key):
    path = write(tmp_path, "twice.yaml", lines)
    code, out = check_json(capsys, path)
    assert code == 2
    assert f"key '{key}'" in out["files"][0]["error"] and "two spellings" in out["files"][0]["error"]


@pytest.mark.parametrize(
    "lines, key, words",
    [
        ("generation_batch_size: 60\n", "generation_batch_size", "steps_per_generation"),
        ("vllm_importance_sampling_correction: true\n", "vllm_importance_sampling_correction", "remove it"),
        ("reward_funcs: [accuracy, cosine]\n", "reward_funcs", "path/to/file.py:function"),
        ("reward_funcs: [accuracy]\nreward_weights: [1.0, 2.0]\n", "reward_weights", "one weight per reward"),
        ("save_strategy: sometimes\n", "save_strategy", "save_steps"),
        ("load_in_8bit: true\n", "load_in_8bit", "load_in_4bit"),
        ("report_to: [wandb, tensorboard]\n", "report_to", "keep one"),
        ("model_revision: v2\n", "model_revision", "FOLDER"),
        ("deepspeed: ds.json\n", "deepspeed", "zero_stage"),
    ],
)
def test_a_key_without_counterpart_is_named_with_what_to_do(tmp_path, lines, key, words):
    with pytest.raises(ProfileError) as caught:
        load_profile(write(tmp_path, "p.yaml", "model_name_or_path: tiny\n" + lines))
    assert caught.value.key == key
    assert words in str(caught.value)


def test_set_takes_their_names_too():
    profile = load_profile(REPO / "profiles" / "cpu-tiny-4gen.yaml", ["lora_r=32", "lora_alpha=64"])
    assert profile.lora_rank == 32
    with pytest.raises(ProfileError):
        load_profile(REPO / "profiles" / "cpu-tiny-4gen.yaml", ["lora_rank=16", "lora_r=32"])


def test_a_false_refusable_key_is_read_as_decided(tmp_path):
    profile = load_profile(
        write(tmp_path, "p.yaml", TRL_CONFIG + "vllm_importance_sampling_correction: false\nload_in_8bit: false\n")
    )
    kinds = {r.key: r.kind for r in profile.readings}
    assert kinds["vllm_importance_sampling_correction"] == kinds["load_in_8bit"] == DECIDED


# ---------------------------------------------------------------------------------------------------
# Planned and trained on CPU


def test_the_docs_hold_the_current_table():
    from profiles.aliases import aliases_markdown

    assert aliases_markdown() in (REPO / "docs" / "grpo-settings.md").read_text(), (
        "docs/grpo-settings.md: paste `python train.py profiles aliases` under its table comment"
    )
