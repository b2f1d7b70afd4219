"""TRL and open-r1 recipes on the command line: profiles check says how a file was read; plan takes them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from commands import main

REPO = Path(__file__).resolve().parents[2]

# A TRL `trl grpo --config` file: GRPOConfig, ModelConfig and ScriptArguments names, set for the tiny CPU model
TRL_CONFIG = """\
# ModelConfig
model_name_or_path: tiny
torch_dtype: float32
use_peft: true
lora_r: 16
lora_alpha: 32
lora_target_modules: all-linear
load_in_4bit: false
# ScriptArguments
dataset_name: arithmetic
dataset_train_split: train
# GRPOConfig
use_cpu: true
output_dir: trl-out
learning_rate: 5.0e-4
lr_scheduler_type: constant_with_warmup
warmup_steps: 0.05
optim: adamw_torch
gradient_checkpointing: false
per_device_train_batch_size: 4
gradient_accumulation_steps: 1
num_generations: 4
max_prompt_length: 160
max_completion_length: 32
max_seq_length: 256
temperature: 0.7
use_vllm: false
max_steps: 4
save_steps: 2
logging_steps: 1
report_to: []
reward_funcs: [accuracy, xml_count]
reward_weights: [2.0, 1.0]
loss_type: grpo
importance_sampling_level: sequence
scale_rewards: false
beta: 0.0
seed: 3407
"""

# An open-r1 recipe (recipes/<model>/grpo/config_*.yaml), its values set for the tiny CPU model
OPEN_R1_RECIPE = """\
# Model arguments
model_name_or_path: tiny
model_revision: main
torch_dtype: bfloat16
attn_implementation: flash_attention_2

# Data training arguments
dataset_name: arithmetic
num_processes: 1

# GRPO trainer config
bf16: true
use_cpu: true
use_vllm: false
do_eval: true
eval_strategy: steps
eval_steps: 2
gradient_accumulation_steps: 1
gradient_checkpointing: false
gradient_checkpointing_kwargs:
  use_reentrant: false
hub_strategy: every_save
learning_rate: 5.0e-04
log_completions: true
log_level: info
logging_first_step: true
logging_steps: 1
logging_strategy: steps
lr_scheduler_type: constant_with_warmup
max_prompt_length: 160
max_completion_length: 32
max_seq_length: 256
max_steps: 4
num_generations: 4
num_train_epochs: 1
optim: adamw_torch
load_in_4bit: false
output_dir: data/tiny-Open-R1-GRPO
overwrite_output_dir: true
per_device_eval_batch_size: 4
per_device_train_batch_size: 4
push_to_hub: false
report_to:
- none
reward_funcs:
- accuracy
- format
- tag_count
reward_weights:
- 2.0
- 0.5
- 1.0
save_strategy: steps
save_steps: 2
save_total_limit: 1
seed: 3407
temperature: 0.7
warmup_ratio: 0.05
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def check_json(capsys, *paths: Path, extra=()) -> tuple[int, dict]:
    code = main(["profiles", "check", *map(str, paths), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_both_recipes_plan_on_cpu(tmp_path):
    for name, text in (("trl.yaml", TRL_CONFIG), ("open-r1.yaml", OPEN_R1_RECIPE)):
        path = write(tmp_path, name, text)
        result = subprocess.run(
            [sys.executable, str(REPO / "train.py"), "plan", "--profile", str(path), "--json"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        plan = json.loads(result.stdout)
        assert plan["chosen"] == Path(name).stem


@pytest.mark.slow
@pytest.mark.parametrize("name, text", [("trl-config", TRL_CONFIG), ("open-r1-recipe", OPEN_R1_RECIPE)])
def test_both_recipes_train_on_cpu(tmp_path, tiny_cache, name, text):
    import os

    path = write(tmp_path, f"{name}.yaml", text)
    env = {**os.environ, "GRPO_TRAIN_CACHE": str(tiny_cache), "PYTHONUNBUFFERED": "1"}
    env.pop("GRPO_INJECT_OOM", None)
    out = tmp_path / "outputs"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "train.py"),
            "train",
            "--profile",
            str(path),
            "--output-dir",
            str(out),
            "--set",
            "eval_samples=4",
            "--set",
            "train_samples=64",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    attempt = next(out.glob("run-*/attempt-01-*"))
    summary = json.loads((attempt / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["status"] == "ok"
    assert summary["profile"]["model"] == "tiny"
    assert summary["rewards"]["total"]["first"] is not None and summary["rewards"]["total"]["last"] is not None
