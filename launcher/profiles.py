"""WHAT a profile may say: the one schema, its validation, loading from YAML, and `--set` overrides.

Every default, range and help line lives in the field definitions below; `--help` and the error messages
are generated from them, so there is exactly one place to change a key.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from launcher.errors import ProfileError, UsageError

# LoRA ranks vLLM can serve (`max_lora_rank` must be one of these).
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
DATASETS = ("gsm8k", "arithmetic")
CHECKPOINTING_MODES = ("unsloth", "true", "false")
OPTIMIZERS = (
    "adamw_torch",
    "adamw_torch_fused",
    "adamw_8bit",
    "adamw_bnb_8bit",
    "paged_adamw_8bit",
    "paged_adamw_32bit",
    "adafactor",
    "sgd",
)
SCHEDULERS = ("constant", "constant_with_warmup", "linear", "cosine")
VLLM_MODES = ("colocate", "server")
DEFAULT_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
DEFAULT_REWARDS = {"xml_count": 0.5, "xml_soft": 0.5, "xml_strict": 0.5, "number": 0.5, "accuracy": 2.0}


def _key(default: Any, help: str, section: str, *, choices=None, ge=None, gt=None, le=None, lt=None,
         kind: str | None = None, internal: bool = False):
    """A profile key: its default, one help line, the section it is listed under, and its allowed range."""
    meta = {"help": help, "section": section, "choices": choices, "ge": ge, "gt": gt, "le": le, "lt": lt,
            "kind": kind, "internal": internal}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class Profile:
    # --- identity ---
    name: str = _key("", "profile name (default: the file's stem)", "identity", kind="str")
    description: str = _key("", "one line: what card this profile targets", "identity", kind="str")
    ladder: int = _key(100, "position on the ladder: lower is more ambitious and tried first", "identity",
                       ge=0, kind="int")
    # --- model ---
    model: str = _key("tiny", "hub id or local folder; `tiny` = the offline CPU model", "model", kind="str")
    device: str = _key("cuda", "where to train", "model", choices=("cuda", "cpu"), kind="str")
    load_in_4bit: bool = _key(True, "load base weights in 4-bit NF4 (bitsandbytes, GPU only)", "model",
                              kind="bool")
    trust_remote_code: bool = _key(False, "run the model repository's own code (off unless you trust it)",
                                   "model", kind="bool")
    max_seq_length: int = _key(1024, "longest prompt + completion in tokens", "model", ge=16, kind="int")
    max_prompt_length: int = _key(256, "prompts longer than this (tokens) are dropped", "model", ge=8,
                                  kind="int")
    max_completion_length: int = _key(512, "tokens generated per completion", "model", ge=1, kind="int")
    # --- LoRA ---
    lora_rank: int = _key(16, "LoRA rank; 0 = full fine-tuning", "lora", ge=0, le=512, kind="int")
    lora_alpha: int = _key(32, "LoRA alpha (scale = alpha / rank)", "lora", ge=1, kind="int")
    lora_dropout: float = _key(0.0, "LoRA dropout", "lora", ge=0.0, lt=1.0, kind="float")
    target_modules: list = _key(list(DEFAULT_TARGET_MODULES), "modules that get LoRA adapters", "lora",
                                kind="list[str]")
    # --- generation ---
    fast_inference: bool = _key(True, "generate with vLLM inside the process (Unsloth fast_inference)",
                                "generation", kind="bool")
    gpu_memory_utilization: float = _key(0.5, "vLLM's share of the whole GPU, reserved at start",
                                         "generation", gt=0.0, lt=1.0, kind="float")
    vllm_standby: bool = _key(False, "UNSLOTH_VLLM_STANDBY: vLLM sleeps during training and lends its memory",
                              "generation", kind="bool")
    num_generations: int = _key(4, "completions sampled per prompt (the GRPO group)", "generation", ge=2,
                                kind="int")
    temperature: float = _key(1.0, "sampling temperature", "generation", gt=0.0, le=5.0, kind="float")
    top_p: float = _key(1.0, "nucleus sampling", "generation", gt=0.0, le=1.0, kind="float")
    # --- batch ---
    per_device_train_batch_size: int = _key(2, "completions per forward/backward (not prompts)", "batch",
                                            ge=1, kind="int")
    gradient_accumulation_steps: int = _key(2, "micro-batches per optimizer step", "batch", ge=1, kind="int")
    # --- optimisation ---
    optim: str = _key("adamw_8bit", "optimizer (8-bit variants need bitsandbytes, i.e. a GPU)", "optimisation",
                      choices=OPTIMIZERS, kind="str")
    gradient_checkpointing: str = _key("unsloth", "activation checkpointing: unsloth (offloads to RAM), true, false",
                                       "optimisation", choices=CHECKPOINTING_MODES, kind="str")
    learning_rate: float = _key(5e-6, "peak learning rate", "optimisation", gt=0.0, le=1.0, kind="float")
    lr_scheduler_type: str = _key("cosine", "learning-rate schedule", "optimisation", choices=SCHEDULERS,
                                  kind="str")
    warmup_ratio: float = _key(0.1, "share of max_steps spent warming up", "optimisation", ge=0.0, lt=1.0,
                               kind="float")
    weight_decay: float = _key(0.1, "AdamW weight decay", "optimisation", ge=0.0, kind="float")
    max_grad_norm: float = _key(0.1, "gradient clipping", "optimisation", gt=0.0, kind="float")
    beta: float = _key(0.0, "KL coefficient; > 0 needs a reference model (a full copy without LoRA)",
                       "optimisation", ge=0.0, kind="float")
    # --- scale-out (more than one GPU: accelerate, DeepSpeed ZeRO, a vLLM server) ---
    num_gpus: int = _key(1, "data-parallel world size: training processes, one GPU each (processes on a cpu "
                         "profile); above 1 trains through accelerate without Unsloth", "scale-out", ge=1,
                         le=4096, kind="int")
    zero_stage: int = _key(0, "DeepSpeed ZeRO stage over the training GPUs: 0 plain DDP, 1 shards optimizer "
                           "states, 2 also gradients, 3 also parameters", "scale-out", ge=0, le=3, kind="int")
    vllm_mode: str = _key("colocate", "where vLLM generates: colocate (inside each training process) or server "
                          "(`trl vllm-serve` on GPUs of its own)", "scale-out", choices=VLLM_MODES, kind="str")
    vllm_server_gpus: int = _key(1, "server mode: GPUs of the vLLM server, after the training GPUs", "scale-out",
                                 ge=1, le=4096, kind="int")
    vllm_tensor_parallel: int = _key(1, "GPUs that hold one vLLM copy of the model (tensor parallelism); must "
                                     "divide vllm_server_gpus (server) or num_gpus (colocate)", "scale-out",
                                     ge=1, le=64, kind="int")
    # --- run ---
    max_steps: int = _key(250, "optimizer steps", "run", ge=1, kind="int")
    save_steps: int = _key(50, "checkpoint every N steps", "run", ge=1, kind="int")
    seed: int = _key(3407, "random seed (data order, sampling, LoRA init)", "run", ge=0, kind="int")
    report_to: str = _key("none", "experiment tracker passed to TRL: none, tensorboard, wandb, ...", "run",
                          kind="str")
    save_merged: bool = _key(False, "also save a merged 16-bit model at the end (GPU)", "run", kind="bool")
    # --- task ---
    dataset: str = _key("gsm8k", "gsm8k, arithmetic (generated offline), or a JSONL path with question/answer",
                        "task", kind="str")
    train_samples: int = _key(0, "use only the first N training rows; 0 = all", "task", ge=0, kind="int")
    eval_samples: int = _key(50, "test rows scored before and after training; 0 = skip", "task", ge=0,
                             kind="int")
    rewards: dict = _key(dict(DEFAULT_REWARDS), "reward name -> weight (see the reward list)", "task",
                         kind="dict[str,float]")
    # --- not a YAML key: where the profile came from ---
    source: str = _key("", "file the profile was read from", "internal", kind="str", internal=True)

    # ------------------------------------------------------------------------------------------------
    @property
    def effective_batch(self) -> int:
        return self.per_device_train_batch_size * self.gradient_accumulation_steps

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
        """The YAML keys and their values (no internal fields)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if not f.metadata["internal"]}

    def replace(self, **changes: Any) -> "Profile":
        """A validated copy with some keys changed (used by the supervisor's shrink)."""
        data = self.to_dict()
        data.update(changes)
        return profile_from_dict(data, self.source or "<profile>")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# ---------------------------------------------------------------------------------------------------
