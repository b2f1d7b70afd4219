"""Published recipes load as their authors wrote them: open-r1's GRPO demos and TRL's `trl grpo --config` usage.
Every key TRL accepts is honoured, translated or said to be unused; what cannot be read is listed whole, each
problem with its fix, in one message."""

from __future__ import annotations

import pytest

from contract.errors import ProfileError
from profiles.aliases import problems_of
from profiles.load import load_profile
from support.recipes import (
    OPEN_R1_QWEN_1_5B_DEMO,
    OPEN_R1_QWEN_MATH_7B,
    TRL_CLI_CONFIG,
    check_json,
    write,
)
from usercode.entry import colon_spelling, is_user_code, parse_spec


def reading(profile, key):
    return next(r for r in profile.readings if r.key == key)


def test_open_r1_qwen_1_5b_demo_loads_as_published(tmp_path):
    profile = load_profile(write(tmp_path, "demo.yaml", OPEN_R1_QWEN_1_5B_DEMO))
    assert profile.model == "Qwen/Qwen2.5-1.5B-Instruct"
    assert profile.max_seq_length == 512 + 1024  # TRL has no such key: prompt + completion
    assert "max_prompt_length + max_completion_length" in reading(profile, "max_seq_length").note
    assert "epoch" in reading(profile, "save_strategy").note and profile.save_steps >= 1
    assert profile.hub_model_id == "Qwen2.5-1.5B-Open-R1-GRPO"  # a bare name, as TRL takes it
    assert profile.eval_steps == 0  # do_eval: false
    assert set(profile.rewards) == {"math", "think_format", "think_count"}


def test_open_r1_math_7b_loads_with_the_processes_its_launch_gives(tmp_path):
    path = write(tmp_path, "simple-rl.yaml", OPEN_R1_QWEN_MATH_7B)
    # open-r1 launches it on 7 processes (accelerate --num_processes=7): 16 x 7 x 8 completions are whole groups of 7
    profile = load_profile(path, ["num_gpus=7"])
    assert "no:" in reading(profile, "save_strategy").note
    assert profile.max_seq_length == 1536 and profile.eval_steps == 100
    # on one GPU the groups are not whole (TRL refuses it too): refused with the fix, not a key at a time
    error = pytest.raises(ProfileError, load_profile, path).value
    assert error.key == "per_device_train_batch_size" and "multiple of 7" in str(error)


def test_trl_cli_config_loads(tmp_path):
    profile = load_profile(write(tmp_path, "trl.yaml", TRL_CLI_CONFIG))
    assert set(profile.rewards) == {"math", "xml_strict"}  # TRL's registry names, in both spellings
    assert profile.eval_steps == 0  # do_eval: false and eval_strategy: "no" agree
    assert profile.save_steps == 10  # 0.05 of max_steps 200, rounded up as transformers does
    assert "eval_strategy" in reading(profile, "do_eval").note


def test_check_json_says_what_was_translated_and_what_is_unused(tmp_path, capsys):
    code, out = check_json(
        capsys, write(tmp_path, "demo.yaml", OPEN_R1_QWEN_1_5B_DEMO), extra=["--set", "report_to=none"]
    )
    assert code == 0, out
    read = {r["key"]: r for r in out["files"][0]["read"]}
    assert read["save_strategy"]["kind"] == "decided" and read["max_seq_length"]["as"] == "max_seq_length"
    assert read["hub_strategy"]["kind"] == "decided" and read["dataset_prompt_column"]["as"] == "question_field"


def test_save_steps_as_a_share_without_max_steps_keeps_the_default_and_says_so(tmp_path):
    profile = load_profile(write(tmp_path, "p.yaml", "model_name_or_path: tiny\nuse_cpu: true\nsave_steps: 0.1\n"))
    assert profile.save_steps == 50 and "share of the run" in reading(profile, "save_steps").note


@pytest.mark.parametrize("strategy", ["no", "steps", "epoch", "best"])
def test_every_save_strategy_trl_takes_is_read(tmp_path, strategy):
    profile = load_profile(
        write(tmp_path, "p.yaml", f"model_name_or_path: tiny\nuse_cpu: true\nsave_strategy: '{strategy}'\n")
    )
    assert reading(profile, "save_strategy").kind == "decided"


def test_eval_strategy_epoch_is_read(tmp_path):
    profile = load_profile(write(tmp_path, "p.yaml", "model_name_or_path: tiny\nuse_cpu: true\neval_strategy: epoch\n"))
    assert reading(profile, "eval_strategy").kind == "decided"


