"""WHAT the fit solver moves and what it maximises: the levers in their order of value with the range of each,
the profile keys behind them, the objective (learning per hour) and the order of configurations from the most
valuable (launcher.plan.solve says how they are searched)."""

from __future__ import annotations

from launcher.plan.speed import StepTime
from launcher.plan.value import critical_batch, learning_per_hour, reuse_value

OBJECTIVE = "learning per hour: updates per hour x P / (P + B)"
MIN_GENERATIONS = 4
GENERATIONS_AMBITION = 8
MAX_GENERATIONS = 16
GENERATION_CHOICES = (8, 6, 4)
LARGE_GROUP_COST = 0.10  # 16 generations when they cost at most this share of prompts per hour
MIN_COMPLETION_LENGTH = 128  # below the task's cap only when nothing else fits: in steps of this
COMPLETION_STEP = 128
PROMPT_CHOICES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
REUSE_CHOICES = (1, 2, 4)  # optimizer steps one generation batch serves (steps_per_generation): DAPO's 16 and
#                            verl's GSM8K example's 4 are larger; the CPU measured up to 4
MAX_PROMPTS_PER_STEP = PROMPT_CHOICES[
    -1
]  # 512 completions a step at 8 generations: within the 256-1024 of published GRPO recipes
MIN_LORA_RANK = 8
CHECKPOINTING_ORDER = ("false", "true", "unsloth")  # each keeps less on the GPU than the one before
SHARE_CAP = 0.95  # vLLM beside training: never more of the card than this
LEARNING_LEVERS = ("completion_length", "generations", "lora_rank", "16-bit")
THROUGHPUT_LEVERS = ("prompts_per_step", "batch", "checkpointing", "standby", "vllm_share")
# When memory is short, what goes first (throughput, at no cost to what is learned) to last (the experiment)
GIVEN_UP_ORDER = (
    "vllm_share",
    "prompts_per_step",
    "batch",
    "checkpointing",
    "standby",
    "4-bit",
    "lora_rank",
    "generations",
    "completion_length",
    "generator",
)
# The profile keys behind each lever: a key pinned with --set holds its lever where the profile has it.
LEVER_GROUPS = {
    "vllm_share": ("gpu_memory_utilization", "vllm_max_num_seqs"),
    "prompts_per_step": ("per_device_train_batch_size", "gradient_accumulation_steps"),
    "batch": ("per_device_train_batch_size", "gradient_accumulation_steps"),
    "checkpointing": ("gradient_checkpointing",),
    "standby": ("vllm_standby",),
    "4-bit": ("load_in_4bit",),
    "lora_rank": ("lora_rank",),
    "completion_length": ("max_completion_length",),
    "generations": ("num_generations",),
    "generator": ("fast_inference",),
}
STANDBY_FAILURES = (
    "UNSLOTH_VLLM_STANDBY with 4-bit (bitsandbytes) weights runs out of memory at start on cards "
    "where the estimate fits it (unsloth #3542, #3771, open)"
)
# The pseudo-key a caller pins to hold the prompts per step (the OOM shrink keeps the effective batch)
PROMPTS_PIN = "prompts_per_step"


def objective(profile, speed: StepTime | None = None) -> float:
    """Learning per hour (launcher.plan.value): what the solver maximises (0 without a prediction)."""
    if speed is None:
        return 0.0
    device = getattr(profile, "device", "cuda") if profile is not None else "cuda"
    per_hour = learning_per_hour(speed.updates_per_hour, speed.prompts, critical_batch(device).prompts)
    return per_hour * reuse_value(getattr(profile, "updates_per_generation", 1) if profile is not None else 1)


def quality_key(profile, speed: StepTime | None = None, need: int | None = None) -> tuple:
    """Orders configurations from the most valuable: the learning levers in their order (a completion cap
    counts up to `need`, the cap the task needs: more buys nothing), then learning per hour (which weighs 16-bit
    against 4-bit), then the larger group, then 16-bit."""
    cap = min(profile.max_completion_length, need) if need else profile.max_completion_length
    return (
        cap,
        min(profile.num_generations, GENERATIONS_AMBITION),
        profile.lora_rank,
        round(objective(profile, speed), 6),
        profile.num_generations,
        not profile.load_in_4bit,
    )


def pinned_prompts(profile, pinned: frozenset) -> int | None:
    """The prompts per step the pins hold, or None when the solver may choose them."""
    if PROMPTS_PIN in pinned or {"per_device_train_batch_size", "gradient_accumulation_steps"} <= pinned:
        return max(1, profile.effective_batch // profile.num_generations)
    return None