# The schema as data

def schema_fields() -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(Profile) if not f.metadata["internal"]]


KEYS = tuple(f.name for f in schema_fields())


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory()  # type: ignore[misc]


def _range_text(meta: dict) -> str:
    parts = []
    if meta["choices"]:
        parts.append("one of " + ", ".join(map(str, meta["choices"])))
    for op, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if meta[op] is not None:
            parts.append(f"{sym} {meta[op]}")
    return "; ".join(parts)


def schema_help() -> str:
    """Every profile key with its type, default and range, grouped by section: the `--set` help text."""
    lines: list[str] = []
    section = None
    for f in schema_fields():
        meta = f.metadata
        if meta["section"] != section:
            section = meta["section"]
            lines.append(f"  [{section}]")
        default = _default_of(f)
        if isinstance(default, dict):
            default = ",".join(f"{k}:{v}" for k, v in default.items())
        elif isinstance(default, list):
            default = ",".join(default)
        elif default == "":
            default = "(none)"
        rng = _range_text(meta)
        lines.append(f"    {f.name} ({meta['kind']}, default {default!s}{'; ' + rng if rng else ''}): {meta['help']}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------
# Validation of one value against its field, then the rules that tie keys together

def _suggest(key: str, known) -> str | None:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.5)
    return f"did you mean '{close[0]}'?" if close else None


