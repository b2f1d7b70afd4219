"""A run says before it starts what it will publish and where; `train --resume` takes the profile the job
script names beside it (the SLURM resume), moves `outputs/latest` only once the resume is under way, and
refuses an output folder it would silently drop or nest inside a run."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from commands import main
from launcher.card.detect import Machine
from launcher.plan.choose import make_plan
from launcher.plan.request import PlanRequest
from launcher.run import supervise as supervise_module
from launcher.run.attempts import read_attempts
from launcher.run.inputs import check_run_inputs
from profiles.load import load_profiles
from support.fake_runs import CPU_SETTINGS, FAKE_CHILD

ROOT = Path(__file__).resolve().parents[3]
CPU_MACHINE = Machine(gpus=[], message="no GPU", host_ram_gib=24.0, host_free_gib=20.0)
SETTINGS = dict(
    **CPU_SETTINGS,
    max_steps=8,
    save_steps=2,
    eval_samples=0,
    num_generations=4,
    max_completion_length=64,
    per_device_train_batch_size=4,
    gradient_accumulation_steps=1,
)


def test_a_push_is_said_before_training_with_what_and_where(monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_never_shown")
    profiles = load_profiles(ROOT / "profiles", ["hub_model_id=me/my-model", "eval_samples=0"], device="cpu")
    plan = make_plan(PlanRequest(profiles, CPU_MACHINE))
    check_run_inputs(profiles, plan, gpu_memory=None, resume=False)
    captured = capsys.readouterr()
    said = captured.out + captured.err
    assert "the adapter" in said and "https://huggingface.co/me/my-model" in said
    assert "hf_secret_never_shown" not in said


# ---------------------------------------------------------------------------------------------------
# train --resume beside --profile (slurm/grpo-train.sbatch resubmitted with --resume)


def profile_file(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text("".join(f"{key}: {json.dumps(value)}\n" for key, value in dict(SETTINGS, name=name).items()))
    return path


@pytest.fixture
def fake_attempts(monkeypatch):
    """`train` runs its supervisor with the fake attempt (tests/support/fake_child.py) in place of train.py."""
    real = supervise_module.supervise

    def supervise(plan, request):
        return real(plan, request, child_command=FAKE_CHILD, console=Console(file=io.StringIO(), width=240))

    monkeypatch.setattr(supervise_module, "supervise", supervise)
    monkeypatch.setenv("FAKE_CHILD_PLAN", json.dumps({"a": {"do": "error", "at_step": 5}}))


def stopped_run(tmp_path: Path) -> tuple[Path, Path]:
    """(the profile file, the run folder) of a run of it that failed at step 5, checkpoints every 2 steps."""
    profile, out = profile_file(tmp_path, "a"), tmp_path / "out"
    assert main(["train", "--profile", str(profile), "--output-dir", str(out)]) == 1
    return profile, next(out.glob("run-*"))


def test_resume_beside_the_runs_own_profile_continues_it(tmp_path, monkeypatch, fake_attempts):
    profile, run_dir = stopped_run(tmp_path)
    monkeypatch.setenv("FAKE_CHILD_PLAN", "{}")
    code = main(["train", "--profile", str(profile), "--output-dir", str(tmp_path / "out"), "--resume"])
    records = read_attempts(run_dir)
    assert code == 0 and len(records) == 2 and records[-1]["resumed_from"] == "attempt-01-a/checkpoint-4"


def test_resume_beside_another_profile_is_refused_naming_both(tmp_path, monkeypatch, fake_attempts, capsys):
    _, run_dir = stopped_run(tmp_path)
    other = profile_file(tmp_path, "b")
    capsys.readouterr()
    code = main(["train", "--profile", str(other), "--output-dir", str(tmp_path / "out"), "--resume"])
    err = capsys.readouterr().err
    assert code == 2 and "'b'" in err and "'a'" in err and "train --resume" in err
    assert len(read_attempts(run_dir)) == 1


# ---------------------------------------------------------------------------------------------------
# outputs/latest and the output folder


def test_a_refused_resume_of_a_named_run_leaves_latest_where_it_was(tmp_path, monkeypatch, fake_attempts, capsys):
    _, first = stopped_run(tmp_path)
    monkeypatch.setenv("FAKE_CHILD_PLAN", json.dumps({"a": {"do": "ok"}}))
    profile = profile_file(tmp_path, "a")
    assert main(["train", "--profile", str(profile), "--output-dir", str(tmp_path / "out")]) == 0
    second = sorted(p for p in (tmp_path / "out").glob("run-*") if p != first)[-1]
    latest = tmp_path / "out" / "latest"
    assert latest.resolve() == second.resolve()
    # a changed LoRA shape cannot continue the first run's checkpoint: refused, and latest still names the second
    assert main(["train", "--resume", str(first), "--set", "lora_rank=8"]) == 2
    assert latest.resolve() == second.resolve()


def test_resume_of_a_named_run_with_another_output_dir_is_refused(tmp_path, fake_attempts, capsys):
    _, run_dir = stopped_run(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    capsys.readouterr()
    assert main(["train", "--resume", str(run_dir), "--output-dir", str(elsewhere)]) == 2
    err = capsys.readouterr().err
    assert "--output-dir" in err and str(run_dir.parent) in err


def test_an_output_dir_inside_a_run_is_refused(tmp_path, fake_attempts, capsys):
    profile, run_dir = stopped_run(tmp_path)
    capsys.readouterr()
    for inside in (tmp_path / "out" / "latest", run_dir, run_dir / "more"):
        assert main(["train", "--profile", str(profile), "--output-dir", str(inside)]) == 2, inside
        assert "run folder" in capsys.readouterr().err
    assert not any(run_dir.glob("run-*")) and not (run_dir / "more").exists()
