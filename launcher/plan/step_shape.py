"""WHAT a step is made of, as the step-time models time it (launcher.plan.speed on a card, launcher.plan.cpu_speed
on the CPU): a configuration's model shape, weights, generator, batch and lengths on one device, and how a profile
gives them (no torch)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata

from launcher.memory.scorers import scorers

# Rewards that run a completion's program once per test case of its row (rewards.execution)
PROGRAM_REWARDS = ("code", "binary_code")
# Test cases a row holds, where the task says (tasks/programs.py writes 3); other data's rows are not read at plan
# time: DEFAULT_TEST_CASES, a stated default that errs long on the small problems open-r1's recipes train on
TEST_CASES = {"programs": 3}
DEFAULT_TEST_CASES = 10


# Families whose mixture transformers' generate runs densely before the version given: every routed expert for
# every token (gpt-oss's experts outside training were one batched matmul over all of them in 4.55-4.57)
DENSE_EXPERTS_BEFORE = {"gpt_oss": 5}


@lru_cache(maxsize=1)
def transformers_major() -> int | None:
    """The installed transformers' major version, read from its metadata (nothing imported); None without it."""
    try:
        return int(metadata.version("transformers").split(".")[0])
    except (metadata.PackageNotFoundError, ValueError):
        return None


def every_expert_generates(family: str, generator: str, major: int | None) -> bool:
    """Whether transformers' generate of transformers `major` runs every routed expert of `family` for every
    token (DENSE_EXPERTS_BEFORE); vLLM routes."""
    before = DENSE_EXPERTS_BEFORE.get(family)
    return generator == "transformers" and before is not None and major is not None and major < before


def cores() -> int:
    """The CPU cores this process may run on (PyTorch's threads on the CPU; the sandbox's programs at once)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def program_runs(profile) -> float:
    """Programs a completion's rewards run: each program reward runs it once per test case of its row."""
    rewards = [name for name in (getattr(profile, "rewards", None) or {}) if name in PROGRAM_REWARDS]
    return float(len(rewards) * TEST_CASES.get(profile.dataset, DEFAULT_TEST_CASES)) if rewards else 0.0


@dataclass(frozen=True)
class StepShape:
    """What the model needs of one configuration on one card."""

    layers: int
    hidden: int
    vocab: int
    linear_params: float  # every block's linear weights (all experts of a mixture)
    active_linear_params: float  # those one token runs through (a mixture's active experts)
    lm_head_params: float  # vocab x hidden (tied or not, the output projection is read every step)
    kv_bytes_per_token: float  # 16-bit keys and values over all layers
    q_dim: int
    weight_bits: int  # 16, 8 or 4 (bitsandbytes NF4)
    lora: bool
    trainable_params: float
    checkpointing: bool
    generator: str  # "vllm" or "transformers"
    prompts: int  # prompts per optimizer step (over every training process)
    generations: int
    micro_batch: int  # completions per forward/backward
    prompt_tokens: int  # expected prompt tokens
    expected: int  # expected completion tokens
    cap: int  # completion cap
    max_num_seqs: int = 256  # vLLM's sequences at once
    kv_tokens: int | None = None  # tokens vLLM's KV cache holds (None: not the limit)
    extra_forwards: float = 0  # forwards beyond the step's own: the reference model (beta > 0)
    float32: bool = False
    standby: bool = False
    own_vllm_weights: bool = False  # vLLM keeps a copy of its own (TRL's engine, a server): sent every generation
    world: int = 1  # data-parallel training processes
    tool_calls: int = 0  # tool-calling turns a completion takes (launcher.plan.turns); its rounds are timed apart
    call_tokens: int = 0  # tokens of one call
    reply_tokens: int = 0  # tokens of one tool reply
    num_iterations: int = 1  # TRL's num_iterations (GRPO's mu): optimisation passes over one generation batch
    steps_per_generation: int = 1  # optimizer steps whose prompts one generation batch holds (TRL's
    #                                steps_per_generation / gradient_accumulation_steps)
    plain: bool = False  # plain TRL + PEFT (accelerate, several GPUs or a vLLM server) instead of Unsloth's path
    vllm_engines: int = 1  # vLLM engines generating side by side (TRL's colocated: one per training process)
    vllm_tp: int = 1  # GPUs one engine is split over (tensor parallel)
    experts: int = 0  # routed experts of a mixture-of-experts block (0: dense)
    experts_per_token: int = 0
    expert_params: float = 0.0  # every routed expert's weights over all blocks (resident, read when routed to)
    scorer_params: float = 0.0  # the reward models' parameters: a forward over every completion of a generation
    family: str = ""  # the architecture's family (GRAPHED_FAMILIES decode with CUDA graphs on Unsloth's path)
    program_runs: float = 0.0  # programs a completion's rewards run (program_runs), each in a sandbox
    every_expert: bool = False  # generation runs every routed expert for every token (every_expert_generates)

    @property
    def completions(self) -> int:
        return self.prompts * self.generations

    @property
    def generate_every(self) -> int:
        """Optimizer steps between two generations (TRL's generate_every, in optimizer steps)."""
        return max(1, self.num_iterations) * max(1, self.steps_per_generation)

    @property
    def old_policy_forwards(self) -> float:
        """Forwards a step spends on the old policy's log-probs: TRL computes them once per generation batch
        (a forward over all of it) when that batch serves more than one optimizer step, i.e. 1 / num_iterations
        of a step's forward."""
        return 1.0 / max(1, self.num_iterations) if self.generate_every > 1 else 0.0