def _coerce(source: str, f: dataclasses.Field, value: Any) -> Any:
    meta = f.metadata
    kind = meta["kind"]
    name = f.name

    def bad(reason: str, fix: str | None = None):
        raise ProfileError(source, name, reason, fix)

    if kind == "bool":
        if not isinstance(value, bool):
            bad(f"expected true or false, got {value!r}")
    elif kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                bad(f"expected a whole number, got {value!r}")
    elif kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            # YAML 1.1 reads 5e-6 as a string; accept any text that is a plain number
            try:
                value = float(str(value))
            except ValueError:
                bad(f"expected a number, got {value!r}")
        value = float(value)
        if not math.isfinite(value):
            bad(f"expected a finite number, got {value!r}")
    elif kind == "str":
        if name == "gradient_checkpointing" and isinstance(value, bool):
            value = "true" if value else "false"
        if not isinstance(value, str):
            bad(f"expected text, got {value!r}")
        if name == "gradient_checkpointing":
            value = value.lower()
    elif kind == "list[str]":
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            bad(f"expected a non-empty list of names, got {value!r}")
    elif kind == "dict[str,float]":
        if not isinstance(value, dict) or not value:
            bad(f"expected a mapping of reward name to weight, got {value!r}",
                "write e.g. `rewards: {accuracy: 2.0, xml_soft: 0.5}`")
        out = {}
        for k, v in value.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
                bad(f"weight of reward '{k}' must be a number, got {v!r}")
            out[str(k)] = float(v)
        value = out

    if meta["choices"] and value not in meta["choices"]:
        hint = _suggest(str(value), meta["choices"])
        bad(f"{value!r} is not one of {', '.join(map(str, meta['choices']))}", hint)
    for op, test, sym in (("ge", lambda a, b: a >= b, ">="), ("gt", lambda a, b: a > b, ">"),
                          ("le", lambda a, b: a <= b, "<="), ("lt", lambda a, b: a < b, "<")):
        bound = meta[op]
        if bound is not None and not test(value, bound):
            bad(f"{value!r} must be {sym} {bound}")
    return value


