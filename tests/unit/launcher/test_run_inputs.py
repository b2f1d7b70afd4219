"""What a run needs beyond a valid profile, checked before its folder exists: the tracker package `report_to`
names (exit 2, not a failure after the model has loaded), and HF_TOKEN for `hub_model_id` (said before
training, not after)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import train
from contract.errors import UsageError
from launcher.card.detect import Machine
from launcher.plan.choose import make_plan
from launcher.plan.request import PlanRequest
from launcher.run.inputs import check_run_inputs
from profiles.load import load_profile, load_profiles
from profiles.rules import missing_tracker

ROOT = Path(__file__).resolve().parents[3]
CPU_DIR = ROOT / "profiles"
CPU_MACHINE = Machine(gpus=[], message="no GPU", host_ram_gib=24.0, host_free_gib=20.0)


def cpu_plan(overrides):
    profiles = load_profiles(CPU_DIR, overrides, device="cpu")
    return profiles, make_plan(PlanRequest(profiles, CPU_MACHINE))


def without(monkeypatch, *modules):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name.split(".")[0] in modules else real(name, *a)
    )


@pytest.mark.parametrize(
    "tracker, package",
    [("wandb", "wandb"), ("tensorboard", "tensorboard"), ("mlflow", "mlflow"), ("comet_ml", "comet-ml")],
)
def test_a_tracker_without_its_package_is_refused_before_the_run(monkeypatch, tracker, package):
    without(monkeypatch, "wandb", "tensorboard", "tensorboardX", "mlflow", "comet_ml")
    profiles, plan = cpu_plan([f"report_to={tracker}"])
    with pytest.raises(UsageError) as info:
        check_run_inputs(profiles, plan, gpu_memory=None, resume=False)
    text = str(info.value)
    assert f"key 'report_to': report_to '{tracker}' needs the {package} package" in text
    assert f"pip install {package}" in text and "report_to: none" in text
    assert text.startswith(plan.chosen.source)  # the rung that would run, not the first of the ladder


def test_a_tracker_that_is_installed_passes(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: object() if name == "tensorboardX" else (None if name == "tensorboard" else real(name, *a)),
    )
    profile = load_profile(CPU_DIR / "cpu-tiny-8gen.yaml", ["report_to=tensorboard"])
    assert missing_tracker(profile) is None  # tensorboardX is enough, as transformers accepts it
    for tracker in ("none", "all"):
        assert missing_tracker(load_profile(CPU_DIR / "cpu-tiny-8gen.yaml", [f"report_to={tracker}"])) is None
    kubeflow = load_profile(CPU_DIR / "cpu-tiny-8gen.yaml", ["report_to=kubeflow"])
    assert "KUBEFLOW_TRAINER_SERVER_URL" in missing_tracker(kubeflow, environ={})
    assert missing_tracker(kubeflow, environ={"KUBEFLOW_TRAINER_SERVER_URL": "http://k"}) is None


def test_report_to_without_its_package_exits_2_before_a_run_folder(monkeypatch, capsys, tmp_path):
    without(monkeypatch, "wandb")
    code = train.main(["--auto", "--set", "report_to=wandb", "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "needs the wandb package" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_missing_hf_token_for_hub_model_id_is_said_before_training(monkeypatch, capsys):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    profiles, plan = cpu_plan(["hub_model_id=me/my-model", "eval_samples=0"])
    check_run_inputs(profiles, plan, gpu_memory=None, resume=False)
    err = capsys.readouterr().err
    assert "pushes to me/my-model" in err and "HF_TOKEN is not set" in err and "export HF_TOKEN" in err
    monkeypatch.setenv("HF_TOKEN", "hf_secret_never_shown")
    check_run_inputs(profiles, plan, gpu_memory=None, resume=False)
    captured = capsys.readouterr()
    assert "HF_TOKEN" not in captured.err and "hf_secret_never_shown" not in captured.out + captured.err


def test_a_set_every_rung_refuses_names_the_rung_auto_tries_first(capsys):
    code = train.main(["--auto", "--dry-run", "--set", "dataset=no-such-file.csv"])
    err = capsys.readouterr().err
    first = min((p for p in load_profiles(CPU_DIR) if p.device == "cpu"), key=lambda p: (p.ladder, p.name))
    assert code == 2 and f"{first.name}.yaml with --set: key 'dataset'" in err, err
