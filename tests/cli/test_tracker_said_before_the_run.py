"""`report_to` names a tracker whose package is not installed here: `train` refuses it before its run folder
exists (exit 2), and `profiles check` and `plan` say so first, with the same words and fix, so that a profile
that passes the check does not fail at `train`."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import train
from contract.errors import EXIT_BAD_INPUT, EXIT_OK

PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "cpu-tiny-8gen.yaml"
SAID = "key 'report_to': report_to 'wandb' needs the wandb package, which is not installed here"
FIX = "(fix: pip install wandb, or set report_to: none)"


def without_wandb(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name.split(".")[0] == "wandb" else real(name, *a)
    )


def test_profiles_check_refuses_a_tracker_that_is_not_installed(monkeypatch, capsys):
    without_wandb(monkeypatch)
    code = train.main(["profiles", "check", str(PROFILE), "--set", "report_to=wandb"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and f"error: {PROFILE} with --set: {SAID} {FIX}" in err, err
    code = train.main(["profiles", "check", str(PROFILE), "--set", "report_to=wandb", "--json"])
    (verdict,) = json.loads(capsys.readouterr().out)["files"]
    assert code == EXIT_BAD_INPUT and not verdict["ok"] and SAID in verdict["error"]
    assert train.main(["profiles", "check", str(PROFILE), "--set", "report_to=none"]) == EXIT_OK


def test_plan_says_what_train_would_refuse(monkeypatch, capsys):
    without_wandb(monkeypatch)
    code = train.main(["plan", "--profile", str(PROFILE), "--set", "report_to=wandb", "--json"])
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert code == EXIT_OK, notes  # the plan stands: it may be for another machine, where wandb is installed
    assert any(SAID in note and FIX in note for note in notes), notes
    train.main(["plan", "--profile", str(PROFILE), "--set", "report_to=none", "--json"])
    assert not any("report_to" in note for note in json.loads(capsys.readouterr().out)["notes"])
