"""`--sample` against what a user's folder may have become since training: a reward file deleted (refused
with the file named when its code is to run, or replaced with `--set rewards=...`), an adapter moved out of its
attempt folder, an attempt without an adapter. No model loads here."""

from __future__ import annotations

from pathlib import Path

import pytest

from commands.sample import Target, find_target, profile_of, sample
from contract.errors import ProfileError, UsageError
from profiles.load import load_profile

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "profiles" / "cpu-tiny-8gen.yaml"


@pytest.fixture
def attempt(tmp_path):
    """An attempt folder as the supervisor leaves it, trained with a reward file that is then deleted."""
    rewards = tmp_path / "my_rewards.py"
    rewards.write_text("def brevity(completions, **kw):\n    return [1.0] * len(completions)\n")
    profile = load_profile(CPU, [f"rewards={{accuracy: 1.0, {rewards}:brevity: 0.5}}"])
    folder = tmp_path / "run" / "attempt-01-cpu-tiny-8gen"
    (folder / "adapter").mkdir(parents=True)
    (folder / "adapter" / "adapter_config.json").write_text("{}")
    (folder / "profile.yaml").write_text(profile.to_yaml())
    rewards.unlink()
    return folder


def test_a_deleted_reward_file_is_named_and_set_rewards_replaces_it(attempt):
    # asked to run the run's reward code (--run-rewards), the missing file is named; without it, see
    # tests/cli/test_sample_code.py
    target = Target(attempt, attempt / "adapter")
    with pytest.raises(ProfileError) as info:
        profile_of(target, [], run_rewards=True)
    assert info.value.key == "rewards" and "my_rewards.py not found" in str(info.value)
    profile = profile_of(target, ["rewards={accuracy: 1}"], run_rewards=True).profile
    assert profile.rewards == {"accuracy": 1.0}
    assert profile.source.endswith("profile.yaml with --set")


def test_a_set_of_another_key_does_not_hide_the_files_mistake(attempt):
    with pytest.raises(ProfileError) as info:
        profile_of(Target(attempt, attempt / "adapter"), ["max_completion_length=64"], run_rewards=True)
    assert info.value.key == "rewards"


def test_an_adapter_moved_out_of_its_attempt_says_where_the_profile_should_be(attempt, tmp_path):
    moved = tmp_path / "elsewhere" / "adapter"
    moved.parent.mkdir()
    (attempt / "adapter").rename(moved)
    target = find_target(moved)
    assert target.adapter_dir == moved
    with pytest.raises(UsageError, match="holds neither profile.yaml nor a readable summary.json"):
        profile_of(target, [])


@pytest.mark.parametrize("count", [0, -2])
def test_from_test_below_one_is_refused(attempt, count):
    with pytest.raises(UsageError, match=f"--from-test {count}: give a number of test questions >= 1"):
        sample(attempt, from_test=count)


def test_from_test_beyond_the_test_split_answers_all_of_it_and_says_so(capsys):
    from trainer.sample import rows_to_answer

    profile = load_profile(CPU)
    rows = rows_to_answer(profile, None, 100_000)
    assert len(rows) == 500  # the arithmetic task's held-out problems
    assert "--from-test 100000: the test split holds 500 rows; answering all of them" in capsys.readouterr().err


def test_sampling_runs_in_the_environment_of_an_attempt_of_its_profile(attempt, monkeypatch):
    """Set before the model loads (torch reads OpenMP's settings once): on the CPU, the short spin that keeps a
    busy core from stalling every generated token."""
    import trainer.sample

    for key in ("GOMP_SPINCOUNT", "PYTHONUNBUFFERED", "TOKENIZERS_PARALLELISM", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(key, raising=False)  # restored afterwards, whatever sample sets
    seen = {}

    def answer(*args, **kwargs):
        import os

        seen["spin"] = os.environ.get("GOMP_SPINCOUNT")
        return []

    monkeypatch.setattr(trainer.sample, "answer", answer)
    sample(attempt, prompt="What is 2 + 2?", overrides=["rewards={accuracy: 1.0}"])
    assert seen == {"spin": "1000"}