def _check_rules(p: Profile, source: str) -> None:
    """Rules that involve more than one key. Each refusal names the key to change."""
    from rewards import REWARDS  # the registry; imports neither torch nor unsloth

    def bad(key: str, reason: str, fix: str | None = None):
        raise ProfileError(source, key, reason, fix)

    if p.effective_batch % p.num_generations:
        bad("per_device_train_batch_size",
            f"per_device_train_batch_size x gradient_accumulation_steps = {p.per_device_train_batch_size} x "
            f"{p.gradient_accumulation_steps} = {p.effective_batch} is not divisible by num_generations "
            f"({p.num_generations}); GRPO needs whole groups of completions per step",
            f"make the product a multiple of {p.num_generations}")
    if p.max_prompt_length + p.max_completion_length > p.max_seq_length:
        bad("max_seq_length",
            f"max_prompt_length + max_completion_length = {p.max_prompt_length} + {p.max_completion_length} "
            f"> max_seq_length ({p.max_seq_length})",
            f"raise max_seq_length to {p.max_prompt_length + p.max_completion_length} or shorten the others")
    if p.device == "cpu":
        if p.fast_inference:
            bad("fast_inference", "vLLM needs a GPU; a cpu profile generates with transformers",
                "set fast_inference: false")
        if p.load_in_4bit:
            bad("load_in_4bit", "4-bit weights (bitsandbytes) need a GPU", "set load_in_4bit: false")
        if "8bit" in p.optim:
            bad("optim", f"{p.optim} needs bitsandbytes on a GPU", "use adamw_torch on a cpu profile")
    if p.vllm_standby and not p.fast_inference:
        bad("vllm_standby", "standby applies to the vLLM engine, which is off", "set fast_inference: true")
    if p.fast_inference and p.uses_lora and p.lora_rank not in VLLM_LORA_RANKS:
        nearest = min(VLLM_LORA_RANKS, key=lambda r: (abs(r - p.lora_rank), r))
        bad("lora_rank", f"vLLM serves LoRA ranks {', '.join(map(str, VLLM_LORA_RANKS))}, not {p.lora_rank}",
            f"use lora_rank: {nearest}, or fast_inference: false")
    if not p.uses_lora and p.load_in_4bit:
        bad("lora_rank", "full fine-tuning (lora_rank 0) cannot update 4-bit weights",
            "set load_in_4bit: false or a LoRA rank")
    _check_scale_out(p, bad)
    for name in p.rewards:
        if name not in REWARDS:
            hint = _suggest(name, REWARDS)
            bad("rewards", f"unknown reward '{name}'; known: {', '.join(REWARDS)}", hint)
    if p.dataset not in DATASETS:
        path = Path(p.dataset).expanduser()
        if not path.is_file():
            bad("dataset", f"{p.dataset!r} is neither {' nor '.join(DATASETS)} nor an existing JSONL file",
                "give gsm8k, arithmetic or the path of a .jsonl file with question and answer fields")


def _check_scale_out(p: Profile, bad) -> None:
    """The scale-out keys against each other and against the single-device Unsloth path."""
    if p.zero_stage and p.num_gpus == 1:
        bad("zero_stage", f"ZeRO stage {p.zero_stage} shards model states over the data-parallel GPUs, and "
            "num_gpus is 1: there is nothing to shard over", "set num_gpus above 1, or zero_stage: 0")
    if p.device == "cpu":
        if p.zero_stage:
            bad("zero_stage", "DeepSpeed ZeRO needs GPUs; several cpu processes train with plain DDP (gloo)",
                "set zero_stage: 0 on a cpu profile")
        if p.vllm_mode == "server":
            bad("vllm_mode", "a vLLM server needs GPUs", "set vllm_mode: colocate on a cpu profile")
    if p.vllm_mode == "server" and not p.fast_inference:
        bad("vllm_mode", "server mode generates with vLLM, which is off (fast_inference: false)",
            "set fast_inference: true, or vllm_mode: colocate")
    if p.distributed:
        if p.vllm_standby:
            bad("vllm_standby", "standby is Unsloth's, and Unsloth trains on one GPU; this profile trains "
                "through accelerate (num_gpus > 1 or a vLLM server)", "set vllm_standby: false")
        if p.gradient_checkpointing == "unsloth":
            bad("gradient_checkpointing", "'unsloth' (checkpoints offloaded to RAM) needs the single-GPU Unsloth "
                "path; this profile trains through accelerate", "use gradient_checkpointing: true")
    if p.vllm_tensor_parallel > 1:
        if not p.fast_inference:
            bad("vllm_tensor_parallel", "tensor parallelism applies to vLLM, which is off",
                "set vllm_tensor_parallel: 1")
        if p.uses_vllm_server and p.vllm_server_gpus % p.vllm_tensor_parallel:
            bad("vllm_tensor_parallel", f"vllm_server_gpus ({p.vllm_server_gpus}) is not a multiple of "
                f"vllm_tensor_parallel ({p.vllm_tensor_parallel}): each server copy needs whole GPUs",
                f"use vllm_server_gpus: {p.vllm_tensor_parallel * max(1, p.vllm_server_gpus // p.vllm_tensor_parallel)}")
        if not p.uses_vllm_server and p.num_gpus % p.vllm_tensor_parallel:
            bad("vllm_tensor_parallel", f"num_gpus ({p.num_gpus}) is not a multiple of vllm_tensor_parallel "
                f"({p.vllm_tensor_parallel}): colocated vLLM splits the model over groups of training GPUs",
                "use a divisor of num_gpus, or vllm_mode: server")


