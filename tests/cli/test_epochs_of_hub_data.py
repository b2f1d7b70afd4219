"""An epoch-based TRL recipe plans anywhere: `dataset_name: openai/gsm8k` with `num_train_epochs: 1` and no
max_steps plans one epoch of GSM8K's 7,473 training problems with no network and an empty Hugging Face cache."""

from __future__ import annotations

import json
import math

from support.cli import train_py
from support.recipes import write

# A TRL `trl grpo --config` file for a card: ModelConfig, ScriptArguments and GRPOConfig names; the run's length
# is one epoch, not a number of steps
TRL_EPOCH_RECIPE = """\
model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct
torch_dtype: bfloat16
use_peft: true
lora_r: 16
lora_alpha: 32
dataset_name: openai/gsm8k
dataset_config: main
dataset_train_split: train
learning_rate: 1.0e-5
per_device_train_batch_size: 8
gradient_accumulation_steps: 4
num_generations: 8
max_prompt_length: 256
max_completion_length: 256
num_train_epochs: 1
reward_funcs: [accuracy]
report_to: []
"""


def test_one_epoch_of_gsm8k_by_its_hub_name_plans_offline(tmp_path):
    path = write(tmp_path, "gsm8k-epoch.yaml", TRL_EPOCH_RECIPE)
    done = train_py(
        "plan",
        "--profile",
        str(path),
        "--gpu-memory",
        "24",
        "--gpu-name",
        "NVIDIA L4",
        "--json",
        HF_HOME=str(tmp_path / "empty-hf-home"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    plan = json.loads(done.stdout)
    run = next(c for c in plan["candidates"] if c["profile"] == "gsm8k-epoch")["run"]
    assert run["basis"].startswith("num_train_epochs 1 of 7,473 prompts") and "openai/gsm8k" in run["basis"]
    assert run["prompts"] >= 7473 and run["epochs"] == 1.0
    assert run["steps"] == math.ceil(7473 / (8 * 4 // 8))  # 4 prompts a step (32 completions of 8 each)
