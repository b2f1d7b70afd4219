"""Every key of TRL's GRPOConfig, ModelConfig and `trl grpo`'s script arguments, and of open-r1's GRPO script, is
read: honoured, translated, or said to be unused; what cannot be honoured is listed in one pass with its fix, with
every unknown key of the file. open-r1's codeforces recipe is refused in one message."""

from __future__ import annotations

import dataclasses

import pytest

from contract.errors import ProfileError
from profiles.aliases import ALIASES, DECIDED, problems_of
from profiles.load import load_profile
from profiles.schema import Profile
from profiles.unused_keys import AT_DEFAULT, UNUSED
from support.recipes import check_json, write

# open-r1, src/open_r1/configs.py: the keys its GRPOConfig and GRPOScriptArguments add to TRL's
OPEN_R1_KEYS = (
    "benchmarks",
    "callbacks",
    "chat_template",
    "system_prompt",
    "hub_model_revision",
    "num_completions_to_print",
    "overwrite_hub_revision",
    "push_to_hub_revision",
    "wandb_entity",
    "wandb_project",
    "wandb_run_group",
    "wandb_log_unique_prompts",
    "reward_funcs",
    "cosine_min_value_wrong",
    "cosine_max_value_wrong",
    "cosine_min_value_correct",
    "cosine_max_value_correct",
    "cosine_max_len",
    "repetition_n_grams",
    "repetition_max_penalty",
    "code_language",
    "code_eval_test_batch_size",
    "parallel_code_exec_per_proc",
    "dataset_prompt_column",
    "e2b_router_url",
    "morph_router_url",
    "code_provider",
    "ioi_provider",
)

# open-r1, recipes/Qwen2.5-Coder-7B-Instruct/grpo/config_codeforces.yaml (keys and values as published)
CODEFORCES = """\
model_name_or_path: Qwen/Qwen2.5-7B-Instruct
model_revision: main
torch_dtype: bfloat16
attn_implementation: flash_attention_2
dataset_name: open-r1/codeforces-verifiable
dataset_prompt_column: prompt_c++17
system_prompt: "You are a helpful AI Assistant that provides well-reasoned and detailed responses. You first \\
think about the reasoning process as an internal monologue and then provide the user with the answer. Respond in \\
the following format: <think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>"
callbacks:
- push_to_hub_revision
benchmarks:
- lcb_v4
beta: 0.0
loss_type: dr_grpo
scale_rewards: false
bf16: true
do_eval: false
eval_strategy: "no"
use_vllm: true
vllm_device: auto
vllm_gpu_memory_utilization: 0.7
gradient_accumulation_steps: 16
gradient_checkpointing: true
gradient_checkpointing_kwargs:
  use_reentrant: false
hub_model_id: open-r1/Qwen2.5-Coder-7B-Instruct-Codeforces-GRPO
hub_model_revision: v01.00
hub_strategy: every_save
learning_rate: 1.0e-06
log_completions: true
log_level: info
logging_first_step: true
logging_steps: 1
logging_strategy: steps
lr_scheduler_type: constant_with_warmup
max_grad_norm: 0.2
max_prompt_length: 2000
max_completion_length: 8192
max_steps: -1
num_generations: 16
num_train_epochs: 40
output_dir: data/Qwen2.5-Coder-7B-Instruct-Codeforces-GRPO_v01.00
overwrite_output_dir: true
per_device_train_batch_size: 8
push_to_hub: true
report_to:
- none
reward_funcs:
- cf_code
- code_format
reward_weights:
- 1.0
- 0.1
save_strategy: "steps"
save_steps: 0.05
save_total_limit: 1
seed: 42
temperature: 0.7
wandb_entity: huggingface
wandb_project: open-r1
warmup_ratio: 0.1
mask_truncated_completions: true
code_language: cpp
code_eval_test_batch_size: 20
"""


