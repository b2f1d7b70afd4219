"""Configurations written for other tools, set for the tiny CPU model: a TRL `trl grpo --config` file and an
open-r1 recipe; and the `profiles check --json` reading of files. What the unit and command-line tests of
foreign spellings share."""

from __future__ import annotations

import json
from pathlib import Path

from commands import main

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
