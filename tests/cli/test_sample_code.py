"""`sample` never runs code that came with a sampled folder unless asked: the reward files its profile names are
left out (and said so) without --run-rewards, a profile's trust_remote_code needs the user's own --set, and
sampling without those rewards still scores with the built-in ones. trust_remote_code is said once before a
model is loaded with it (training, calibration, sampling)."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest
from rich.console import Console

from commands.sample import Target, _shown_text, profile_of
from contract.errors import ProfileError, UsageError
from profiles.load import load_profile
from profiles.rules import remote_code_notice
from support.cli import train_py
from support.fake_runs import CPU_SETTINGS

REPO = Path(__file__).resolve().parents[2]
CPU = REPO / "profiles" / "cpu-tiny-8gen.yaml"


@pytest.fixture
def sent_attempt(tmp_path):
    """An attempt folder someone sent: its profile names a reward file and a correctness function that live in
    the folder and, when imported, leave a marker (a stand-in for any code at all)."""
    folder = tmp_path / "run" / "attempt-01-cpu-tiny-8gen"
    (folder / "adapter").mkdir(parents=True)
    (folder / "adapter" / "adapter_config.json").write_text("{}")
    marker = tmp_path / "imported"
    (folder / "evil.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
        "def score(completions, **kw):\n    return [0.25] * len(completions)\n"
        "def judge(completions, **kw):\n    return [1.0] * len(completions)\n"
    )
    profile = load_profile(
        CPU, [f"rewards={{accuracy: 1.0, {folder / 'evil.py'}:score: 0.5}}", f"correctness={folder / 'evil.py'}:judge"]
    )
    (folder / "profile.yaml").write_text(profile.to_yaml())
    return folder, marker


def tokenizer():
    from tiny_model.build import _build_tokenizer, tiny_shape

    return _build_tokenizer(["What is 2 + 3? <answer>5</answer>"] * 20, tiny_shape())


def rows():
    return [{"prompt": [{"role": "user", "content": "What is 2 + 3?"}], "answer": "5"}]


def user_modules():
    return [name for name in sys.modules if name.startswith("grpo_user_reward_")]


def test_the_folders_reward_code_is_left_out_and_sampling_still_scores(sent_attempt):
    from trainer.sample import score_answers

    folder, marker = sent_attempt
    before = user_modules()
    sampling = profile_of(Target(folder, folder / "adapter"), [])
    assert [entry.rsplit(":", 1)[1] for entry in sampling.left_out] == ["score", "judge"]
    assert sampling.rewards == {"accuracy": 1.0} and not sampling.correctness_runs
    answers = score_answers(sampling.profile, rows(), ["<answer>5</answer>"], tokenizer(), sampling.rewards, None)
    assert answers[0].scores == {"accuracy": 1.0} and answers[0].correct is None
    assert not marker.exists() and user_modules() == before


def test_run_rewards_imports_them(sent_attempt):
    from trainer.sample import score_answers

    folder, marker = sent_attempt
    sampling = profile_of(Target(folder, folder / "adapter"), [], run_rewards=True)
    assert sampling.left_out == [] and sampling.correctness_runs
    answers = score_answers(
        sampling.profile, rows(), ["<answer>5</answer>"], tokenizer(), sampling.rewards, sampling.profile.correctness
    )
    assert answers[0].scores["score"] == 0.25 and answers[0].correct is True
    assert marker.read_text() == "ran"


def test_a_deleted_reward_file_does_not_stop_sampling_without_its_code(sent_attempt):
    folder, _ = sent_attempt
    (folder / "evil.py").unlink()
    assert profile_of(Target(folder, folder / "adapter"), []).rewards == {"accuracy": 1.0}
    with pytest.raises(ProfileError, match="evil.py not found"):
        profile_of(Target(folder, folder / "adapter"), [], run_rewards=True)


def test_rewards_the_user_sets_are_the_users_own_choice(sent_attempt, tmp_path):
    folder, marker = sent_attempt
    mine = tmp_path / "mine.py"
    mine.write_text("def brevity(completions, **kw):\n    return [1.0] * len(completions)\n")
    sampling = profile_of(Target(folder, folder / "adapter"), [f"rewards={{{mine}:brevity: 1.0}}"])
    assert list(sampling.rewards) == [f"{mine}:brevity"]
    assert all("evil.py" in entry for entry in sampling.left_out)  # the folder's correctness is still left out


def test_trust_remote_code_from_the_folder_needs_the_users_own_set(tmp_path):
    folder = tmp_path / "attempt-01-x"
    (folder / "adapter").mkdir(parents=True)
    (folder / "adapter" / "adapter_config.json").write_text("{}")
    profile = load_profile(CPU, ["trust_remote_code=true"])
    (folder / "profile.yaml").write_text(profile.to_yaml())
    with pytest.raises(UsageError, match="trust_remote_code: true.*fix: --set trust_remote_code=true"):
        profile_of(Target(folder, folder / "adapter"), [])
    assert profile_of(Target(folder, folder / "adapter"), ["trust_remote_code=true"]).profile.trust_remote_code
    assert not profile_of(Target(folder, folder / "adapter"), ["trust_remote_code=false"]).profile.trust_remote_code
    done = train_py("sample", str(folder), env=dict(os.environ, GRPO_TRAIN_LEDGER=str(tmp_path / "ledger.jsonl")))
    assert done.returncode == 2 and "Traceback" not in done.stderr and "trust_remote_code" in done.stderr


def test_trust_remote_code_is_said_once_per_model_before_the_first_attempt(tmp_path, monkeypatch):
    from launcher.card.detect import Machine
    from launcher.plan.choose import make_plan
    from launcher.plan.request import PlanRequest
    from launcher.run.request import RunRequest
    from launcher.run.supervise import supervise
    from profiles.load import profile_from_dict

    assert remote_code_notice(load_profile(CPU)) is None
    base = dict(
        **CPU_SETTINGS,
        max_steps=4,
        save_steps=2,
        eval_samples=0,
        trust_remote_code=True,
        gradient_accumulation_steps=1,
    )
    rungs = [
        profile_from_dict(
            dict(base, name="a", ladder=1, num_generations=8, max_completion_length=128, per_device_train_batch_size=8),
            "<test a>",
        ),
        profile_from_dict(
            dict(base, name="b", ladder=2, num_generations=4, max_completion_length=64, per_device_train_batch_size=4),
            "<test b>",
        ),
    ]
    plan = make_plan(
        PlanRequest(rungs, Machine(gpus=[], message="test machine: no GPU", host_ram_gib=24.0, host_free_gib=20.0))
    )
    monkeypatch.setenv("FAKE_CHILD_PLAN", json.dumps({"a": {"do": "oom", "text": "torch_logits_gib.txt"}}))
    out = io.StringIO()
    fake_child = [sys.executable, str(REPO / "tests" / "support" / "fake_child.py")]
    code = supervise(
        plan,
        RunRequest(tmp_path / "out"),
        child_command=fake_child,
        console=Console(file=out, width=200, highlight=False),
    )
    assert code == 0
    text = out.getvalue()
    assert text.count("trust_remote_code is true") == 1
    assert text.index("trust_remote_code is true") < text.index("attempt 1")


@pytest.mark.parametrize(
    "text, shown",
    [
        ("\n" * 48, "(nothing but whitespace: 48 characters)"),
        ("", "(empty)"),
        ("7\n\n\n\n\n8", "7\n\n8"),
        ("a\x1b[2Jb", "a\\x1b[2Jb"),
    ],
)
def test_an_answer_is_shown_without_screens_of_blank_lines_or_escape_codes(text, shown):
    assert _shown_text(text) == shown


@pytest.fixture
def sent_tool_attempt(tmp_path):
    """An attempt folder someone sent whose profile names a tool file and an environment file of its own that,
    imported, leave a marker; the files are then deleted, as in a folder copied without them."""
    folder = tmp_path / "run" / "attempt-01-cpu-tiny-tools"
    (folder / "adapter").mkdir(parents=True)
    (folder / "adapter" / "adapter_config.json").write_text("{}")
    marker = tmp_path / "imported"
    code = (
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
        'def lookup(word: str) -> str:\n    """Look a word up.\n\n    Args:\n        word: the word\n    """\n    return word\n'
        "class Game:\n    def reset(self, **row):\n        pass\n"
    )
    (folder / "own_tools.py").write_text(code)
    profile = load_profile(
        REPO / "profiles" / "cpu-tiny-tools.yaml",
        [f"tools=[calculate, {folder / 'own_tools.py'}:lookup]", f"environment={folder / 'own_tools.py'}:Game"],
    )
    (folder / "profile.yaml").write_text(profile.to_yaml())
    return folder, marker


@pytest.mark.parametrize("run_rewards", [False, True])
def test_the_folders_tool_and_environment_code_is_never_imported(sent_tool_attempt, run_rewards):
    folder, marker = sent_tool_attempt
    (folder / "own_tools.py").unlink()  # sample and export do not need it
    sampling = profile_of(Target(folder, folder / "adapter"), [], run_rewards=run_rewards)
    assert sampling.profile.tools == ["calculate"] and sampling.profile.environment == ""
    assert not marker.exists()


def test_a_folder_with_only_tool_code_keeps_the_tool_calling_model(sent_tool_attempt):
    from tiny_model.source import uses_tools

    folder, marker = sent_tool_attempt
    text = (folder / "profile.yaml").read_text().replace("- calculate\n", "")
    (folder / "profile.yaml").write_text(text)
    profile = profile_of(Target(folder, folder / "adapter"), []).profile
    assert uses_tools(profile) and profile.tools == ["calculate"]  # a stand-in: sample answers in one turn
    assert not marker.exists()