# Families Unsloth trains in float32 on a card without bfloat16 (unsloth_zoo's FORCE_FLOAT32 list)
FORCE_FLOAT32_FAMILIES = ("gemma3", "gemma3_text", "gemma3n", "gemma4", "gpt_oss", "qwen3_5", "qwen3_moe", "glm4_moe")


def shape_of(profile, arch, gpu, est=None, lengths=None) -> StepShape:
    """The StepShape of `profile` (a profiles.schema.Profile) with `arch` on `gpu` (a GpuInfo or None); `est`:
    its memory estimate (vLLM's sequences at once and KV cache come from it); `lengths`: its
    launcher.plan.completion_lengths.CompletionPlan (derived when not given)."""
    from contract.attempt import bf16_capable
    from launcher.plan.completion_lengths import completion_plan

    if lengths is None:
        lengths = completion_plan(profile, arch)
    expected = min(lengths.expected, profile.max_completion_length)
    engine = getattr(est, "vllm_engine", None) if est is not None else None
    max_seqs, kv_tokens = 256, None
    if profile.fast_inference:
        if engine:
            max_seqs, kv_tokens = engine["max_num_seqs"], engine["kv_tokens"]
        elif profile.distributed and not profile.uses_vllm_server:
            max_seqs = profile.effective_batch  # TRL's own engine: the generation batch of one process
        if profile.vllm_max_num_seqs:
            max_seqs = profile.vllm_max_num_seqs
    capability = getattr(gpu, "compute_capability", None)
    float32 = arch.family in FORCE_FLOAT32_FAMILIES and capability is not None and not bf16_capable(capability)
    trainable = (
        arch.lora_params(profile.lora_rank, profile.target_modules) if profile.uses_lora else arch.computed_params
    )
    moe = bool(getattr(arch, "is_moe", False))
    generator = "vllm" if profile.fast_inference else "transformers"
    engines, tp = 1, 1
    if profile.fast_inference and profile.distributed:
        tp = max(1, profile.vllm_tensor_parallel)
        engines = max(1, (profile.vllm_server_gpus if profile.uses_vllm_server else profile.num_gpus) // tp)
    return StepShape(
        layers=arch.layers,
        hidden=arch.hidden,
        vocab=arch.vocab,
        linear_params=float(arch.linear_params),
        active_linear_params=float(getattr(arch, "active_linear_params", arch.linear_params)),
        lm_head_params=float(arch.vocab * arch.hidden),
        kv_bytes_per_token=arch.kv_bytes_per_token(2),
        q_dim=arch.q_dim,
        weight_bits=4 if profile.load_in_4bit else 16,
        lora=profile.uses_lora,
        trainable_params=float(trainable),
        checkpointing=profile.gradient_checkpointing != "false",
        generator=generator,
        prompts=max(1, profile.completions_per_step // profile.num_generations),
        generations=profile.num_generations,
        micro_batch=profile.per_device_train_batch_size,
        prompt_tokens=lengths.prompt_expected,
        expected=expected,
        cap=profile.max_completion_length,
        max_num_seqs=max_seqs,
        kv_tokens=kv_tokens,
        extra_forwards=1 if profile.beta > 0 else 0,
        float32=float32,
        standby=profile.vllm_standby,
        own_vllm_weights=profile.fast_inference and profile.distributed,
        world=profile.num_gpus,
        **_turn_fields(lengths),
        num_iterations=int(getattr(profile, "num_iterations", 1) or 1),
        steps_per_generation=profile.updates_per_generation,
        plain=bool(profile.distributed),
        vllm_engines=engines,
        vllm_tp=tp,
        experts=arch.experts if moe else 0,
        experts_per_token=arch.experts_per_token if moe else 0,
        expert_params=float(arch.expert_params) if moe else 0.0,
        scorer_params=float(sum(s.arch.computed_params for s in scorers(profile) if s.arch is not None)),
        family=arch.family,
        program_runs=program_runs(profile),
        every_expert=moe and every_expert_generates(arch.family, generator, transformers_major()),
    )


def _turn_fields(lengths) -> dict:
    turns = getattr(lengths, "turns", None)
    if turns is None:
        return {}
    return {"tool_calls": turns.calls, "call_tokens": turns.call_tokens, "reply_tokens": turns.reply_tokens}
