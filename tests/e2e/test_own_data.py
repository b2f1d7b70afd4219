"""Your own data and rewards, from the profile to the trained model: profile keys checked at load, bad data
refused as bad input before any model loads, evaluation by the correctness reward, a user's reward failure
as `error`, the hub push, and (slow) real CPU runs on a CSV, a parquet folder and a hub id, then --sample."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from commands.sample import _shown_text
from contract.errors import ProfileError
from launcher.run.attempts import read_attempts
from profiles.load import load_profile, profile_from_dict
from support.cli import REPO, start_train_py, train_py
from support.waiting import finish, run_to_end

CPU = REPO / "profiles" / "cpu-tiny-8gen.yaml"
QUICK = ["--set", "max_steps=3", "--set", "save_steps=3", "--set", "eval_samples=2", "--set", "train_samples=16"]

REWARD_FILE = '''def brevity(prompts, completions, answer, **kwargs):
    """1.0 for an answer under 200 characters, less the longer it gets."""
    scores = []
    for completion in completions:
        text = completion[0]["content"]
        scores.append(1.0 if len(text) < 200 else 200 / len(text))
    return scores


def broken(prompts, completions, **kwargs):
    return [len(c) / 0 for c in completions]
'''


def write_csv(path: Path, rows: int = 20, header=("problem", "result")) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for i in range(rows):
            writer.writerow([f"What is {i} plus {i + 3}?", 2 * i + 3])
    return path


@pytest.fixture
def project(tmp_path):
    """A user's folder: a 20-row CSV with its own column names and a reward file."""
    write_csv(tmp_path / "mine.csv")
    (tmp_path / "my_rewards.py").write_text(REWARD_FILE, encoding="utf-8")
    return tmp_path


@pytest.fixture
def env(tmp_path):
    values = dict(os.environ, GRPO_TRAIN_CACHE=str(tmp_path / "cache"), PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="")
    for name in ("GRPO_INJECT_OOM", "GRPO_TRAIN_NO_UNSLOTH", "GRPO_ATTEMPT_ESTIMATE_GIB", "HF_TOKEN"):
        values.pop(name, None)
    return values


