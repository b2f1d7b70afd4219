"""Model folders with any name, through fit and plan on the command line."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from profiles.load import load_profile
from support import cli
from support.model_configs import LLAMA_1B


def model_folder(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_1B), encoding="utf-8")
    return folder


def train_py(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, GRPO_TRAIN_LEDGER=str(tmp_path / "ledger.jsonl"), HF_HUB_OFFLINE="1")
    return cli.train_py(*args, env=env)


def test_fit_of_a_folder_with_a_non_ascii_name_prints_a_profile_that_loads_back(tmp_path):
    folder = model_folder(tmp_path, "modèle-été")
    done = train_py("fit", str(folder), "--gpu-memory", "16", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = tmp_path / "printed.yaml"
    printed.write_text(done.stdout, encoding="utf-8")
    profile = load_profile(printed)
    assert profile.name.startswith("fit-modele-ete-") and profile.model == str(folder)


def test_auto_with_a_non_ascii_model_folder_plans_from_the_derivation_not_the_shipped_rungs(tmp_path):
    folder = model_folder(tmp_path, "modèle-été")
    done = train_py("plan", "--gpu-memory", "16", "--set", f"model={folder}", "--json", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    plan = json.loads(done.stdout)
    assert plan["chosen"].startswith("fit-modele-ete-")
    assert not any("not a safe folder name" in note for note in plan["notes"])
