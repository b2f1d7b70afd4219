"""HOW LONG one optimizer step takes: the step-time model the planner ranks configurations by (no torch).

A GRPO step generates its completions, scores them, and trains on them:

  generation (vLLM)   the prompts' prefill (once per prompt: vLLM caches the shared prefix of a group), then
                      decode steps. vLLM batches the step's completions continuously, at most `max_num_seqs` at
                      once and as many as its KV cache holds; the step lasts the total tokens over the sequences
                      at once, plus the tail of the longest completion. One decode step reads the weights
                      (16-bit, or bitsandbytes 4-bit dequantised: NF4 read, 16-bit written and read again)
                      and every sequence's KV cache from memory, or computes 2 x parameters FLOPs a sequence,
                      whichever takes longer, plus a fixed cost of the engine's step (scheduling, sampling).
  generation (transformers, vLLM off)
                      every completion of the step at once, for as many decode steps as the longest one, each
                      step as above plus the launch cost of each layer's kernels (no CUDA graphs).
  training            forward and backward over prompt + completion tokens, each micro-batch padded to its
                      longest completion: 2 x parameters FLOPs a token forward, as much again backward for LoRA
                      (activation gradients; the adapters' own are negligible) and twice for full fine-tuning,
                      one more forward under gradient checkpointing, one more for the reference model when
                      beta > 0 and for the old policy when num_iterations > 1; the logits only for completion
                      tokens. A micro-batch takes the longer of its FLOPs and its weight reads, plus 4-bit
                      dequantisation and kernel launches; the optimizer reads and writes what is trained.
  weight sync         Unsloth shares the weights with vLLM: the new LoRA adapter is handed over (small); a
                      vLLM of its own (TRL's colocated engine, a server) is sent every weight.
  fixed               per step: rewards (regular expressions for the shipped tasks: negligible), logging,
                      Python; under standby the engine's sleep and wake.

The constants are few and physical: the card's peak bandwidth and 16-bit throughput come from the card table
(launcher.card.facts); what share of those a phase reaches, the engine's step cost, a kernel's launch cost and
the step's fixed cost are set once for every card and model (not per published run). How well that predicts
published runs is measured by benchmarks/published_step_times.py and stated in docs/planning.md.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field

from launcher.card.facts import DEFAULT, CardFacts, card_facts

# Share of a card's peak that each phase reaches
BANDWIDTH_EFFICIENCY = 0.6  # decode and dequantisation: bulk copies reach ~0.9 of peak, a decode step's
#                                   many smaller reads less
TRAIN_MATMUL_EFFICIENCY = 0.35  # training's GEMMs (LoRA on frozen weights, the GRPO loss, attention)
PREFILL_MATMUL_EFFICIENCY = 0.5  # prefill's large GEMMs
# Fixed costs
VLLM_DECODE_STEP_S = 0.008  # one vLLM decode step beyond its reads: scheduling, sampling, detokenising
KERNEL_LAUNCH_S = 0.001  # one layer's kernels launched once, forward or backward, by eager PyTorch (no CUDA
#                                   graphs): some twenty kernels and Python's dispatch of each. Refitted to
#                                   Unsloth's generate on an H100 (benchmarks/gpu/nvidia-h100-80gb-hbm3.md:
#                                   1.03 ms a layer; `train.py refit ... --path unsloth --constants
#                                   KERNEL_LAUNCH_S`); plain transformers' generate there took 2.2 ms
STEP_FIXED_S = 2.0  # per optimizer step: rewards, logging, the adapter handed to vLLM, Python
STANDBY_SWITCH_S = 0.5  # per step under standby: the engine falls asleep and wakes (logged 0.1-0.35 s)
HOST_LINK_GB_S = 12.0  # PCIe to host or between GPUs without NVLink (weights to a vLLM server)
# The constants a measured card refits (measure.refit), by name
FITTED_CONSTANTS = (
    "BANDWIDTH_EFFICIENCY",
    "TRAIN_MATMUL_EFFICIENCY",
    "PREFILL_MATMUL_EFFICIENCY",
    "KERNEL_LAUNCH_S",
)
# Completion lengths vary: the longest of n is about mean x (1 + spread x sqrt(2 ln n)), at most the cap
LENGTH_SPREAD = 0.5
# Bytes moved per bitsandbytes 4-bit weight on every use by a batch: NF4 read, 16-bit written, 16-bit read
DEQUANT_BYTES = 0.5625 + 2 + 2
# fp32 arithmetic (Unsloth's forced float32 for Gemma 3 below capability 8.0) against 16-bit tensor cores
FLOAT32_SLOWDOWN = 8.0


@contextmanager
def constants_set(values: dict):
    """Within the block, the step-time model computes with `values` ({name: value} of FITTED_CONSTANTS) in
    place of its own; they are put back after."""
    unknown = sorted(set(values) - set(FITTED_CONSTANTS))
    if unknown:
        raise KeyError(f"not a fitted constant of the step-time model: {', '.join(unknown)}")
    module = globals()
    saved = {name: module[name] for name in values}
    module.update(values)
    try:
        yield
    finally:
        module.update(saved)


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
    extra_forwards: int = 0  # reference model (beta > 0), old policy (num_iterations > 1)
    float32: bool = False
    standby: bool = False
    own_vllm_weights: bool = False  # vLLM keeps a copy of its own (TRL's engine, a server): sent every step
    world: int = 1  # data-parallel training processes
    tool_calls: int = 0  # tool-calling turns a completion takes (launcher.plan.turns); its rounds are timed apart
    call_tokens: int = 0  # tokens of one call
    reply_tokens: int = 0  # tokens of one tool reply

    @property
    def completions(self) -> int:
        return self.prompts * self.generations


@dataclass
class StepTime:
    """Predicted seconds of one optimizer step, by phase, and what limits it."""

    step_s: float
    generation_s: float
    training_s: float
    sync_s: float
    fixed_s: float
    prompts: int
    waves: float  # the step's completions over the sequences vLLM runs at once
    sequences_at_once: int
    generation_limit: str  # "bandwidth", "compute" or "engine" (the engine's own per-step cost)
    card: str
    card_known: bool
    notes: list[str] = field(default_factory=list)
    measured_s: float | None = None  # this machine's measurement of the shape, when the ledger has one

    @property
    def prompts_per_hour(self) -> float:
        return 3600.0 * self.prompts / self.step_s if self.step_s > 0 else 0.0

    @property
    def limited_by(self) -> str:
        """The phase that takes the most of a step, and what bounds it there."""
        if self.generation_s >= self.training_s:
            return f"generation ({self.generation_limit})"
        return "training"

    def to_json(self, limited_by: str | None = None) -> dict:
        return {
            "step_s": round(self.step_s, 3),
            "generation_s": round(self.generation_s, 3),
            "training_s": round(self.training_s, 3),
            "prompts_per_hour": round(self.prompts_per_hour, 1),
            "limited_by": limited_by or self.limited_by,
            "sync_s": round(self.sync_s, 3),
            "fixed_s": round(self.fixed_s, 3),
            "waves": round(self.waves, 2),
            "sequences_at_once": self.sequences_at_once,
            "card": self.card,
            "card_known": self.card_known,
            "measured_step_s": None if self.measured_s is None else round(self.measured_s, 3),
            "notes": list(self.notes),
        }


def longest_of(n: int, expected: float, cap: float) -> float:
    """The expected longest of n completions of mean length `expected`, at most the cap."""
    if n <= 1:
        return min(expected, cap)
    return min(cap, expected * (1.0 + LENGTH_SPREAD * math.sqrt(2.0 * math.log(n))))


def _speeds(card: CardFacts, float32: bool) -> tuple[float, float, float]:
    """(bytes/s for decode reads, FLOP/s for training, FLOP/s for prefill) of the card."""
    flops = card.tflops_16bit * 1e12 / (FLOAT32_SLOWDOWN if float32 else 1.0)
    return (
        card.bandwidth_gb_s * 1e9 * BANDWIDTH_EFFICIENCY,
        flops * TRAIN_MATMUL_EFFICIENCY,
        flops * PREFILL_MATMUL_EFFICIENCY,
    )


def _weight_read_bytes(s: StepShape, batched: bool) -> float:
    """Bytes one forward reads of the weights (the output projection in 16-bit always; 4-bit weights
    dequantised when more than one row runs through them)."""
    linear = s.active_linear_params
    if s.weight_bits == 4:
        per = DEQUANT_BYTES if batched else 0.5625
    elif s.weight_bits == 8:
        per = 1.0  # FP8 weights feed FP8 matmuls (vLLM's, and Unsloth's FP8 training) without a 16-bit copy
    else:
        per = 2.0 if not s.float32 else 4.0
    return linear * per + s.lm_head_params * (4.0 if s.float32 else 2.0)


def _decode_step(
    s: StepShape, sequences: float, context: float, bandwidth: float, flops: float, launch: float
) -> tuple[float, str]:
    reads = _weight_read_bytes(s, sequences > 1) + sequences * context * s.kv_bytes_per_token
    compute = 2.0 * (s.active_linear_params + s.lm_head_params) * sequences
    read_s, compute_s = reads / bandwidth, compute / flops
    body = max(read_s, compute_s)
    limit = "bandwidth" if read_s >= compute_s else "compute"
    if launch > body:
        limit = "engine"
    return body + launch, limit


def generation_time(s: StepShape, card: CardFacts) -> tuple[float, float, int, str]:
    """(seconds, waves, sequences at once, limit) of generating one step's completions."""
    # vLLM generates in 16-bit whatever the trainer computes in (Unsloth's float32 is the training side's)
    bandwidth, _, prefill_flops = _speeds(card, s.float32 and s.generator != "vllm")
    n = s.completions
    longest = longest_of(n, s.expected, s.cap)
    if s.generator == "vllm":
        at_once = min(n, max(1, s.max_num_seqs))
        if s.kv_tokens is not None:
            typical = s.prompt_tokens + min(s.cap, s.expected * (1.0 + LENGTH_SPREAD))
            at_once = max(1, min(at_once, int(s.kv_tokens // max(typical, 1))))
        steps = n * s.expected / at_once + (longest - s.expected)
        occupancy = n * s.expected / steps
        prefill = s.prompts * s.prompt_tokens * 2.0 * (s.active_linear_params + s.lm_head_params) / prefill_flops
        per_step, limit = _decode_step(
            s, occupancy, s.prompt_tokens + s.expected / 2.0, bandwidth, prefill_flops, VLLM_DECODE_STEP_S
        )
        return prefill + steps * per_step, n / at_once, at_once, limit
    # transformers: the whole generation batch at once, padded until the longest finishes
    prefill = n * s.prompt_tokens * 2.0 * (s.active_linear_params + s.lm_head_params) / prefill_flops
    per_step, limit = _decode_step(
        s, n, s.prompt_tokens + longest / 2.0, bandwidth, prefill_flops, KERNEL_LAUNCH_S * s.layers
    )
    return prefill + longest * per_step, 1.0, n, limit


def turns_generation_time(s: StepShape, card: CardFacts) -> tuple[float, float, int, str]:
    """generation_time over a step's rounds when its completions call tools (each round's requests generated,
    their prompts prefilled again), else the one round's."""
    from launcher.plan.turns import rounds

    timed = [generation_time(shape, card) for shape in rounds(s)]
    first = timed[0]
    return sum(t[0] for t in timed), sum(t[1] for t in timed), first[2], first[3]


def training_time(s: StepShape, card: CardFacts) -> float:
    """Seconds of forward, backward and optimizer over one step's completions (one training process)."""
    bandwidth, flops, _ = _speeds(card, s.float32)
    completions = s.completions // max(s.world, 1)
    micro_batches = max(1, math.ceil(completions / max(s.micro_batch, 1)))
    longest = longest_of(s.micro_batch, s.expected, s.cap)
    tokens = s.micro_batch * (s.prompt_tokens + longest)
    scored = s.micro_batch * longest
    backward = 1.0 if s.lora else 2.0
    forwards = 1.0 + backward + (1.0 if s.checkpointing else 0.0) + s.extra_forwards
    attention = 4.0 * s.layers * s.q_dim * (s.prompt_tokens + longest) / 2.0  # per token, forward
    per_forward = 2.0 * s.active_linear_params * tokens + attention * tokens + 2.0 * s.lm_head_params * scored
    compute = forwards * per_forward / flops
    passes = 2.0 + (1.0 if s.checkpointing else 0.0) + s.extra_forwards  # weight reads: forward-like passes
    reads = passes * _weight_read_bytes(s, True) / bandwidth
    launches = passes * s.layers * KERNEL_LAUNCH_S * 3.0  # LoRA and the fused kernels: several launches a layer
    per_micro = max(compute, reads) + launches
    optimizer = 16.0 * s.trainable_params / bandwidth  # fp32 parameter, gradient and two moments, read and written
    return micro_batches * per_micro + optimizer


def step_time(s: StepShape, card_name: str | None, memory_gib: float | None = None) -> StepTime:
    """The predicted step of `s` on the card NVML calls `card_name` (an unknown name: DEFAULT's speed)."""
    card = card_facts(card_name, memory_gib) or DEFAULT
    notes = []
    if not card.known:
        notes.append(
            f"card {card_name or 'unnamed'} not in the card table: speed from the default "
            f"({card.bandwidth_gb_s:g} GB/s, {card.tflops_16bit:g} TFLOPS), so the times err long"
        )
    generation, waves, at_once, limit = turns_generation_time(s, card)
    training = training_time(s, card)
    sync = 0.0
    if s.own_vllm_weights:
        weights = s.linear_params * 2.0 + s.lm_head_params * 2.0
        sync = weights / (HOST_LINK_GB_S * 1e9)
    fixed = STEP_FIXED_S + (STANDBY_SWITCH_S if s.standby else 0.0)
    total = generation + training + sync + fixed
    return StepTime(
        total, generation, training, sync, fixed, s.prompts, waves, at_once, limit, card.name, card.known, notes
    )


# ---------------------------------------------------------------------------------------------------
# A profile's step

# Families Unsloth trains in float32 on a card without bfloat16 (unsloth_zoo's FORCE_FLOAT32 list)
FORCE_FLOAT32_FAMILIES = ("gemma3", "gemma3_text", "gemma3n", "gemma4", "gpt_oss", "qwen3_5", "qwen3_moe", "glm4_moe")


def shape_of(profile, arch, gpu, est=None, lengths=None) -> StepShape:
    """The StepShape of `profile` (a profiles.schema.Profile) with `arch` on `gpu` (a GpuInfo or None); `est`:
    its memory estimate (vLLM's sequences at once and KV cache come from it); `lengths`: its
    launcher.plan.lengths.CompletionPlan (derived when not given)."""
    from contract.attempt import bf16_capable
    from launcher.plan.lengths import completion_plan

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
    extra = (1 if profile.beta > 0 else 0) + (1 if getattr(profile, "num_iterations", 1) > 1 else 0)
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
        generator="vllm" if profile.fast_inference else "transformers",
        prompts=max(1, profile.generation_batch // profile.num_generations),
        generations=profile.num_generations,
        micro_batch=profile.per_device_train_batch_size,
        prompt_tokens=lengths.prompt_expected,
        expected=expected,
        cap=profile.max_completion_length,
        max_num_seqs=max_seqs,
        kv_tokens=kv_tokens,
        extra_forwards=extra,
        float32=float32,
        standby=profile.vllm_standby,
        own_vllm_weights=profile.fast_inference and profile.distributed,
        world=profile.num_gpus,
        **_turn_fields(lengths),
    )


def _turn_fields(lengths) -> dict:
    turns = getattr(lengths, "turns", None)
    if turns is None:
        return {}
    return {"tool_calls": turns.calls, "call_tokens": turns.call_tokens, "reply_tokens": turns.reply_tokens}


def predict(profile, arch, gpu, est=None, lengths=None, measured=None) -> StepTime:
    """The predicted step of `profile` on `gpu`; with `measured` (this machine's ledger figures for the shape,
    launcher.memory.ledger.weigh.Measured) carrying a measured step time, that time is the step's."""
    shape = shape_of(profile, arch, gpu, est, lengths)
    result = step_time(shape, getattr(gpu, "name", None), getattr(gpu, "total_gib", None))
    seconds = getattr(measured, "step_s", None) if measured is not None else None
    if seconds:
        result.measured_s = seconds
        result.notes.append(f"measured {seconds:.2f} s per step on this machine (predicted {result.step_s:.2f})")
        scale = seconds / result.step_s if result.step_s > 0 else 1.0
        result.step_s, result.generation_s, result.training_s = (
            seconds,
            result.generation_s * scale,
            result.training_s * scale,
        )
    return result
