"""WHAT keys a profile has: each key's type, default, range and help line, the section it is listed under and
what it is to the rest of the project (its tags), in the order `--help`, profile-keys.md and schema.json list
them. profiles.schema.Profile is these keys with the rules that tie them together.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, StrictBool, StrictStr
from pydantic.fields import FieldInfo

from profiles.field_types import (
    Checkpointing,
    EvalSteps,
    LossType,
    ModuleNames,
    Number,
    RewardWeights,
    SamplingLevel,
    ScaleRewards,
    ScheduleArguments,
    Steps,
    TemplateSwitches,
    ToolEntries,
    TopK,
    Whole,
)
from profiles.keys import (
    DEFAULT_REWARDS,
    DEFAULT_TARGET_MODULES,
    EVAL_AUTO,
    NAME_PATTERN,
    Optimizer,
    Scheduler,
    Tracker,
    VllmMode,
)
from tasks.prompts import SYSTEM_PROMPT

# What a key is to the rest of the project, said once here and read back with profiles.schema.keys_tagged:
MEMORY = "memory"  # changes how much memory a step needs: the ledger's fingerprint of a shape
LEVER = "lever"  # the fit solver and the OOM shrink may move it: what a plan shows a candidate will run with
SHAPE = "shape"  # decides whether a checkpoint's adapter loads into another attempt's model
DERIVED = "derived"  # may be written `auto`: the plan derives it for the card (a value written is pinned)
TAGS = (MEMORY, LEVER, SHAPE, DERIVED)


def _key(default: Any, help: str, section: str, tags: tuple[str, ...] = (), **limits: Any) -> Any:
    """A profile key: its default, one help line, the section it is listed under, what it is to the rest of
    the project (TAGS), and its range."""
    extra: dict[str, Any] = {"section": section, "tags": list(tags)}
    if isinstance(default, (list, dict)):
        return Field(default_factory=lambda d=default: type(d)(d), description=help, json_schema_extra=extra, **limits)
    return Field(default, description=help, json_schema_extra=extra, **limits)


def extra_of(info: FieldInfo) -> dict[str, Any]:
    """The section and tags `_key` gave a profile key (its json_schema_extra)."""
    extra = info.json_schema_extra
    assert isinstance(extra, dict), "every profile key is made by _key"
    return extra


class ProfileFields(BaseModel):
    """A profile's keys, in the order every listing shows them; profiles.schema.Profile adds the rules."""

    # --- identity ---
    name: StrictStr = _key(
        "", "profile name (default: the file's stem); letters, digits, '.', '_', '-'", "identity", pattern=NAME_PATTERN
    )
    description: StrictStr = _key("", "one line: what card this profile targets", "identity")
    ladder: Whole = _key(100, "position on the ladder: lower is more ambitious and tried first", "identity", ge=0)
    # --- model ---
    model: StrictStr = _key(
        "tiny",
        "hub id or local folder; `tiny` = the offline CPU model (`tiny-long`: the same, warm-started to write long "
        "answers)",
        "model",
        tags=(MEMORY, SHAPE),
    )
    device: Literal["cuda", "cpu"] = _key("cuda", "where to train", "model", tags=(MEMORY, LEVER))
    load_in_4bit: StrictBool = _key(
        True, "load base weights in 4-bit NF4 (bitsandbytes, GPU only)", "model", tags=(MEMORY, LEVER, SHAPE)
    )
    trust_remote_code: StrictBool = _key(
        False, "run the model repository's own code (off unless you trust it)", "model"
    )
    max_seq_length: Whole = _key(
        1024, "longest prompt + completion in tokens", "model", tags=(MEMORY, LEVER, DERIVED), ge=16
    )
    max_prompt_length: Whole = _key(
        256, "prompts longer than this (tokens) are dropped", "model", tags=(MEMORY, LEVER), ge=8
    )
    max_completion_length: Whole = _key(
        512, "tokens generated per completion", "model", tags=(MEMORY, LEVER, DERIVED), ge=1
    )
    expected_completion_length: Whole = _key(
        0,
        "tokens a completion runs on average, for the planned time per step (memory is planned at "
        "max_completion_length); 0 = derived from the task's reference solutions and the model's tokenizer",
        "model",
        tags=(LEVER, DERIVED),
        ge=0,
    )
    # --- LoRA ---
    lora_rank: Whole = _key(16, "LoRA rank; 0 = full fine-tuning", "lora", tags=(MEMORY, LEVER, SHAPE), ge=0, le=512)
    lora_alpha: Whole = _key(32, "LoRA alpha (scale = alpha / rank)", "lora", tags=(LEVER,), ge=1)
    lora_dropout: Number = _key(0.0, "LoRA dropout", "lora", ge=0.0, lt=1.0)
    target_modules: ModuleNames = _key(
        list(DEFAULT_TARGET_MODULES), "modules that get LoRA adapters", "lora", tags=(MEMORY, SHAPE)
    )
    # --- generation ---
    fast_inference: StrictBool = _key(
        True,
        "generate with vLLM inside the process (Unsloth fast_inference)",
        "generation",
        tags=(MEMORY, LEVER, DERIVED),
    )
    gpu_memory_utilization: Number = _key(
        0.5,
        "vLLM's share of the whole GPU, reserved at start",
        "generation",
        tags=(MEMORY, LEVER, DERIVED),
        gt=0.0,
        lt=1.0,
    )
    vllm_standby: StrictBool = _key(
        False,
        "UNSLOTH_VLLM_STANDBY: vLLM sleeps during training and lends its memory",
        "generation",
        tags=(MEMORY, LEVER, DERIVED),
    )
    vllm_max_num_seqs: Whole = _key(
        0,
        "sequences vLLM generates at once (max_num_seqs); 0 = as Unsloth sizes it from its KV cache (8 to 256)",
        "generation",
        tags=(MEMORY, LEVER, DERIVED),
        ge=0,
        le=4096,
    )
    num_generations: Whole = _key(
        4, "completions sampled per prompt (the GRPO group)", "generation", tags=(MEMORY, LEVER), ge=2
    )
    temperature: Number = _key(1.0, "sampling temperature", "generation", gt=0.0, le=5.0)
    top_p: Number = _key(1.0, "nucleus sampling", "generation", gt=0.0, le=1.0)
    top_k: TopK = _key(0, "sample from the k likeliest tokens; 0 (or -1) = no limit", "generation", ge=0)
    min_p: Number | None = _key(
        None, "drop tokens below min_p x the likeliest token's probability; empty = off", "generation", ge=0.0, le=1.0
    )
    repetition_penalty: Number = _key(
        1.0,
        "above 1 penalises tokens already in the prompt or completion; 1 = off; below 1 favours them (from 0.5)",
        "generation",
        ge=0.5,
        le=10.0,
    )
    # --- batch ---
    per_device_train_batch_size: Whole = _key(
        2, "completions per forward/backward (not prompts)", "batch", tags=(MEMORY, LEVER, DERIVED), ge=1
    )
    gradient_accumulation_steps: Whole = _key(
        2, "micro-batches per optimizer step", "batch", tags=(LEVER, DERIVED), ge=1
    )
    # --- optimisation ---
    optim: Optimizer = _key(
        "adamw_8bit", "optimizer (8-bit variants need bitsandbytes, i.e. a GPU)", "optimisation", tags=(MEMORY,)
    )
    gradient_checkpointing: Checkpointing = _key(
        "unsloth",
        "activation checkpointing: unsloth (offloads to RAM), true, false",
        "optimisation",
        tags=(MEMORY, LEVER, DERIVED),
    )
    learning_rate: Number = _key(5e-6, "peak learning rate", "optimisation", gt=0.0, le=1.0)
    lr_scheduler_type: Scheduler = _key("cosine", "learning-rate schedule", "optimisation")
    lr_scheduler_kwargs: ScheduleArguments = _key(
        {},
        "arguments of the schedule (transformers' lr_scheduler_kwargs), e.g. {min_lr_rate: 0.1} for cosine_with_min_lr",
        "optimisation",
    )
    adam_beta1: Number = _key(0.9, "AdamW's first-moment decay", "optimisation", gt=0.0, lt=1.0)
    adam_beta2: Number = _key(
        0.99,
        "AdamW's second-moment decay (Unsloth's GRPO notebooks; TRL's default is 0.999)",
        "optimisation",
        gt=0.0,
        lt=1.0,
    )
    warmup_ratio: Number = _key(0.1, "share of max_steps spent warming up", "optimisation", ge=0.0, lt=1.0)
    weight_decay: Number = _key(0.1, "AdamW weight decay", "optimisation", ge=0.0)
    max_grad_norm: Number = _key(0.1, "gradient clipping", "optimisation", gt=0.0)
    beta: Number = _key(
        0.0,
        "KL coefficient; > 0 adds a forward pass of the reference model each step (the "
        "base with the adapter off; without LoRA, a full copy of the model)",
        "optimisation",
        tags=(MEMORY,),
        ge=0.0,
        le=10.0,
    )
    # --- GRPO loss: TRL's GRPOConfig names, given alike to Unsloth's patched trainer and to plain TRL ---
    loss_type: LossType = _key(
        "dapo",
        "how token losses are aggregated: dapo (tokens of the whole batch), grpo (per sequence; with "
        "importance_sampling_level sequence: GSPO), dr_grpo (a constant), bnpo (tokens of the micro-batch), "
        "cispo, sapo, luspo (sequence level), vespo",
        "loss",
    )
    epsilon: Number = _key(
        0.2, "clipping: the importance ratio is kept within [1 - epsilon, 1 + epsilon_high]", "loss", gt=0.0, lt=1.0
    )
    epsilon_high: Number | None = _key(
        None,
        "upper clipping bound; empty = epsilon (DAPO's clip-higher uses 0.28); for cispo the cap of the weight "
        "itself, at least 1 (empty = 5, TRL's recommendation); not used by sapo and vespo",
        "loss",
        gt=0.0,
    )
    delta: Number | None = _key(
        None,
        "two-sided clipping: the ratio is also capped at delta (INTELLECT-2); empty = off; must exceed 1 + epsilon",
        "loss",
        gt=1.0,
    )
    importance_sampling_level: SamplingLevel = _key(
        "token", "importance ratio per token, or one per sequence (GSPO; with loss_type grpo)", "loss"
    )
    scale_rewards: ScaleRewards = _key(
        "group",
        "advantages divided by the reward's standard deviation within each group, the whole batch, or none (Dr. GRPO)",
        "loss",
    )
    mask_truncated_completions: StrictBool = _key(
        False, "leave completions cut at max_completion_length out of the loss (DAPO)", "loss"
    )
    num_iterations: Whole = _key(
        1,
        "optimisation passes over each generation batch (GRPO's mu); above 1 "
        "generates every mu steps and adds one forward pass for the old policy's "
        "log-probs",
        "loss",
        ge=1,
        le=64,
    )
    steps_per_generation: Whole = _key(
        0,
        "micro-batches one generation batch serves (TRL's steps_per_generation); 0 = gradient_accumulation_steps, "
        "a generation per optimizer step; a multiple of it generates once for several optimizer steps, the later "
        "ones on completions of an older policy (TRL's clipped ratio corrects for it)",
        "batch",
        tags=(MEMORY, LEVER),
        ge=0,
        le=1024,
    )
    # --- scale-out (more than one GPU: accelerate, DeepSpeed ZeRO, a vLLM server) ---
    num_gpus: Whole = _key(
        1,
        "data-parallel world size: training processes, one GPU each (processes on a cpu "
        "profile); above 1 trains through accelerate without Unsloth",
        "scale-out",
        tags=(MEMORY, LEVER),
        ge=1,
        le=4096,
    )
    zero_stage: Whole = _key(
        0,
        "DeepSpeed ZeRO stage over the training GPUs: 0 plain DDP, 1 shards optimizer "
        "states, 2 also gradients, 3 also parameters",
        "scale-out",
        tags=(MEMORY, LEVER),
        ge=0,
        le=3,
    )
    vllm_mode: VllmMode = _key(
        "colocate",
        "where vLLM generates: colocate (inside each training process) or server (`trl vllm-serve` on GPUs of its own)",
        "scale-out",
        tags=(MEMORY, LEVER),
    )
    vllm_server_gpus: Whole = _key(
        1,
        "server mode: GPUs of the vLLM server, after the training GPUs",
        "scale-out",
        tags=(MEMORY, LEVER),
        ge=1,
        le=4096,
    )
    vllm_tensor_parallel: Whole = _key(
        1,
        "GPUs that hold one vLLM copy of the model (tensor parallelism); must "
        "divide vllm_server_gpus (server) or num_gpus (colocate)",
        "scale-out",
        tags=(MEMORY, LEVER),
        ge=1,
        le=64,
    )
    # --- run ---
    max_steps: Steps = _key(
        0,
        "optimizer steps; 0 or auto = the plan's run length: num_train_epochs, else --hours, else one epoch "
        "of the training split within 4 hours of predicted steps",
        "run",
        tags=(DERIVED,),
        ge=0,
    )
    num_train_epochs: Number = _key(
        0.0,
        "passes over the training split (TRL's name) when max_steps is auto; 0 = not set",
        "run",
        ge=0.0,
        le=10000.0,
    )
    min_updates: Whole = _key(
        100,
        "the fewest optimizer steps a planned run may have: a derived rung below it gives way to the next one, and "
        "any other plan below it says so with what would reach it; 0 = no floor",
        "run",
        ge=0,
    )
    save_steps: Whole = _key(50, "checkpoint every N steps", "run", ge=1)
    seed: Whole = _key(3407, "random seed (data order, sampling, LoRA init)", "run", ge=0, le=2**32 - 1)
    report_to: Tracker = _key("none", "experiment tracker passed to TRL", "run")
    probe: StrictBool = _key(
        True,
        "before training, one step at the longest prompts and full-length completions: "
        "an OOM shows before any step is spent; its peak is recorded",
        "run",
    )
    length_probe: Whole = _key(
        24,
        "before training, answers sampled for this many training prompts as training samples them, at "
        "max_completion_length: answers cut at the cap re-plan it before any step; their lengths are recorded "
        "for the next plan; 0 = off",
        "run",
        ge=0,
        le=256,
    )
    save_merged: StrictBool = _key(False, "also save a merged 16-bit model at the end (GPU)", "run")
    hub_model_id: StrictStr = _key(
        "",
        "push the adapter (the merged model with save_merged) to this hub repo "
        "org/name at the end, when HF_TOKEN is set",
        "run",
    )
    # --- task ---
    dataset: StrictStr = _key(
        "gsm8k",
        "gsm8k, arithmetic or programs (generated offline), a hub dataset id org/name, or a "
        "local .jsonl/.json/.csv/.parquet file or folder of them",
        "task",
    )
    dataset_config: StrictStr = _key("", "hub datasets: the configuration (subset) name; empty = the default", "task")
    train_split: StrictStr = _key("train", "your data: the split trained on", "task", min_length=1)
    test_split: StrictStr = _key(
        "test",
        "your data: the split scored before and after; when absent, a seeded tenth of the training split is held out",
        "task",
        min_length=1,
    )
    question_field: StrictStr = _key(
        "", "your data: the column holding the question; empty = the first of question, prompt, problem", "task"
    )
    answer_field: StrictStr = _key(
        "", "your data: the column holding the gold answer; empty = the first of answer, solution, label", "task"
    )
    answer_pattern: StrictStr = _key(
        "",
        "your data: a regex whose first group is the gold answer in "
        "answer_field, e.g. '#### (.+)'; empty = the whole field",
        "task",
    )
    system_prompt: StrictStr = _key(
        SYSTEM_PROMPT,
        "the system turn before each question (default: the "
        "<reasoning>/<answer> format instruction); empty = no system turn",
        "task",
    )
    chat_template_kwargs: TemplateSwitches = _key(
        {},
        "switches of the model's chat template (TRL's chat_template_kwargs), e.g. {enable_thinking: true}; every "
        "prompt is rendered with them (training, evaluation, sample, the length probe); empty = enable_thinking "
        "false where the template reads it (Qwen3), so that answers open with the layout system_prompt asks for",
        "task",
    )
    train_samples: Whole = _key(0, "use only the first N training rows; 0 = all", "task", ge=0)
    eval_samples: Whole = _key(50, "test rows scored before and after training; 0 = skip", "task", ge=0)
    eval_steps: EvalSteps = _key(
        EVAL_AUTO,
        "also score the test rows every N steps during training; 0 = off; "
        "auto = the interval at which evaluating costs about a tenth of training time, "
        "off where none is shorter than the run",
        "task",
    )
    rewards: RewardWeights = _key(
        dict(DEFAULT_REWARDS),
        "reward -> weight: a name from the reward list, path/to/file.py:function or package.module:function",
        "task",
    )
    correctness: StrictStr = _key(
        "accuracy",
        "the reward whose full score (1.0) counts an answer as correct in the before/after evaluation",
        "task",
        min_length=1,
    )
    # --- tools: the model calls functions while it answers (TRL's tools, environment_factory) ---
    tools: ToolEntries = _key(
        [],
        "functions the model may call while it answers: calculate (shipped), path/to/file.py:function or "
        "package.module:function",
        "tools",
    )
    environment: StrictStr = _key(
        "",
        "a class whose instances each hold one rollout's state, their public methods the model's tools: guess "
        "(shipped), path/to/file.py:Class or package.module:Class; empty = none",
        "tools",
    )
    max_tool_calls: Whole = _key(
        4,
        "tool-calling turns a completion may take (TRL's max_tool_calling_iterations); the completion's "
        "turns and the tools' replies share max_completion_length",
        "tools",
        ge=1,
        le=64,
    )