def test_twin_spellings_that_disagree_are_still_refused(tmp_path):
    path = write(tmp_path, "p.yaml", "model_name_or_path: tiny\nuse_cpu: true\ndo_eval: false\neval_steps: 10\n")
    assert "different values" in str(pytest.raises(ProfileError, load_profile, path).value)


def test_every_problem_of_a_file_is_reported_at_once(tmp_path, capsys):
    text = (
        "model_name_or_path: tiny\nuse_cpu: true\nmodel_revision: v2\ndeepspeed: ds.json\nsave_strategy: sometimes\n"
        "reward_funcs: [accuracy, cosine, trl.rewards.get_repetition_penalty_reward]\nnum_generations: 3\n"
        "per_device_train_batch_size: 4\n"
    )
    path = write(tmp_path, "p.yaml", text)
    error = pytest.raises(ProfileError, load_profile, path).value
    keys = [problem.key for problem in problems_of(error)]
    assert keys == [
        "model_revision",
        "deepspeed",
        "save_strategy",
        "reward_funcs",
        "reward_funcs",
        "per_device_train_batch_size",  # the schema's word on the keys that did read, in the same pass
    ]
    assert all(problem.fix for problem in problems_of(error))
    code, out = check_json(capsys, path)
    assert code == 2 and [p["key"] for p in out["files"][0]["problems"]] == keys


def test_trls_import_spelling_names_the_same_code():
    assert colon_spelling("pkg.mod.fn") == "pkg.mod:fn" and colon_spelling("pkg.mod:fn") == "pkg.mod:fn"
    assert is_user_code("pkg.mod.fn") and not is_user_code("accuracy") and not is_user_code("rewards.py")
    spec = parse_spec("pkg.mod.fn")
    assert (spec.module, spec.function) == ("pkg.mod", "fn")


def test_a_reward_in_trls_import_spelling_loads(tmp_path):
    text = "model_name_or_path: tiny\nuse_cpu: true\nreward_funcs: [rewards.accuracy.accuracy, format]\n"
    profile = load_profile(write(tmp_path, "p.yaml", text))
    assert "rewards.accuracy:accuracy" in profile.rewards


def test_trls_registry_overlong_reward_reads_at_its_registry_lengths(tmp_path):
    # `trl grpo`'s registry: get_soft_overlong_punishment built at 1,280 tokens with a cache of 256
    text = "model_name_or_path: tiny\nuse_cpu: true\nreward_funcs: [accuracy_reward, get_soft_overlong_punishment]\n"
    profile = load_profile(write(tmp_path, "p.yaml", text))
    assert set(profile.rewards) == {"math", "soft_overlong"}
    assert "0 up to 1,024 tokens" in reading(profile, "reward_funcs").note
    short = load_profile(write(tmp_path, "q.yaml", text + "max_completion_length: 256\n"))
    assert "it scores 0 for every completion, as in TRL" in reading(short, "reward_funcs").note


def test_a_missing_tracker_is_one_of_the_files_problems(tmp_path, capsys, monkeypatch):
    import profiles.rules

    monkeypatch.setattr(
        profiles.rules, "missing_tracker", lambda p, environ=None: "needs wandb (fix: pip install wandb)"
    )
    path = write(tmp_path, "simple-rl.yaml", OPEN_R1_QWEN_MATH_7B)  # 16 x 8 not whole groups of 7; report_to wandb
    code, out = check_json(capsys, path)
    problems = out["files"][0]["problems"]
    assert code == 2 and [p["key"] for p in problems] == ["per_device_train_batch_size", "report_to"]
    assert problems[1]["fix"] == "pip install wandb" and "2 problems" in out["files"][0]["error"]


def test_trl_grpos_reward_model_is_its_first_reward(tmp_path):
    # `trl grpo --reward_model_name_or_path M --reward_funcs accuracy_reward --reward_weights 0.5 2.0`: the model
    # comes first, and so does its weight
    (tmp_path / "rm").mkdir()
    (tmp_path / "rm" / "config.json").write_text("{}")
    text = (
        f"model_name_or_path: tiny\nuse_cpu: true\nreward_model_name_or_path: {tmp_path / 'rm'}\n"
        "reward_funcs: [accuracy_reward]\nreward_weights: [0.5, 2.0]\n"
    )
    profile = load_profile(write(tmp_path, "p.yaml", text))
    assert profile.rewards == {f"model:{tmp_path / 'rm'}": 0.5, "math": 2.0}
