"""Tools on the CPU, through train.py as a user runs it: the calculator profile trains through TRL's multi-turn
loop and reports its tool figures; a hostile tool (it raises, hangs, floods, prints, exits) cannot take the run
down; an environment whose reset fails ends the attempt before the model loads, naming its line."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from support.cli import REPO, start_train_py
from support.waiting import wait_until

TOOLS = REPO / "profiles" / "cpu-tiny-tools.yaml"
GUESS = REPO / "profiles" / "cpu-tiny-guess.yaml"
SHORT = ["--set", "max_steps=2", "--set", "save_steps=2", "--set", "eval_samples=8", "--set", "train_samples=64"]

HOSTILE = '''import sys
import time

CALLS = []


def calculate(expression: str) -> str:
    """A calculator that misbehaves once in each way, then answers.

    Args:
        expression: the arithmetic to compute
    """
    CALLS.append(expression)
    turn = len(CALLS)
    if turn == 1:
        raise RuntimeError("hostile: raised")
    if turn == 2:
        while True:  # hangs, swallowing ordinary exceptions
            try:
                time.sleep(0.05)
            except Exception:
                pass
    if turn == 3:
        return "7" * (10 * 1024 * 1024)
    if turn == 4:
        print("PRINTED-BY-HOSTILE-TOOL " * 100)
        return "12"
    if turn == 5:
        sys.exit(4)
    left, _, right = expression.partition("+")
    return str(int(left) + int(right)) if right else expression
'''

BROKEN_ENVIRONMENT = '''class Broken:
    def reset(self, answer=None, **row):
        raise LookupError("no game for " + str(answer))

    def guess(self, number: float) -> str:
        """Guess.

        Args:
            number: the guess
        """
        return "lower"
'''


@pytest.fixture
def env(tiny_tools_model, tiny_cache):
    values = dict(os.environ, GRPO_TRAIN_CACHE=str(tiny_cache), PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="")
    values["OMP_NUM_THREADS"] = "1"
    for name in ("GRPO_INJECT_OOM", "GRPO_TRAIN_NO_UNSLOTH", "GRPO_ATTEMPT_ESTIMATE_GIB", "HF_TOKEN"):
        values.pop(name, None)
    return values


def train(tmp_path: Path, env: dict, *args: str) -> tuple[int, str, Path]:
    """Run train.py until it ends (for as long as its run folder changes); (exit status, output, attempt folder)."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    log = tmp_path / "train.out"
    with open(log, "w") as handle:
        process = start_train_py(
            "train",
            "--output-dir",
            str(out),
            *args,
            cwd=tmp_path,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
        wait_until(lambda: process.poll() is not None, watch=[out, log], what="train.py's end")
    attempts = sorted(out.glob("run-*/attempt-*"))
    return process.returncode, log.read_text(), attempts[-1] if attempts else out


def test_the_calculator_profile_trains_through_trls_turns(tmp_path, env):
    code, output, attempt = train(tmp_path, env, "--profile", str(TOOLS), *SHORT)
    assert code == 0, output[-3000:]
    summary = json.loads((attempt / "summary.json").read_text())
    tools = summary["tools"]
    assert tools["offered"] == ["calculate"] and tools["max_tool_calls"] == 2
    for when in ("before", "after"):
        assert set(tools[when]) >= {"tool_calls_per_answer", "answers_with_tool", "tool_success"}
    assert sum(tools["guard"]["calls"].values()) > 0
    rows = [json.loads(line) for line in (attempt / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(set(row["tools"]) == {"calls_per_completion", "failure_share"} for row in rows)
    assert summary["loss_settings"]["trainer"] == "GRPOTrainer"
    assert "held-out answers with the tools" in (attempt / "report.md").read_text()


def test_a_hostile_tool_cannot_take_the_run_down(tmp_path, env):
    (tmp_path / "hostile.py").write_text(HOSTILE, encoding="utf-8")
    code, output, attempt = train(
        tmp_path, env, "--profile", str(TOOLS), *SHORT, "--set", "tools=[hostile.py:calculate]"
    )
    assert code == 0, output[-3000:]
    guard = json.loads((attempt / "summary.json").read_text())["tools"]["guard"]
    assert guard["calls"]["calculate"] >= 5
    assert guard["failures"]["calculate"] >= 3  # raised, stopped, exited
    assert guard["timeouts"] == {"calculate": 1}
    assert guard["outputs_cut"] == {"calculate": 1}
    assert guard["printed_chars"]["calculate"] > 0
    rows = [json.loads(line) for line in (attempt / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["tools"]["failure_share"] > 0  # TRL counted the failures as its own: they reached it as errors
    assert "PRINTED-BY-HOSTILE-TOOL" not in output
    assert "PRINTED-BY-HOSTILE-TOOL" not in (attempt / "train.log").read_text()
    assert json.loads((attempt / "outcome.json").read_text())["status"] == "ok"


def test_an_environment_whose_reset_fails_ends_the_attempt_before_the_model_loads(tmp_path, env):
    (tmp_path / "broken_env.py").write_text(BROKEN_ENVIRONMENT, encoding="utf-8")
    code, output, attempt = train(
        tmp_path, env, "--profile", str(GUESS), *SHORT, "--set", "environment=broken_env.py:Broken"
    )
    assert code != 0
    outcome = json.loads((attempt / "outcome.json").read_text())
    assert outcome["status"] == "error"
    assert "environment Broken reset failed: LookupError: no game for" in outcome["error"]
    assert f"{tmp_path / 'broken_env.py'}:3" in outcome["error"]
    assert "LlamaForCausalLM" not in (attempt / "train.log").read_text()  # stopped before the model loaded
