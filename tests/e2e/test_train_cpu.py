"""Real GRPO runs on CPU through train.py (one attempt per child process, as the supervisor runs them):
outputs, resume, OOM injection, signals, the transformers + peft fallback (the CPU default learning as a user
runs it: tests/e2e/test_learning.py)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from support.cli import REPO, cpu_run_env, start_train_py, tiny_model_folder, train_py
from support.waiting import finish, wait_until

SMALL = REPO / "profiles" / "cpu-tiny-4gen.yaml"
SUPERVISOR_ESTIMATE_GIB = 2.5  # what a supervisor would have judged the quick run by
QUICK = ["--set", "max_steps=4", "--set", "save_steps=2", "--set", "eval_samples=4", "--set", "train_samples=64"]
REWARD_NAMES = ["xml_count", "xml_soft", "number", "accuracy"]


@pytest.fixture(scope="session")
def train_env(tiny_cache):
    return cpu_run_env(tiny_cache)


def attempt(attempt_dir: Path, env: dict, *extra: str, profile: Path = SMALL):
    return train_py("--profile", str(profile), "--attempt-dir", str(attempt_dir), *extra, env=env)


def outcome(attempt_dir: Path) -> dict:
    return json.loads((attempt_dir / "outcome.json").read_text())


def metrics(attempt_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (attempt_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory, train_env):
    attempt_dir = tmp_path_factory.mktemp("quick") / "attempt-01-cpu-tiny-4gen"
    env = dict(train_env, GRPO_ATTEMPT_ESTIMATE_GIB=str(SUPERVISOR_ESTIMATE_GIB))
    result = attempt(attempt_dir, env, *QUICK)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return attempt_dir, result


def test_outcome_of_a_finished_attempt(quick_run):
    attempt_dir, _ = quick_run
    out = outcome(attempt_dir)
    assert out["status"] == "ok"
    assert out["steps"] == 4
    assert out["checkpoint"] == "checkpoint-4"  # relative to the attempt folder, which may be moved
    assert out["error"] is None and out["error_text"] is None and out["traceback"] is None
    assert out["peak_gib"] > 0
    assert out["estimate_gib"] == SUPERVISOR_ESTIMATE_GIB
    assert (out["rank"], out["ranks"]) == (0, 1)
    assert set(out) == {
        "status",
        "steps",
        "checkpoint",
        "error",
        "error_text",
        "traceback",
        "peak_gib",
        "peak_measure",
        "estimate_gib",
        "rank",
        "ranks",
        "probe",
        "timing",
        "lengths",
        "stopped_by",
    }
    assert out["stopped_by"] is None  # it ran to max_steps


def test_runs_reuse_the_session_tiny_model(quick_run, tiny_cache, tiny_seed):
    from test_learning import OTHER_SEED

    from support.tiny_models import READY_MARK
    from tiny_model.tool_variant import tools_folder_name

    ready = (tiny_cache / READY_MARK).stat().st_mtime
    built = {p.name for p in tiny_cache.iterdir() if p.name.startswith("tiny-") and p.stat().st_mtime > ready}
    # train.py found the cached build instead of building its own; the learning test, sharing the cache,
    # may build its other seed's model there too, the tools tests their variant of the session's model and the
    # measured-lengths test the long one (whenever xdist schedules them); nothing else may be built after the cache
    # was ready
    assert (tiny_cache / tiny_model_folder(tiny_seed) / "config.json").is_file()
    others = {
        tiny_model_folder(OTHER_SEED),
        tools_folder_name(tiny_model_folder(tiny_seed)),
        tiny_model_folder(tiny_seed, long_answers=True),
    }
    assert built <= others, built


def test_every_output_is_written(quick_run):
    attempt_dir, _ = quick_run
    for name in (
        "adapter/adapter_config.json",
        "adapter/adapter_model.safetensors",
        "adapter/tokenizer.json",
        "adapter/tokenizer_config.json",
        "checkpoint-2/trainer_state.json",
        "checkpoint-4/trainer_state.json",
        "checkpoint-4/optimizer.pt",
        "summary.json",
        "report.md",
        "rewards.png",
        "completion_length.png",
        "memory.png",
        "metrics.jsonl",
    ):
        assert (attempt_dir / name).is_file(), name
    adapter = json.loads((attempt_dir / "adapter" / "adapter_config.json").read_text())
    assert adapter["r"] == 16 and adapter["lora_alpha"] == 32


def test_metrics_have_one_line_per_step(quick_run):
    attempt_dir, _ = quick_run
    rows = metrics(attempt_dir)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for row in rows:
        assert set(row["rewards"]) == set(REWARD_NAMES)
        assert all(isinstance(v, float) for v in row["rewards"].values())
        for key in ("reward", "reward_std", "completion_length", "loss", "step_time"):
            assert isinstance(row[key], (int, float)), key
        assert 0 < row["completion_length"] <= 32
        assert row["memory"]["rss_gib"] > 0.05


def test_metrics_show_the_groups_each_step_learned_from(quick_run):
    attempt_dir, _ = quick_run
    for row in metrics(attempt_dir):
        signal = row["group_signal"]  # 4 completions a step, 4 a group: one group, scored by TRL's own call
        assert signal["groups"] == 1
        assert signal["groups_alike"] in (0.0, 1.0) and signal["group_reward_spread"] >= 0
        assert signal["groups_all_correct"] + signal["groups_all_wrong"] <= 1
        assert (signal["group_reward_spread"] == 0) == (signal["groups_alike"] == 1.0)


def test_summary_and_report(quick_run):
    attempt_dir, result = quick_run
    summary = json.loads((attempt_dir / "summary.json").read_text())
    assert summary["status"] == "ok"
    assert summary["backend"] == "unsloth-cpu"
    assert summary["generation"] == "transformers"  # what generated, read from the loaded model
    assert summary["steps"] == 4 and summary["max_steps"] == 4
    assert summary["profile"]["name"] == "cpu-tiny-4gen"
    assert summary["accuracy"]["samples"] == 4
    assert 0.0 <= summary["accuracy"]["before"] <= 1.0 and 0.0 <= summary["accuracy"]["after"] <= 1.0
    assert summary["memory"]["measure"] == "process peak RSS"
    assert summary["memory"]["peak_gib"] > 0
    assert summary["memory"]["estimate_gib"] == SUPERVISOR_ESTIMATE_GIB
    assert summary["memory"]["ratio"] == round(summary["memory"]["peak_gib"] / SUPERVISOR_ESTIMATE_GIB, 3)
    assert set(summary["rewards"]) == {"window", "total", *REWARD_NAMES}
    assert summary["plots"] == ["rewards.png", "completion_length.png", "group_signal.png", "memory.png"]
    report = (attempt_dir / "report.md").read_text()
    assert report.startswith("# GRPO run: cpu-tiny-4gen")
    assert "![rewards](rewards.png)" in report
    assert "attempt 'cpu-tiny-4gen' done: 4 steps" in result.stdout


def test_resume_continues_the_global_step(quick_run, tmp_path, train_env):
    first_dir, _ = quick_run
    attempt_dir = tmp_path / "attempt-02"
    result = attempt(
        attempt_dir,
        train_env,
        *QUICK,
        "--set",
        "max_steps=5",
        "--set",
        "eval_samples=0",
        "--resume-from",
        str(first_dir / "checkpoint-2"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert [r["step"] for r in metrics(attempt_dir)] == [3, 4, 5]
    assert outcome(attempt_dir)["steps"] == 5
    summary = json.loads((attempt_dir / "summary.json").read_text())
    assert (attempt_dir / summary["resumed_from"]).resolve() == (first_dir / "checkpoint-2").resolve()
    # started by hand (no supervisor's estimate): the estimator's own figure for the profile
    assert summary["memory"]["estimate_gib"] not in (None, SUPERVISOR_ESTIMATE_GIB)
    assert outcome(attempt_dir)["estimate_gib"] == summary["memory"]["estimate_gib"]


def test_injected_oom(tmp_path, train_env):
    env = dict(train_env, GRPO_INJECT_OOM="someone-else,cpu-tiny-4gen@2")
    attempt_dir = tmp_path / "attempt-oom"
    result = attempt(attempt_dir, env, *QUICK, "--set", "eval_samples=0")
    assert result.returncode == 3, result.stderr[-3000:]
    out = outcome(attempt_dir)
    assert out["status"] == "oom"
    assert out["steps"] == 1
    assert out["error_text"].startswith("CUDA out of memory. Tried to allocate ")
    assert "GPU 0 has a total capacity of" in out["error_text"]
    assert "in _get_per_token_logps_and_entropies" in out["traceback"]
    assert "torch.OutOfMemoryError" in out["traceback"]


def test_sigterm_saves_and_exits_130(tmp_path, train_env):
    attempt_dir = tmp_path / "attempt-signal"
    process = start_train_py(
        "--profile",
        str(SMALL),
        "--attempt-dir",
        str(attempt_dir),
        "--set",
        "max_steps=500",
        "--set",
        "save_steps=500",
        "--set",
        "eval_samples=0",
        env=train_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        metrics = attempt_dir / "metrics.jsonl"
        wait_until(
            lambda: metrics.is_file() and len(metrics.read_text().splitlines()) >= 3,
            watch=[attempt_dir],
            process=process,
            what="three logged steps",
        )
        process.send_signal(signal.SIGTERM)
        _, stderr = finish(process)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr[-3000:]
    out = outcome(attempt_dir)
    assert out["status"] == "interrupted"
    steps = out["steps"]
    assert 3 <= steps < 500
    assert out["checkpoint"] == f"checkpoint-{steps}"
    assert (attempt_dir / f"checkpoint-{steps}" / "optimizer.pt").is_file()
    assert (attempt_dir / "adapter" / "adapter_model.safetensors").is_file()
    assert "SIGTERM received" in stderr


def test_transformers_peft_fallback_without_unsloth(tmp_path, train_env):
    env = dict(train_env, GRPO_TRAIN_NO_UNSLOTH="1")
    attempt_dir = tmp_path / "attempt-plain"
    result = attempt(attempt_dir, env, *QUICK, "--set", "max_steps=3", "--set", "save_steps=3")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "GRPO_TRAIN_NO_UNSLOTH is set: training through transformers + peft" in result.stdout
    assert "unsloth" not in json.loads((attempt_dir / "summary.json").read_text())["backend"]
    assert [r["step"] for r in metrics(attempt_dir)] == [1, 2, 3]
    assert (attempt_dir / "adapter" / "adapter_model.safetensors").is_file()


def test_unwritable_attempt_folder_is_one_clear_error(tmp_path, train_env):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    result = attempt(blocker / "attempt", train_env, *QUICK)
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: cannot write to the attempt folder {blocker / 'attempt'}: Not a directory")
    assert "Traceback" not in result.stderr


def test_bad_dataset_path_is_bad_input(tmp_path, train_env):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"question": "q"}\n')
    attempt_dir = tmp_path / "attempt-bad"
    result = attempt(attempt_dir, train_env, *QUICK, "--set", f"dataset={rows}")
    assert result.returncode == 2, result.stderr[-2000:]
    out = outcome(attempt_dir)
    assert out["status"] == "error"
    assert str(rows) in out["error"]