def train(cwd: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return train_py(*args, cwd=cwd, env=env)


def own(*pairs: str) -> list[str]:
    return [item for pair in pairs for item in ("--set", pair)]


# ---------------------------------------------------------------------------------------------------
# The profile loader: checked without importing datasets or the user's code


def test_relative_paths_become_absolute_from_the_current_folder(project, monkeypatch):
    monkeypatch.chdir(project)
    p = load_profile(
        CPU,
        [
            "dataset=mine.csv",
            "question_field=problem",
            "answer_field=result",
            "rewards={accuracy: 1.0, my_rewards.py:brevity: 0.5}",
        ],
    )
    assert p.dataset == str(project / "mine.csv")
    assert list(p.rewards) == ["accuracy", f"{project / 'my_rewards.py'}:brevity"]
    assert p.correctness == "accuracy" and p.train_split == "train" and p.test_split == "test"


def test_a_pattern_led_by_a_hash_is_text_not_a_yaml_comment(project, monkeypatch):
    monkeypatch.chdir(project)
    p = load_profile(CPU, ["dataset=mine.csv", "answer_pattern=#### (.+)"])
    assert p.answer_pattern == "#### (.+)"
    assert load_profile(CPU, ["answer_pattern=null"]).answer_pattern == ""


def test_paths_in_a_profile_are_taken_from_its_folder_first(project, tmp_path, monkeypatch):
    folder = project / "conf"
    folder.mkdir()
    (folder / "mine.csv").write_text("question,answer\nq,1\nr,2\n", encoding="utf-8")
    (folder / "p.yaml").write_text("dataset: mine.csv\nrewards: {accuracy: 1.0}\n", encoding="utf-8")
    monkeypatch.chdir(project)
    assert load_profile(folder / "p.yaml").dataset == str(folder / "mine.csv")


@pytest.mark.parametrize(
    "changes, key, words",
    [
        ({"rewards": {"nope.py:f": 1.0}}, "rewards", "reward file"),
        (
            {"rewards": {"my_rewards.py:missing": 1.0}},
            "rewards",
            "defines no 'missing' (functions there: brevity, broken)",
        ),
        ({"rewards": {"acuracy": 1.0}}, "rewards", "did you mean 'accuracy'"),
        (
            {"rewards": {"accuracy": 1.0, "my_rewards.py:brevity": 1.0, "other.py:brevity": 1.0}},
            "rewards",
            "both be logged as rewards/brevity",
        ),
        ({"correctness": "my_rewards.py:nothing"}, "correctness", "defines no 'nothing'"),
        ({"question_field": "problem"}, "question_field", "applies to your own data"),
        ({"dataset": "mine.csv", "dataset_config": "main"}, "dataset_config", "applies to hub datasets"),
        ({"dataset": "notes.txt"}, "dataset", "unknown file type '.txt'"),
        ({"dataset": "no/such/file.csv"}, "dataset", "no such file or folder"),
        ({"dataset": "mine.csv", "answer_pattern": "####"}, "answer_pattern", "no group"),
        ({"dataset": "mine.csv", "answer_pattern": "(unclosed"}, "answer_pattern", "not a regular expression"),
        ({"hub_model_id": "no slash"}, "hub_model_id", "org/name"),
    ],
)
def test_refusals_name_the_key(project, monkeypatch, changes, key, words):
    monkeypatch.chdir(project)
    (project / "notes.txt").write_text("hello", encoding="utf-8")
    (project / "other.py").write_text("def brevity(completions, **kw):\n    return [0.0] * len(completions)\n")
    with pytest.raises(ProfileError) as info:
        profile_from_dict({"dataset": "arithmetic", **changes}, "<test>")
    assert info.value.key == key and words in str(info.value), str(info.value)


def test_math_reward_without_math_verify_is_refused_with_the_fix(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "math_verify" else real(name, *a))
    with pytest.raises(ProfileError, match="pip install math-verify"):
        profile_from_dict({"rewards": {"math": 1.0}}, "<test>")


def test_dry_run_with_your_data_imports_nothing_heavy_and_runs_no_user_code(project):
    (project / "loud.py").write_text(
        f"open({str(project / 'ran')!r}, 'w')\ndef score(completions, **kw):\n    return [0.0] * len(completions)\n"
    )
    code = (
        "import sys, io, contextlib\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "import train\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    code = train.main(['--auto', '--dry-run', '--set', 'dataset=mine.csv', '--set',\n"
        "                       'question_field=problem', '--set', 'rewards={accuracy: 1, loud.py:score: 1}'])\n"
        "print(code, sorted(m for m in ('torch', 'trl', 'transformers', 'datasets') if m in sys.modules))\n"
    )
    result = run_to_end([sys.executable, "-c", code], cwd=project)
    assert result.stdout.strip() == "0 []", result.stderr[-2000:]
    assert not (project / "ran").exists()


# ---------------------------------------------------------------------------------------------------
# Bad data: exit 2 before any model loads, one message, no traceback


@pytest.mark.parametrize(
    "setup, sets, words",
    [
        (None, ["dataset=mine.csv", "question_field=question"], "no column 'question' (columns: problem, result)"),
        (
            None,
            ["dataset=mine.csv"],
            "no answer column: none of answer, solution, label, verification_info (columns: problem, result)",
        ),
        ("broken.jsonl", ["dataset=broken.jsonl"], "broken.jsonl: cannot be read (line 2: "),
        ("words.csv", ["dataset=words.csv"], "cannot be read from column 'answer' with answer_pattern"),
        (None, ["dataset=someone/not-cached"], "not in the local Hugging Face cache"),
        (
            None,
            ["dataset=mine.csv", "question_field=problem", "answer_field=result", "rewards={x.py:f: 1.0}"],
            "reward file",
        ),
    ],
)
def test_bad_data_is_refused_before_any_model_loads(project, env, setup, sets, words):
    if setup == "broken.jsonl":
        (project / setup).write_text('{"question": "a", "answer": "1"}\n{"question": "b", "answer": \n')
    if setup == "words.csv":
        (project / setup).write_text("question,answer\n" + "".join(f"q{i},#### {i}\n" for i in range(10)))
        sets = [*sets, "answer_pattern=answer=(\\d+)"]
    offline = dict(env, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", HF_HOME=str(project / "hf"))
    offline.pop("HF_DATASETS_CACHE", None)
    result = train(project, offline, "--profile", str(CPU), *own(*sets), "--output-dir", "out")
    assert result.returncode == 2, result.stdout[-1500:] + result.stderr[-1500:]
    assert words in result.stderr and "Traceback" not in result.stderr, result.stderr[-1500:]
    assert [line for line in result.stderr.splitlines() if line.strip()][-1].startswith("error: ")
    assert result.stderr.count("error:") == 1, result.stderr
    assert not (project / "out").exists()  # no run folder, no attempt: nothing loaded


def test_check_data_says_what_it_found(project):
    import tasks

    (project / "some.csv").write_text(
        "question,answer\n" + "".join(f"q{i},#### {i}\n" if i % 25 else f"q{i},none\n" for i in range(50))
    )
    p = profile_from_dict(
        {"dataset": str(project / "some.csv"), "answer_pattern": "#### (.+)", "eval_samples": 0}, "<test>"
    )
    assert tasks.check_data(p) == "43 training rows, 0 test rows, 2 answers unreadable (dropped)"


# ---------------------------------------------------------------------------------------------------
# Evaluation, failures, publishing


def test_evaluation_by_the_accuracy_reward_matches_the_old_rule():
    from evaluation.score import judge
    from rewards import REWARDS, is_correct

    completions = [
        "<answer>72</answer>",
        "<answer>$1,000.00</answer>",
        "72",
        "<answer>71</answer>",
        "<reasoning>8 x 9</reasoning><answer>8 x 9 = 72</answer>",
        "",
        "<answer>-3</answer>",
    ]
    golds = ["72", "1000", "72", "72", "72", "1", "-3"]
    rows = [{"prompt": [{"role": "user", "content": "q"}], "answer": g} for g in golds]
    assert judge(REWARDS["accuracy"], rows, completions) == [is_correct(c, g) for c, g in zip(completions, golds)]


def test_evaluation_by_a_users_reward_sees_the_rows_columns(project):
    from evaluation.score import judge
    from rewards import get_reward

    (project / "judge.py").write_text(
        "def same(completions, answer, level, **kw):\n"
        "    return [1.0 if c[0]['content'] == f'{a}/{l}' else 0.5 "
        "for c, a, l in zip(completions, answer, level)]\n"
    )
    rows = [{"prompt": [{"role": "user", "content": "q"}], "answer": "4", "level": n} for n in (1, 2)]
    assert judge(get_reward(f"{project / 'judge.py'}:same"), rows, ["4/1", "4/1"]) == [True, False]


def test_a_reward_that_cannot_be_called_names_its_own_line(project):
    from rewards import get_reward
    from rewards.user import UserRewardError

    reward = get_reward(f"{project / 'my_rewards.py'}:brevity")
    with pytest.raises(
        UserRewardError,
        match=r"missing 1 required positional argument: 'answer' \(at .*"
        r"my_rewards.py:1, calling brevity\)",
    ):
        reward(prompts=["p"], completions=["c"])


def test_a_users_reward_failure_is_an_error_naming_it_even_when_wrapped(project):
    from rewards import get_reward
    from trainer.run import classify

    reward = get_reward(f"{project / 'my_rewards.py'}:broken")
    try:
        try:
            reward(prompts=["p"], completions=["CUDA out of memory"])
        except Exception as inner:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB") from inner
    except RuntimeError as wrapped:
        status, line = classify(wrapped)
    assert status == "error"
    assert line.startswith("reward 'broken' raised ZeroDivisionError") and "my_rewards.py:11 in " in line


class FakeHub:
    """huggingface_hub.HfApi at the network boundary."""

    def __init__(self, fail: str | None = None):
        self.calls, self.fail = [], fail

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create", repo_id))
        if self.fail:
            raise RuntimeError(self.fail)
        # huggingface_hub's RepoUrl: a bare name is made in the token's account ("me")
        return SimpleNamespace(repo_id=repo_id if "/" in repo_id else f"me/{repo_id}")

    def upload_folder(self, repo_id, folder_path, **kwargs):
        self.calls.append(("upload", repo_id, Path(folder_path).name))


def test_push_sends_the_adapter_and_never_shows_the_token(tmp_path, monkeypatch):
    from trainer.publish import push

    (tmp_path / "adapter").mkdir()
    profile = profile_from_dict({"hub_model_id": "me/my-model", "dataset": "arithmetic"}, "<test>")
    said = []
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    assert push(profile, tmp_path, said.append, api=FakeHub())["error"] == "HF_TOKEN is not set"
    monkeypatch.setenv("HF_TOKEN", "hf_secret123")
    hub = FakeHub()
    assert push(profile, tmp_path, said.append, api=hub)["pushed"] is True
    assert hub.calls == [("create", "me/my-model"), ("upload", "me/my-model", "adapter")]
    result = push(profile, tmp_path, said.append, api=FakeHub(fail="401 bad token hf_secret123"))
    assert result["pushed"] is False and "***" in result["error"]
    assert not any("hf_secret123" in line for line in said) and "hf_secret123" not in json.dumps(result)
    assert push(profile_from_dict({"dataset": "arithmetic"}, "<test>"), tmp_path, said.append) is None


def test_a_bare_hub_name_is_pushed_and_named_in_the_tokens_account(tmp_path, monkeypatch):
    from trainer.publish import push

    (tmp_path / "adapter").mkdir()
    monkeypatch.setenv("HF_TOKEN", "hf_secret123")
    profile = profile_from_dict({"hub_model_id": "Qwen2.5-1.5B-Open-R1-GRPO", "dataset": "arithmetic"}, "<test>")
    said, hub = [], FakeHub()
    result = push(profile, tmp_path, said.append, api=hub)
    assert result["pushed"] is True and result["repo"] == "me/Qwen2.5-1.5B-Open-R1-GRPO"
    assert hub.calls[-1] == ("upload", "me/Qwen2.5-1.5B-Open-R1-GRPO", "adapter")
    assert said[-1].endswith("https://huggingface.co/me/Qwen2.5-1.5B-Open-R1-GRPO (private)")


def test_sample_refuses_what_is_not_a_run(tmp_path, env):
    result = train(tmp_path, env, "--sample", str(tmp_path / "nothing"))
    assert result.returncode == 2 and "no such folder" in result.stderr and "Traceback" not in result.stderr
    (tmp_path / "run").mkdir()
    result = train(tmp_path, env, "--sample", str(tmp_path / "run"))
    assert result.returncode == 2 and "no attempt there finished" in result.stderr


# ---------------------------------------------------------------------------------------------------
# Real CPU runs (slow)


def metrics(attempt_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (attempt_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_csv_with_renamed_columns_and_a_reward_file_trains_then_samples(project, env):
    result = train(
        project,
        env,
        "--profile",
        str(CPU),
        *own(
            "dataset=mine.csv",
            "question_field=problem",
            "answer_field=result",
            "rewards={accuracy: 1.0, my_rewards.py:brevity: 0.5}",
            # the tiny model built for this data is untrained: its answers run into any cap, so the length probe
            # would re-plan the cap twice before training at four times it (tests/e2e/test_measured_lengths.py
            # holds the re-plan)
            "length_probe=0",
        ),
        *QUICK,
        "--output-dir",
        "outputs",
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "data for 'cpu-tiny-8gen': 16 of 18 training rows (train_samples), 2 test rows" in result.stdout
    run_dir = next((project / "outputs").glob("run-*"))
    assert [r["status"] for r in read_attempts(run_dir)] == ["ok"]
    attempt_dir = (run_dir / "final").resolve()
    rows = metrics(attempt_dir)
    assert len(rows) == 3 and all(set(r["rewards"]) == {"accuracy", "brevity"} for r in rows)
    summary = json.loads((attempt_dir / "summary.json").read_text())
    assert summary["accuracy"]["correctness"] == "accuracy" and summary["hub"] is None

    sampled = start_train_py(
        "--sample",
        str(run_dir),
        "--from-test",
        "2",
        "--run-rewards",
        cwd="/",
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # bytes: a '\r' in the answer stays one
    out, err = finish(sampled)
    stdout = out.decode("utf-8", errors="replace")
    assert sampled.returncode == 0, err[-3000:]
    assert "rewards: accuracy " in stdout and "| brevity " in stdout
    # the same greedy answer as the evaluation after training: the trained adapter is what was loaded
    first = summary["accuracy"]["examples_after"][0]["completion"]
    assert first and _shown_text(first).replace("\n", "\n            ")[:200] in stdout


def test_parquet_folder_with_train_and_test_splits(tmp_path, env):
    import datasets

    folder = tmp_path / "data"
    folder.mkdir()
    for split, count in (("train", 24), ("test", 3)):
        rows = [
            {"problem": f"{split} {i} + 1 = ?", "solution": f"so #### {i + 1}", "level": i % 3} for i in range(count)
        ]
        datasets.Dataset.from_list(rows).to_parquet(str(folder / f"{split}.parquet"))
    attempt_dir = tmp_path / "attempt"
    result = train(
        tmp_path,
        env,
        "--profile",
        str(CPU),
        "--attempt-dir",
        str(attempt_dir),
        *own(f"dataset={folder}", "answer_pattern=#### (.+)"),
        *QUICK,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((attempt_dir / "summary.json").read_text())
    assert summary["train_rows"] == 16 and summary["accuracy"]["samples"] == 2
    assert summary["accuracy"]["examples_after"][0]["answer"] == "1"


HUB_RUN = """
import sys
import datasets

def from_the_hub(path, name=None, **kwargs):  # the network boundary: what the hub would give
    assert (path, name) == ("someone/sums", "easy"), (path, name)
    rows = lambda n, start: [{{"q": f"What is {{i}} + 1?", "a": str(i + 1)}} for i in range(start, start + n)]
    return datasets.DatasetDict({{"training": datasets.Dataset.from_list(rows(20, 0)),
                                  "validation": datasets.Dataset.from_list(rows(4, 100))}})

datasets.load_dataset = from_the_hub
sys.path.insert(0, {repo!r})
import train
sys.exit(train.main(sys.argv[1:]))
"""


def test_hub_id_with_config_and_named_splits(tmp_path, env):
    attempt_dir = tmp_path / "attempt"
    args = [
        "--profile",
        str(CPU),
        "--attempt-dir",
        str(attempt_dir),
        *QUICK,
        *own(
            "dataset=someone/sums",
            "dataset_config=easy",
            "train_split=training",
            "test_split=validation",
            "question_field=q",
            "answer_field=a",
            "rewards={accuracy: 1.0, xml_count: 1.0}",
        ),
    ]
    result = run_to_end(
        [sys.executable, "-c", HUB_RUN.format(repo=str(REPO)), *args],
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((attempt_dir / "summary.json").read_text())
    assert summary["train_rows"] == 16 and summary["accuracy"]["examples_after"][0]["answer"] == "101"


def test_an_exception_in_a_users_reward_ends_the_attempt_as_error(project, env):
    attempt_dir = project / "attempt"
    result = train(
        project,
        env,
        "--profile",
        str(CPU),
        "--attempt-dir",
        str(attempt_dir),
        *QUICK,
        *own(
            "dataset=mine.csv",
            "question_field=problem",
            "answer_field=result",
            "rewards={accuracy: 1.0, my_rewards.py:broken: 1.0}",
        ),
    )
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    outcome = json.loads((attempt_dir / "outcome.json").read_text())
    assert outcome["status"] == "error"
    assert outcome["error"].startswith("reward 'broken' raised ZeroDivisionError: division by zero (at ")
    assert "my_rewards.py:11 in " in outcome["error"]
