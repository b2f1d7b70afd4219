"""TRL and open-r1 recipes on the command line: profiles check says how a file was read; plan takes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cli import cpu_run_env, train_py
from support.recipes import OPEN_R1_RECIPE, TRL_CONFIG, write


def test_both_recipes_plan_on_cpu(tmp_path):
    for name, text in (("trl.yaml", TRL_CONFIG), ("open-r1.yaml", OPEN_R1_RECIPE)):
        path = write(tmp_path, name, text)
        result = train_py("plan", "--profile", str(path), "--json")
        assert result.returncode == 0, result.stderr[-2000:]
        plan = json.loads(result.stdout)
        assert plan["chosen"] == Path(name).stem


@pytest.mark.parametrize("name, text", [("trl-config", TRL_CONFIG), ("open-r1-recipe", OPEN_R1_RECIPE)])
def test_both_recipes_train_on_cpu(tmp_path, tiny_cache, name, text):
    path = write(tmp_path, f"{name}.yaml", text)
    env = cpu_run_env(tiny_cache)
    out = tmp_path / "outputs"
    result = train_py(
        "train",
        "--profile",
        str(path),
        "--output-dir",
        str(out),
        "--set",
        "eval_samples=4",
        "--set",
        "train_samples=64",
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    attempt = next(out.glob("run-*/attempt-01-*"))
    summary = json.loads((attempt / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["status"] == "ok"
    assert summary["profile"]["model"] == "tiny"
    assert summary["rewards"]["total"]["first"] is not None and summary["rewards"]["total"]["last"] is not None
