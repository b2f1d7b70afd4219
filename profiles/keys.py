"""The vocabulary every profile rule shares: the choices and defaults of the keys, and the refusal type
(KeyProblem) that the schema's validators and the longer rules raise and the loader turns into errors."""

from __future__ import annotations

import difflib
import re
from typing import Any, Literal, get_args

# LoRA ranks vLLM can serve (`max_lora_rank` must be one of these).
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
DATASETS = ("gsm8k", "arithmetic", "programs")
CheckpointingMode = Literal["unsloth", "true", "false"]
CHECKPOINTING_MODES: tuple[str, ...] = get_args(CheckpointingMode)
Optimizer = Literal[
    "adamw_torch",
    "adamw_torch_fused",
    "adamw_8bit",
    "adamw_bnb_8bit",
    "paged_adamw_8bit",
    "paged_adamw_32bit",
    "adafactor",
    "sgd",
]
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
# transformers' schedules that need no evaluation metric (reduce_lr_on_plateau does)
Scheduler = Literal[
    "constant",
    "constant_with_warmup",
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "inverse_sqrt",
    "cosine_with_min_lr",
    "cosine_warmup_with_min_lr",
    "warmup_stable_decay",
]
MIN_LR_SCHEDULERS = ("cosine_with_min_lr", "cosine_warmup_with_min_lr")  # need min_lr or min_lr_rate
SCHEDULERS: tuple[str, ...] = get_args(Scheduler)
VllmMode = Literal["colocate", "server"]
VLLM_MODES: tuple[str, ...] = get_args(VllmMode)
# TRL 1.15's GRPO loss formulations (GRPOConfig.loss_type), which Unsloth's patched loss implements alike.
LossTypeName = Literal["dapo", "grpo", "dr_grpo", "bnpo", "cispo", "sapo", "luspo", "vespo"]
LOSS_TYPES: tuple[str, ...] = get_args(LossTypeName)
# The loss types whose clipped ratio `delta` caps from above (TRL's two-sided clipping branch).
DELTA_LOSS_TYPES = ("dapo", "grpo", "dr_grpo", "bnpo", "luspo")
# The loss types that read no epsilon_high (sapo weighs by temperatures, vespo by its gamma weights).
NO_EPSILON_HIGH_LOSS_TYPES = ("sapo", "vespo")
# CISPO's cap on the importance weight itself when none is given: ScaleRL's value, which TRL recommends (TRL's
# own default would be epsilon, 0.2, which caps every weight below 1 and scales the whole loss down).
CISPO_EPSILON_HIGH = 5.0
SamplingLevelName = Literal["token", "sequence"]
IMPORTANCE_SAMPLING_LEVELS: tuple[str, ...] = get_args(SamplingLevelName)
ScaleRewardsMode = Literal["group", "batch", "none"]
SCALE_REWARDS: tuple[str, ...] = get_args(ScaleRewardsMode)
# eval_steps: "auto" picks an interval whose evaluations cost about a tenth of training time (or none)
EVAL_AUTO = "auto"
# The trackers transformers 5.17 knows (its INTEGRATION_TO_CALLBACK), plus its "none" and "all".
Tracker = Literal[
    "none",
    "all",
    "azure_ml",
    "clearml",
    "codecarbon",
    "comet_ml",
    "dagshub",
    "dvclive",
    "flyte",
    "kubeflow",
    "mlflow",
    "neptune",
    "swanlab",
    "tensorboard",
    "trackio",
    "wandb",
]
REPORT_TO: tuple[str, ...] = get_args(Tracker)
# What each tracker needs importable, as transformers 5.17 checks it when the trainer is built (after the model
# has loaded): any one of the modules, and the pip name to install. kubeflow needs its server's address instead.
TRACKER_MODULES = {
    "azure_ml": (("azureml.core",), "azureml-core"),
    "clearml": (("clearml",), "clearml"),
    "codecarbon": (("codecarbon",), "codecarbon"),
    "comet_ml": (("comet_ml",), "comet-ml"),
    "dagshub": (("dagshub",), "dagshub mlflow"),
    "dvclive": (("dvclive",), "dvclive"),
    "flyte": (("flytekit",), "flytekit flytekitplugins-deck-standard"),
    "mlflow": (("mlflow",), "mlflow"),
    "neptune": (("neptune", "neptune_client"), "neptune"),
    "swanlab": (("swanlab",), "swanlab"),
    "tensorboard": (("tensorboard", "tensorboardX"), "tensorboard"),
    "trackio": (("trackio",), "trackio"),
    "wandb": (("wandb",), "wandb"),
}
DEFAULT_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
DEFAULT_REWARDS = {"xml_count": 0.5, "xml_soft": 0.5, "xml_strict": 0.5, "number": 0.5, "accuracy": 2.0}
# The name becomes a folder name: no separators, no leading dot, short.
NAME_PATTERN = r"^(?:[A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?$"  # empty: the file's stem, filled in by the loader


def safe_name(text: str, limit: int = 64) -> str:
    """A name the tool makes up (from a file's stem, a model folder) in NAME_PATTERN's alphabet: accents dropped
    (modèle -> modele), anything else outside letters, digits, '.', '_', '-' as '-', no leading '.'; never empty.
    A name the user writes is checked, not changed."""
    import unicodedata

    plain = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode("ascii")
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", plain).strip("-").lstrip(".")[:limit].rstrip("-")
    return name or "profile"


class KeyProblem(ValueError):
    """A refused value: the reason, how to fix it, and the key when a rule (not a field) found it."""

    def __init__(self, reason: str, fix: str | None = None, key: str | None = None):
        super().__init__(reason)
        self.reason, self.fix, self.key = reason, fix, key


def _short_repr():
    import reprlib

    short = reprlib.Repr()
    short.maxlevel, short.maxdict, short.maxlist, short.maxtuple, short.maxset = 3, 4, 4, 4, 4
    short.maxstring, short.maxlong, short.maxother = 40, 40, 40
    return short


_SHORT = _short_repr()


def shown(value: Any) -> str:
    """repr, cut short: a 400-digit number should not fill the terminal, and a value nested or repeated beyond
    reason (YAML aliases) costs no more to show than a short one (reprlib stops at a few items and levels)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"a whole number of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = _SHORT.repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def suggest(word: str, known) -> str | None:
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.5)
    return f"did you mean '{close[0]}'?" if close else None
