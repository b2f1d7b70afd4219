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


# Published recipes, as their authors wrote them (values kept, for the loader's tests; nothing here is trained).
# open-r1, recipes/Qwen2.5-1.5B-Instruct/grpo/config_demo.yaml
OPEN_R1_QWEN_1_5B_DEMO = """\
model_name_or_path: Qwen/Qwen2.5-1.5B-Instruct
model_revision: main
torch_dtype: bfloat16
attn_implementation: flash_attention_2
dataset_name: open-r1/OpenR1-Math-220k
dataset_prompt_column: problem
system_prompt: "You are a helpful AI Assistant that provides well-reasoned and detailed responses. You first \\
think about the reasoning process as an internal monologue and then provide the user with the answer. Respond in \\
the following format: <think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>"
bf16: true
use_vllm: true
do_eval: false
gradient_accumulation_steps: 4
gradient_checkpointing: true
gradient_checkpointing_kwargs:
  use_reentrant: false
hub_model_id: Qwen2.5-1.5B-Open-R1-GRPO
hub_strategy: every_save
learning_rate: 2.0e-05
log_completions: true
log_level: info
logging_first_step: true
logging_steps: 1
logging_strategy: steps
lr_scheduler_type: cosine
max_prompt_length: 512
max_completion_length: 1024
max_steps: -1
num_generations: 16
num_train_epochs: 1
output_dir: data/Qwen2.5-1.5B-Open-R1-GRPO
overwrite_output_dir: true
per_device_eval_batch_size: 16
per_device_train_batch_size: 16
push_to_hub: true
report_to:
- wandb
reward_funcs:
- accuracy
- format
- tag_count
reward_weights:
- 1.0
- 1.0
- 1.0
save_strategy: "epoch"
save_total_limit: 1
seed: 42
warmup_ratio: 0.1
"""

# open-r1, recipes/Qwen2.5-Math-7B/grpo/config_simple_rl.yaml (launched with accelerate --num_processes=7)
OPEN_R1_QWEN_MATH_7B = """\
model_name_or_path: Qwen/Qwen2.5-Math-7B
model_revision: main
torch_dtype: bfloat16
attn_implementation: flash_attention_2
dataset_name: DigitalLearningGmbH/MATH-lighteval
dataset_config: default
dataset_prompt_column: problem
system_prompt: "You are a helpful AI Assistant, designed to provided well-reasoned and detailed responses. You \\
FIRST think about the reasoning process as an internal monologue and then provide the user with the answer. The \\
reasoning process MUST BE enclosed within <think> and </think> tags."
bf16: true
use_vllm: true
do_eval: true
eval_strategy: steps
eval_steps: 100
gradient_accumulation_steps: 8
gradient_checkpointing: true
gradient_checkpointing_kwargs:
  use_reentrant: false
hub_model_id: Qwen-2.5-7B-Simple-RL
hub_strategy: every_save
learning_rate: 3.0e-06
log_completions: true
log_level: info
logging_first_step: true
logging_steps: 5
logging_strategy: steps
lr_scheduler_type: cosine
max_prompt_length: 512
max_completion_length: 1024
max_steps: -1
num_generations: 7
num_train_epochs: 1
output_dir: data/Qwen-2.5-7B-Simple-RL
overwrite_output_dir: true
per_device_eval_batch_size: 16
per_device_train_batch_size: 16
push_to_hub: true
report_to:
- wandb
reward_funcs:
- accuracy
- format
reward_weights:
- 1.0
- 1.0
save_strategy: "no"
seed: 42
warmup_ratio: 0.1
"""

# TRL's `trl grpo --config` usage: its registry's reward names in both spellings, evaluation off in both keys,
# and save_steps as a share of the run, as TRL's docs and GRPOConfig allow
TRL_CLI_CONFIG = """\
model_name_or_path: Qwen/Qwen2-0.5B
dataset_name: trl-lib/DeepMath-103K
reward_funcs:
- accuracy_reward
- trl.rewards.think_format_reward
do_eval: false
eval_strategy: "no"
max_steps: 200
save_steps: 0.05
output_dir: Qwen2-0.5B-GRPO
"""