def profile_from_dict(data: Any, source: str) -> Profile:
    """Validate plain data (a YAML mapping) into a Profile; raise ProfileError naming the key."""
    if not isinstance(data, dict):
        raise ProfileError(source, None, f"expected a mapping of keys to values, got {type(data).__name__}")
    fields = {f.name: f for f in schema_fields()}
    values: dict[str, Any] = {}
    for key, value in data.items():
        key = str(key)
        if key not in fields:
            raise ProfileError(source, key, "unknown key", _suggest(key, fields) or
                               "run `python train.py --help` for the list of keys")
        if value is None:
            continue  # an empty value keeps the default
        values[key] = _coerce(source, fields[key], value)
    if not values.get("name"):
        values["name"] = Path(source).stem if source and not source.startswith("<") else "profile"
    profile = Profile(**values, source=source)
    _check_rules(profile, source)
    return profile


# ---------------------------------------------------------------------------------------------------
# Files and overrides

def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: profile not found (fix: give an existing .yaml file, e.g. profiles/*.yaml)")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read profile: {exc}")
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise ProfileError(str(path), None, f"YAML syntax error at {where}: {exc.problem or exc}")
    except yaml.YAMLError as exc:
        raise ProfileError(str(path), None, f"YAML error: {exc}")


def parse_overrides(pairs: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """`--set KEY=VALUE` pairs into a dict; values are read as YAML (true, 2, 0.5, {accuracy: 2.0})."""
    out: dict[str, Any] = {}
    for pair in pairs or ():
        if "=" not in pair:
            raise UsageError(f"--set {pair!r}: expected KEY=VALUE (e.g. --set lora_rank=32)")
        key, _, raw = pair.partition("=")
        key = key.strip()
        if key not in KEYS:
            hint = _suggest(key, KEYS)
            raise ProfileError("--set", key, "unknown key", hint or "run `python train.py --help` for the keys")
        try:
            out[key] = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            out[key] = raw
    return out


def load_profile(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Profile:
    """Read, validate and override one profile file. Errors name the file (or --set) and the key."""
    path = Path(path)
    data = _read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ProfileError(str(path), None, "a profile must be a mapping of keys to values")
    profile = profile_from_dict(data, str(path))
    changes = parse_overrides(overrides)
    if changes:
        merged = profile.to_dict()
        merged.update(changes)
        profile = profile_from_dict(merged, f"{path} with --set")
    return profile


def load_profiles(directory: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> list[Profile]:
    """Every *.yaml in a folder, validated, in ladder order (most ambitious first)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UsageError(f"{directory}: profiles folder not found (fix: --profiles-dir DIR)")
    files = sorted(directory.glob("*.yaml")) + sorted(directory.glob("*.yml"))
    if not files:
        raise UsageError(f"{directory}: no *.yaml profiles in this folder")
    profiles = [load_profile(f, overrides) for f in files]
    names: dict[str, str] = {}
    for p in profiles:
        if p.name in names:
            raise ProfileError(p.source, "name", f"'{p.name}' is also the name of {names[p.name]}",
                               "give each profile a unique name")
        names[p.name] = p.source
    return sorted(profiles, key=lambda p: (p.ladder, p.name))
