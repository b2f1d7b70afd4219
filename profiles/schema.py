"""WHAT a profile may say: the one model of a profile's keys, their ranges and the rules that tie them together.

Every default, range and help line lives in the field definitions below; `--help`, the error messages and
profiles/schema.json (profiles.help) are generated from them. `profile_from_dict` turns the schema's
refusals into errors that name the source, the key and the fix; reading files and `--set` overrides live in
profiles.load.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from contract.errors import ProfileError
from profiles.keys import (
    CHECKPOINTING_MODES,
    DEFAULT_REWARDS,
    DEFAULT_TARGET_MODULES,
    EVAL_AUTO,
    IMPORTANCE_SAMPLING_LEVELS,
    LOSS_TYPES,
    NAME_PATTERN,
    OPTIMIZERS,
    REPORT_TO,
    SCALE_REWARDS,
    SCHEDULERS,
    VLLM_LORA_RANKS,
    VLLM_MODES,
    KeyProblem,
    safe_name,
    shown,
    suggest,
)
from profiles.rules import check_loss_settings, check_rewards_and_dataset, check_scale_out
from profiles.tool_rules import check_tools
from tasks.prompts import RENDER_ARGUMENTS, SYSTEM_PROMPT

# ---------------------------------------------------------------------------------------------------
# Value types: stricter than pydantic's lax mode where YAML makes mistakes easy


def _whole_number(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise KeyProblem(f"expected a whole number, got {shown(value)}")
    return value


def _number(value: Any) -> float:
    if isinstance(value, str):  # YAML 1.1 reads 5e-6 (no dot) as text
        try:
            value = float(value)
        except ValueError:
            raise KeyProblem(f"expected a number, got {shown(value)}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise KeyProblem(f"expected a number, got {shown(value)}")
    try:
        value = float(value)
    except OverflowError:
        raise KeyProblem(f"expected a finite number, got {shown(value)} (too large)") from None
    if not math.isfinite(value):
        raise KeyProblem(f"expected a finite number, got {shown(value)}")
    return value


def _module_names(value: Any) -> list[str]:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise KeyProblem(f"expected a non-empty list of names, got {shown(value)}")
    twice = sorted({v for v in value if value.count(v) > 1})
    if twice:
        raise KeyProblem(f"{', '.join(twice)} listed more than once", "list each module once")
    return value


def _reward_weights(value: Any) -> dict[str, float]:
    if not isinstance(value, dict) or not value:
        raise KeyProblem(
            f"expected a mapping of reward name to weight, got {shown(value)}",
            "write e.g. `rewards: {accuracy: 2.0, xml_soft: 0.5}`",
        )
    weights = {}
    for name, weight in value.items():
        try:
            weights[str(name)] = _number(weight)
        except KeyProblem as problem:
            raise KeyProblem(f"weight of reward '{name}' must be a number: {problem.reason}") from None
    return weights


def _tool_entries(value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise KeyProblem(
            f"expected a list of tool entries, got {shown(value)}",
            "write e.g. `tools: [calculate]` or `tools: [my_tools.py:lookup]`",
        )
    return [v.strip() for v in value]


def _template_switches(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise KeyProblem(
            f"expected a mapping of switch name to value, got {shown(value)}",
            "write e.g. `chat_template_kwargs: {enable_thinking: true}`",
        )
    switches = {}
    for name, setting in value.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise KeyProblem(f"{shown(name)} is not a template variable name", "use names such as enable_thinking")
        if name in RENDER_ARGUMENTS:
            raise KeyProblem(
                f"'{name}' is an argument of apply_chat_template itself, not a switch of the template",
                f"remove {name}",
            )
        if setting is not None and not isinstance(setting, (bool, int, float, str)):
            raise KeyProblem(
                f"switch '{name}' is {shown(setting)}; a switch is true/false, a number or a word",
                f"write e.g. {name}: true",
            )
        switches[name] = setting
    return switches


def _checkpointing(value: Any) -> Any:
    if isinstance(value, bool):  # `gradient_checkpointing: true` unquoted
        return "true" if value else "false"
    return value.lower() if isinstance(value, str) else value


def _scale_rewards(value: Any) -> Any:
    if isinstance(value, bool):  # TRL reads true as "group" and false as "none"
        return "group" if value else "none"
    return value.lower() if isinstance(value, str) else value


def _lower(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value  # `loss_type: GRPO` is grpo


def _top_k(value: Any) -> Any:
    value = _whole_number(value)
    return 0 if value == -1 else value  # vLLM's spelling of "no top-k"; TRL and transformers say 0


def _steps(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return 0
    try:
        return _whole_number(value)
    except KeyProblem:
        raise KeyProblem(
            f"expected a whole number of optimizer steps or '{AUTO}', got {shown(value)}",
            f"write max_steps: {AUTO} (the plan's run length) or N",
        ) from None


def _eval_steps(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() == EVAL_AUTO:
        return EVAL_AUTO
    try:
        value = _whole_number(value)
    except KeyProblem:
        raise KeyProblem(
            f"expected '{EVAL_AUTO}' or a whole number of steps, got {shown(value)}",
            f"write eval_steps: {EVAL_AUTO}, 0 (off) or N (every N steps)",
        ) from None
    if value < 0:
        raise KeyProblem(f"{value} must be >= 0", "write 0 to turn evaluation during training off")
    return value


Whole = Annotated[int, BeforeValidator(_whole_number)]
Number = Annotated[float, BeforeValidator(_number)]
# What editors are told (profiles/schema.json) is what the validators accept: a list or one comma-separated
# string of module names; true / false unquoted or the mode's name.
ModuleNames = Annotated[
    list[str],
    BeforeValidator(_module_names),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
                {"type": "string", "minLength": 1, "description": "comma-separated names"},
            ]
        }
    ),
]
RewardWeights = Annotated[dict[str, float], BeforeValidator(_reward_weights)]
ToolEntries = Annotated[
    list[str],
    BeforeValidator(_tool_entries),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "array", "items": {"type": "string", "minLength": 1}},
                {"type": "string", "minLength": 1, "description": "one entry"},
            ]
        }
    ),
]
TemplateSwitches = Annotated[
    dict[str, Any],
    BeforeValidator(_template_switches),
    WithJsonSchema(
        {"type": "object", "additionalProperties": {"type": ["boolean", "integer", "number", "string", "null"]}}
    ),
]
ScaleRewards = Annotated[
    Literal[SCALE_REWARDS],
    BeforeValidator(_scale_rewards),
    WithJsonSchema({"anyOf": [{"type": "boolean"}, {"type": "string", "enum": list(SCALE_REWARDS)}]}),
]
TopK = Annotated[int, BeforeValidator(_top_k), WithJsonSchema({"type": "integer", "minimum": -1})]
Steps = Annotated[
    int,
    BeforeValidator(_steps),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "enum": ["auto"]}]}),
]
EvalSteps = Annotated[
    int | str,
    BeforeValidator(_eval_steps),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "enum": [EVAL_AUTO]}]}),
]


# What a key is to the rest of the project, said once here and read back with `keys_tagged`:
MEMORY = "memory"  # changes how much memory a step needs: the ledger's fingerprint of a shape
LEVER = "lever"  # the fit solver and the OOM shrink may move it: what a plan shows a candidate will run with
SHAPE = "shape"  # decides whether a checkpoint's adapter loads into another attempt's model
DERIVED = "derived"  # may be written `auto`: the plan derives it for the card (a value written is pinned)
TAGS = (MEMORY, LEVER, SHAPE, DERIVED)
# The value that asks the plan to derive a key tagged DERIVED
AUTO = "auto"


def _key(default: Any, help: str, section: str, tags: tuple[str, ...] = (), **limits: Any) -> Any:
    """A profile key: its default, one help line, the section it is listed under, what it is to the rest of
    the project (TAGS), and its range."""
    extra = {"section": section, "tags": list(tags)}
    if isinstance(default, (list, dict)):
        return Field(default_factory=lambda d=default: type(d)(d), description=help, json_schema_extra=extra, **limits)
    return Field(default, description=help, json_schema_extra=extra, **limits)


class Profile(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        title="grpo-train profile",
        json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"},
    )

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
    optim: Literal[OPTIMIZERS] = _key(
        "adamw_8bit", "optimizer (8-bit variants need bitsandbytes, i.e. a GPU)", "optimisation", tags=(MEMORY,)
    )
    gradient_checkpointing: Annotated[
        Literal[CHECKPOINTING_MODES],
        BeforeValidator(_checkpointing),
        WithJsonSchema({"anyOf": [{"type": "boolean"}, {"type": "string", "enum": list(CHECKPOINTING_MODES)}]}),
    ] = _key(
        "unsloth",
        "activation checkpointing: unsloth (offloads to RAM), true, false",
        "optimisation",
        tags=(MEMORY, LEVER, DERIVED),
    )
    learning_rate: Number = _key(5e-6, "peak learning rate", "optimisation", gt=0.0, le=1.0)
    lr_scheduler_type: Literal[SCHEDULERS] = _key("cosine", "learning-rate schedule", "optimisation")
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
    loss_type: Annotated[Literal[LOSS_TYPES], BeforeValidator(_lower)] = _key(
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
    importance_sampling_level: Annotated[Literal[IMPORTANCE_SAMPLING_LEVELS], BeforeValidator(_lower)] = _key(
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
    vllm_mode: Literal[VLLM_MODES] = _key(
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
    save_steps: Whole = _key(50, "checkpoint every N steps", "run", ge=1)
    seed: Whole = _key(3407, "random seed (data order, sampling, LoRA init)", "run", ge=0, le=2**32 - 1)
    report_to: Literal[REPORT_TO] = _key("none", "experiment tracker passed to TRL", "run")
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
        "gsm8k, arithmetic (generated offline), a hub dataset id org/name, or a "
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
    # not a YAML key: the file the profile was read from
    source: SkipJsonSchema[str] = Field("", exclude=True)
    # how the file's keys in TRL's or open-r1's names were read (profiles.aliases.Reading); empty for our own
    readings: SkipJsonSchema[list] = Field(default_factory=list, exclude=True)
    # the keys written `auto`: the plan derives them for the card (launcher.plan.derive.derive_rungs)
    derived: SkipJsonSchema[tuple] = Field(default=(), exclude=True)

    # ------------------------------------------------------------------------------------------------
    @property
    def effective_batch(self) -> int:
        """Completions per optimizer step in one training process."""
        return self.per_device_train_batch_size * self.gradient_accumulation_steps

    @property
    def generation_batch(self) -> int:
        """Completions generated per optimizer step over every training process (TRL's generation_batch_size)."""
        return self.effective_batch * self.num_gpus

    @property
    def uses_lora(self) -> bool:
        return self.lora_rank > 0

    @property
    def uses_vllm_server(self) -> bool:
        return self.fast_inference and self.vllm_mode == "server"

    @property
    def distributed(self) -> bool:
        """True when this profile trains through accelerate (plain TRL + PEFT) instead of the single-device
        Unsloth path: more than one training process, or generation on a separate vLLM server."""
        return self.num_gpus > 1 or self.uses_vllm_server

    @property
    def gpus_needed(self) -> int:
        """Every GPU the profile occupies: the training GPUs plus, in server mode, the vLLM server's."""
        if self.device == "cpu":
            return 0
        return self.num_gpus + (self.vllm_server_gpus if self.uses_vllm_server else 0)

    def to_dict(self) -> dict:
        """The YAML keys and their values (not `source`)."""
        return self.model_dump()

    def replace(self, **changes: Any) -> Profile:
        """A validated copy with some keys changed (used by the supervisor's shrink)."""
        return profile_from_dict({**self.to_dict(), **changes}, self.source or "<profile>")

    def to_yaml(self) -> str:
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    # ------------------------------------------------------------------------------------------------
    # Rules that involve more than one key, in the order they are reported. Each names the key to change.

    @model_validator(mode="after")
    def _whole_groups_per_step(self) -> Profile:
        # TRL's GRPOConfig: generation_batch_size = per-device batch x processes x steps_per_generation
        # (= gradient_accumulation_steps), and it must hold whole groups of num_generations.
        if self.generation_batch % self.num_generations:
            raise KeyProblem(
                f"per_device_train_batch_size x num_gpus x gradient_accumulation_steps = "
                f"{self.per_device_train_batch_size} x {self.num_gpus} x {self.gradient_accumulation_steps} = "
                f"{self.generation_batch} is not divisible by num_generations ({self.num_generations}); GRPO "
                f"needs whole groups of completions per step",
                f"make the product a multiple of {self.num_generations}",
                "per_device_train_batch_size",
            )
        return self

    @model_validator(mode="after")
    def _lengths_fit(self) -> Profile:
        total = self.max_prompt_length + self.max_completion_length
        if total > self.max_seq_length:
            raise KeyProblem(
                f"max_prompt_length + max_completion_length = {self.max_prompt_length} + "
                f"{self.max_completion_length} > max_seq_length ({self.max_seq_length})",
                f"raise max_seq_length to {total} or shorten the others",
                "max_seq_length",
            )
        return self

    @model_validator(mode="after")
    def _evaluations_within_the_run(self) -> Profile:
        if (
            isinstance(self.eval_steps, int)
            and self.max_steps
            and self.eval_steps >= self.max_steps
            and self.eval_samples
        ):
            raise KeyProblem(
                f"eval_steps {self.eval_steps} >= max_steps ({self.max_steps}): no evaluation would run during "
                "training (the one after it always runs)",
                f"use eval_steps below {self.max_steps}, 0 for none during training, or auto",
                "eval_steps",
            )
        return self

    @model_validator(mode="after")
    def _expected_within_the_cap(self) -> Profile:
        if self.expected_completion_length > self.max_completion_length:
            raise KeyProblem(
                f"expected_completion_length {self.expected_completion_length} > max_completion_length "
                f"({self.max_completion_length}): a completion cannot run longer than its cap on average",
                f"set it to at most {self.max_completion_length}, or 0 to derive it from the task",
                "expected_completion_length",
            )
        return self

    @model_validator(mode="after")
    def _cpu_has_no_gpu_features(self) -> Profile:
        if self.device != "cpu":
            return self
        if self.fast_inference:
            raise KeyProblem(
                "vLLM needs a GPU; a cpu profile generates with transformers",
                "set fast_inference: false",
                "fast_inference",
            )
        if self.load_in_4bit:
            raise KeyProblem("4-bit weights (bitsandbytes) need a GPU", "set load_in_4bit: false", "load_in_4bit")
        if "8bit" in self.optim:
            raise KeyProblem(f"{self.optim} needs bitsandbytes on a GPU", "use adamw_torch on a cpu profile", "optim")
        if self.save_merged:  # the merge is Unsloth's, on the GPU path; on CPU it would be skipped silently
            raise KeyProblem(
                "the merged 16-bit model is saved by Unsloth on a GPU; a cpu profile saves the adapter only",
                "set save_merged: false",
                "save_merged",
            )
        return self

    @model_validator(mode="after")
    def _standby_needs_vllm(self) -> Profile:
        if self.vllm_standby and not self.fast_inference:
            raise KeyProblem(
                "standby applies to the vLLM engine, which is off", "set fast_inference: true", "vllm_standby"
            )
        return self

    @model_validator(mode="after")
    def _lora_rank_fits(self) -> Profile:
        if self.fast_inference and self.uses_lora and self.lora_rank not in VLLM_LORA_RANKS:
            nearest = min(VLLM_LORA_RANKS, key=lambda r: (abs(r - self.lora_rank), r))
            raise KeyProblem(
                f"vLLM serves LoRA ranks {', '.join(map(str, VLLM_LORA_RANKS))}, not {self.lora_rank}",
                f"use lora_rank: {nearest}, or fast_inference: false",
                "lora_rank",
            )
        if not self.uses_lora and self.load_in_4bit:
            raise KeyProblem(
                "full fine-tuning (lora_rank 0) cannot update 4-bit weights",
                "set load_in_4bit: false or a LoRA rank",
                "lora_rank",
            )
        return self

    @model_validator(mode="after")
    def _loss_settings_agree(self) -> Profile:
        check_loss_settings(self)
        return self

    @model_validator(mode="after")
    def _scale_out_fits(self) -> Profile:
        check_scale_out(self)
        return self

    @model_validator(mode="after")
    def _rewards_and_dataset_exist(self) -> Profile:
        check_rewards_and_dataset(self)
        return self

    @model_validator(mode="after")
    def _tools_exist(self) -> Profile:
        check_tools(self)
        return self


KEYS = tuple(name for name in Profile.model_fields if name not in ("source", "readings", "derived"))


def keys_tagged(tag: str) -> tuple[str, ...]:
    """The keys carrying `tag` (one of TAGS), in the schema's order."""
    if tag not in TAGS:
        raise ValueError(f"unknown tag {tag!r}")
    return tuple(name for name in KEYS if tag in Profile.model_fields[name].json_schema_extra["tags"])


def keys_in(section: str) -> tuple[str, ...]:
    """The keys of one section of the schema (as `profiles keys` groups them), in the schema's order."""
    return tuple(name for name in KEYS if Profile.model_fields[name].json_schema_extra["section"] == section)


MEMORY_KEYS = keys_tagged(MEMORY)
DERIVED_KEYS = keys_tagged(DERIVED)
LEVER_KEYS = keys_tagged(LEVER)
SHAPE_KEYS = keys_tagged(SHAPE)
# The GRPO loss's settings: its own section, and the KL weight, which sits with the optimiser (it costs memory)
LOSS_KEYS = (*keys_in("loss"), "beta")


def auto_placeholders(values: dict, derived) -> dict:
    """Values for the keys written `auto` until the plan derives them, chosen so that the rules tying them to
    the keys written stand: one group per micro-batch and step, the sequence as long as prompt and
    completion, nothing expected beyond the cap, standby off, the run length the plan's."""
    defaults = {name: Profile.model_fields[name].get_default(call_default_factory=True) for name in derived}
    out = dict(defaults)
    generations = values.get("num_generations", Profile.model_fields["num_generations"].default)
    if "per_device_train_batch_size" in out:
        out["per_device_train_batch_size"] = generations if isinstance(generations, int) else 1
    if "gradient_accumulation_steps" in out:
        out["gradient_accumulation_steps"] = 1
    if "expected_completion_length" in out:
        out["expected_completion_length"] = 0
    if "vllm_standby" in out:
        out["vllm_standby"] = False
    if "fast_inference" in out:
        out["fast_inference"] = values.get("device", "cuda") != "cpu"
    if "vllm_max_num_seqs" in out:
        out["vllm_max_num_seqs"] = 0
    if "max_steps" in out:
        out["max_steps"] = 0
    if "max_seq_length" in out:
        prompt = values.get("max_prompt_length", Profile.model_fields["max_prompt_length"].default)
        completion = values.get("max_completion_length", out.get("max_completion_length"))
        completion = completion or Profile.model_fields["max_completion_length"].default
        if isinstance(prompt, int) and isinstance(completion, int):
            out["max_seq_length"] = prompt + completion
    return out


def shape_of(settings: Any) -> tuple:
    """The model and LoRA shape of a profile (or of an attempts.jsonl `settings` dict): a checkpoint resumes
    only into an attempt of the same shape."""
    get = settings.get if isinstance(settings, dict) else (lambda key: getattr(settings, key, None))
    return tuple(tuple(get(k) or ()) if k == "target_modules" else get(k) for k in SHAPE_KEYS)


def choices_of(key: str) -> tuple:
    """The allowed values of a key that is a choice (empty for the others)."""
    annotation = Profile.model_fields[key].annotation
    return get_args(annotation) if get_origin(annotation) is Literal else ()


# ---------------------------------------------------------------------------------------------------
# The schema's refusals as ProfileError


def _problem(error: dict) -> tuple[str | None, str, str | None]:
    """(key, reason, fix) from one of pydantic's error records."""
    key = str(error["loc"][0]) if error["loc"] else None
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    if isinstance(ctx.get("error"), KeyProblem):
        problem = ctx["error"]
        return problem.key or key, problem.reason, problem.fix
    for limit, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if limit in ctx and kind.startswith(("greater_than", "less_than")):
            return key, f"{shown(value)} must be {sign} {ctx[limit]}", None
    if kind.startswith("bool"):
        return key, f"expected true or false, got {shown(value)}", None
    if kind == "literal_error" and key:
        choices = choices_of(key)
        return key, f"{shown(value)} is not one of {', '.join(map(str, choices))}", suggest(str(value), choices)
    if kind.startswith("string_") and key == "name":
        return (
            key,
            f"{shown(value)} is not a safe folder name",
            "use up to 64 letters, digits, '.', '_' or '-', not starting with '.'",
        )
    if kind == "string_type":
        return key, f"expected text, got {shown(value)}", None
    if kind == "extra_forbidden":
        return key, "unknown key", suggest(str(key), KEYS) or "run `python train.py --help` for the list of keys"
    return key, error["msg"], None


_ADAPTERS: dict[str, Any] = {}


def check_value(key: str, value: Any, source: str = "--set") -> Any:
    """One key's value as the schema reads it (its type, its range), alone: ProfileError naming the source and
    the key when the schema refuses it. Rules that tie several keys together are checked on a whole profile."""
    from pydantic import TypeAdapter

    if key not in KEYS:
        raise ProfileError(
            source, key, "unknown key", suggest(key, KEYS) or "run `python train.py --help` for the list of keys"
        )
    adapter = _ADAPTERS.get(key)
    if adapter is None:
        info = Profile.model_fields[key]
        kind = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        adapter = _ADAPTERS[key] = TypeAdapter(kind)
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        error = dict(exc.errors()[0])
        error["loc"] = (key,)
        found, reason, fix = _problem(error)
        raise ProfileError(source, found or key, reason, fix) from None


def profile_from_dict(data: Any, source: str) -> Profile:
    """Validate plain data (a YAML mapping) into a Profile; raise ProfileError naming the key."""
    if not isinstance(data, dict):
        raise ProfileError(source, None, f"expected a mapping of keys to values, got {type(data).__name__}")
    values: dict[str, Any] = {}
    derived = []
    for key, value in data.items():
        key = str(key)
        if key not in KEYS:
            raise ProfileError(
                source, key, "unknown key", suggest(key, KEYS) or "run `python train.py --help` for the list of keys"
            )
        if isinstance(value, str) and value.strip().lower() == AUTO and key in DERIVED_KEYS:
            derived.append(key)  # the plan derives it; a placeholder below keeps the rules of the others
            continue
        if value is not None:  # an empty value keeps the default
            values[key] = value
    if derived:
        values.update({key: value for key, value in auto_placeholders(values, derived).items()})
    if not values.get("name"):
        # made up here, so made safe here: a file named `modèle 2.yaml` is the profile `modele-2`
        values["name"] = safe_name(Path(source).stem) if source and not source.startswith("<") else "profile"
    try:
        return Profile.model_validate({**values, "source": source, "derived": tuple(derived)})
    except ValidationError as exc:
        key, reason, fix = _problem(exc.errors()[0])
        raise ProfileError(source, key, reason, fix) from None