def _fields(cls) -> dict:
    out = {}
    for field in dataclasses.fields(cls):
        if field.default is not dataclasses.MISSING:
            out[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            out[field.name] = field.default_factory()
        else:
            out[field.name] = dataclasses.MISSING
    return out


def test_every_key_of_trl_is_read():
    trl = pytest.importorskip("trl")
    script = pytest.importorskip("trl.scripts.grpo")
    keys = {**_fields(trl.GRPOConfig), **_fields(trl.ModelConfig), **_fields(script.GRPOScriptArguments)}
    unread = sorted(key for key in keys if key not in ALIASES and key not in Profile.model_fields)
    assert unread == []
    from trainer.config import LOSS_SETTINGS

    for key, (default, _) in AT_DEFAULT.items():
        if key in keys:  # TRL's default, or what the trainer pins in its place
            assert default in (keys[key], LOSS_SETTINGS.get(key, keys[key])), key


def test_every_key_of_open_r1_is_read():
    assert [key for key in OPEN_R1_KEYS if key not in ALIASES and key not in Profile.model_fields] == []
    assert not set(UNUSED) & set(AT_DEFAULT)


def test_a_key_honoured_at_its_default_is_read_there_and_listed_elsewhere(tmp_path):
    text = "model_name_or_path: tiny\nuse_cpu: true\nadam_epsilon: 1.0e-8\nuse_dora: false\nddp_timeout: 60\n"
    profile = load_profile(write(tmp_path, "ok.yaml", text))
    decided = {r.key for r in profile.readings if r.kind == DECIDED}
    assert {"adam_epsilon", "use_dora", "ddp_timeout"} <= decided
    path = write(tmp_path, "no.yaml", text.replace("use_dora: false", "use_dora: true").replace("1.0e-8", "1.0e-6"))
    error = pytest.raises(ProfileError, load_profile, path).value
    assert [(p.key, p.fix) for p in problems_of(error)] == [
        ("adam_epsilon", "remove it (the default, 1e-08, runs here)"),
        ("use_dora", "remove it (the default, False, runs here)"),
    ]


def test_every_unknown_key_is_listed_at_once(tmp_path):
    text = "model_name_or_path: tiny\nuse_cpu: true\nleraning_rate: 1.0e-5\nmy_key: 1\nnum_generatons: 4\n"
    error = pytest.raises(ProfileError, load_profile, write(tmp_path, "typos.yaml", text)).value
    found = {p.key: p.fix for p in problems_of(error)}
    assert set(found) == {"leraning_rate", "my_key", "num_generatons"}
    assert found["leraning_rate"] == "did you mean 'learning_rate'?"


def test_the_codeforces_recipe_is_refused_in_one_pass(tmp_path, capsys):
    code, out = check_json(capsys, write(tmp_path, "config_codeforces.yaml", CODEFORCES))
    problems = {p["key"]: p for p in out["files"][0]["problems"]}
    assert code == 2 and set(problems) == {"callbacks", "hub_model_revision", "code_language", "reward_funcs"}
    assert "cf_code" in problems["reward_funcs"]["reason"] and "code" in problems["reward_funcs"]["fix"]
    assert all(p["fix"] for p in problems.values())
    # its lengths are the recipe's own: max_seq_length derived, not a fifth problem
    assert "max_seq_length" not in problems


# open-r1, recipes/Qwen2.5-1.5B-Instruct/grpo/config_demo_code.yaml (its keys and values; launched on 7 processes)
CODE_DEMO = """\
model_name_or_path: Qwen/Qwen2.5-1.5B-Instruct
model_revision: main
torch_dtype: bfloat16
attn_implementation: flash_attention_2
dataset_name: open-r1/verifiable-coding-problems-python-10k
dataset_configs:
- default
system_prompt: "You are a helpful AI Assistant that provides well-reasoned and detailed responses. You first \\
think about the reasoning process as an internal monologue and then provide the user with the answer. Respond in \\
the following format: <think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>"
beta: 0.01
bf16: true
use_vllm: true
vllm_device: auto
vllm_gpu_memory_utilization: 0.9
do_eval: false
gradient_accumulation_steps: 4
gradient_checkpointing: true
gradient_checkpointing_kwargs:
  use_reentrant: false
hub_model_id: Qwen2.5-1.5B-Open-R1-Code-GRPO
hub_strategy: every_save
learning_rate: 5.0e-07
log_completions: true
log_level: info
logging_first_step: true
logging_steps: 1
logging_strategy: steps
lr_scheduler_type: cosine_with_min_lr
lr_scheduler_kwargs:
  min_lr_rate: 0.1
max_prompt_length: 1024
max_completion_length: 2048
max_steps: 500
num_generations: 14
num_train_epochs: 1
output_dir: data/Qwen2.5-1.5B-Open-R1-Code-GRPO
overwrite_output_dir: true
per_device_train_batch_size: 16
push_to_hub: true
report_to:
- none
reward_funcs:
- code
- format
reward_weights:
- 1.0
- 0.1
save_strategy: "steps"
save_steps: 50
save_total_limit: 1
seed: 42
temperature: 1.0
warmup_ratio: 0.03
"""


def test_the_code_demo_loads_as_published(tmp_path):
    from trainer.config import grpo_config_kwargs

    profile = load_profile(write(tmp_path, "config_demo_code.yaml", CODE_DEMO), ["num_gpus=7"])
    assert set(profile.rewards) == {"code", "think_format"}
    assert profile.lr_scheduler_type == "cosine_with_min_lr" and profile.lr_scheduler_kwargs == {"min_lr_rate": 0.1}
    assert profile.adam_beta2 == 0.999 and profile.lora_rank == 0  # TRL's, as the recipe leaves them
    kwargs = grpo_config_kwargs(profile, "out", device="cuda", bf16=True, use_vllm=True)
    assert kwargs["lr_scheduler_kwargs"] == {"min_lr_rate": 0.1} and kwargs["adam_beta2"] == 0.999


def test_a_min_lr_cosine_needs_its_floor(tmp_path):
    text = CODE_DEMO.replace("lr_scheduler_kwargs:\n  min_lr_rate: 0.1\n", "")
    error = pytest.raises(ProfileError, load_profile, write(tmp_path, "no-floor.yaml", text), ["num_gpus=7"]).value
    assert error.key == "lr_scheduler_kwargs" and "min_lr_rate" in error.fix


def test_a_code_recipe_judges_answers_by_their_tests(tmp_path):
    profile = load_profile(write(tmp_path, "config_demo_code.yaml", CODE_DEMO), ["num_gpus=7"])
    assert profile.correctness == "binary_code"
    note = next(r for r in profile.readings if r.key == "reward_funcs").note
    assert "correctness: binary_code" in note
