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
                      step as above plus the launch cost of each layer's kernels (no CUDA graphs); plain
                      transformers + PEFT (the several-GPU path, without Unsloth's fast generation) launches
                      PLAIN_GENERATE_SLOWDOWN times as many per layer (the unmerged LoRA layers' own kernels).
  mixture of experts  compute runs through the active experts; a decode step reads every expert that one of its
                      sequences routes to: of E experts, k chosen a token, n sequences touch E(1 - (1 - k/E)^n)
                      (all of them once n is large), and a training micro-batch touches them all.
  training            forward and backward over prompt + completion tokens, each micro-batch padded to its
                      longest completion: 2 x parameters FLOPs a token forward, as much again backward for LoRA
                      (activation gradients; the adapters' own are negligible) and twice for full fine-tuning,
                      one more forward under gradient checkpointing, one more for the reference model when
                      beta > 0; the logits only for completion tokens. A micro-batch takes the longest of its
                      FLOPs, its weight reads (4-bit dequantisation included) and its kernel launches (the GPU
                      runs behind Python's launches, so the two overlap); the optimizer reads and writes what
                      is trained. The plain TRL + PEFT path trains PLAIN_TRAINING_SLOWDOWN times slower.
  reuse               TRL generates once per num_iterations x steps_per_generation optimizer steps (its
                      `generate_every`): one generation batch of steps_per_generation steps' prompts, trained on
                      num_iterations times. A step carries its share of that generation, of the weight sync and
                      of the old policy's log-probs (one forward over the generation batch, computed when the
                      batch serves more than one optimizer step).
  weight sync         Unsloth shares the weights with vLLM: the new LoRA adapter is handed over (small); a
                      vLLM of its own (TRL's colocated engine, a server) is sent every weight.
  fixed               per step: rewards (regular expressions for the shipped tasks: negligible), logging,
                      Python; under standby the engine's sleep and wake; a reward model's forward (as prefill).

The constants are few and physical: the card's peak bandwidth and 16-bit throughput come from the card table
(launcher.card.facts); what share of those a phase reaches, the engine's step cost, a kernel's launch cost and
the step's fixed cost are set once for every card and model (not per published run). How well that predicts
published runs is measured by benchmarks/published_step_times.py and stated in docs/planning.md. The CPU has
a model of its own (launcher.plan.cpu_speed).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from launcher.card.facts import DEFAULT, CardFacts, card_facts
from launcher.plan.step_shape import StepShape, cores, shape_of

# Share of a card's peak that each phase reaches
BANDWIDTH_EFFICIENCY = 0.6  # decode and dequantisation: bulk copies reach ~0.9 of peak, a decode step's
#                                   many smaller reads less
TRAIN_MATMUL_EFFICIENCY = 0.35  # training's GEMMs (LoRA on frozen weights, the GRPO loss, attention)
PREFILL_MATMUL_EFFICIENCY = 0.5  # prefill's large GEMMs
# Fixed costs
VLLM_DECODE_STEP_S = 0.008  # one vLLM decode step beyond its reads: scheduling, sampling, detokenising
KERNEL_LAUNCH_S = 0.00107  # one 16-bit layer's kernels launched once by eager PyTorch: refitted with the next one and
#                                   the plain path's factors to the H100 kit's 29 timings (docs/planning.md)
DEQUANT_LAUNCH_FACTOR = 1.47  # a layer of bitsandbytes 4-bit weights against a 16-bit one (a dequantisation kernel
#                                   beside every linear): the kit decoded 4-bit Qwen2.5-0.5B at 1.46 ms a layer, the
#                                   16-bit 14B at 1.17
GRAPHED_LAUNCH_S = 0.00023  # a layer's launches where Unsloth decodes with CUDA graphs (GRAPHED_FAMILIES): fitted
#                                   (least squares in log) to the kit's four Llama waves beside the reads charged
GRAPHED_FAMILIES = ("llama", "qwen3")
MICRO_BATCH_FIXED_S = 0.1  # a micro-batch's work on Unsloth's path beside its layers' launches (the loss, the
#                                   log-probs' chunks, the optimizer's Python): the kit's small steps took 0.09-0.25 s
#                                   more than their launches (the plain path's factor holds its own)
# The plain TRL + PEFT path (several GPUs) against Unsloth's, measured by the H100 kit at the same shapes
# (benchmarks/gpu/nvidia-h100-80gb-hbm3.md): generate 2.1-11.8x slower a token than its rollout context (2.3-2.9x
# than its plain generate()), a training step 0.87-1.89x (docs/planning.md)
PLAIN_GENERATE_SLOWDOWN = 2.24
PLAIN_TRAINING_SLOWDOWN = 1.5
STEP_FIXED_S = 2.0  # per optimizer step: rewards, logging, the adapter handed to vLLM, Python
STANDBY_SWITCH_S = 0.5  # per step under standby: the engine falls asleep and wakes (logged 0.1-0.35 s)
PROGRAM_RUN_S = 0.014  # CPU seconds of one program run in the local sandbox, a fresh Python against one test case
#                       (benchmarks/sandbox_throughput.md: about 42 ms a completion of 3 test cases)
HOST_LINK_GB_S = 12.0  # PCIe to host or between GPUs without NVLink (weights to a vLLM server)
# The constants a measured card refits (measure.refit), by name
FITTED_CONSTANTS = (
    "BANDWIDTH_EFFICIENCY",
    "TRAIN_MATMUL_EFFICIENCY",
    "PREFILL_MATMUL_EFFICIENCY",
    "KERNEL_LAUNCH_S",
    "DEQUANT_LAUNCH_FACTOR",
    "PLAIN_GENERATE_SLOWDOWN",
    "PLAIN_TRAINING_SLOWDOWN",
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


@dataclass
class StepTime:
    """Predicted seconds of one optimizer step, by phase, and what limits it."""

    step_s: float
    generation_s: float
    training_s: float
    sync_s: float
    fixed_s: float
    prompts: int  # prompts per optimizer step (each update's groups)
    waves: float  # the generation batch's completions over the sequences vLLM runs at once
    sequences_at_once: int
    generation_limit: str  # "bandwidth", "compute" or "engine" (the engine's own per-step cost)
    card: str
    card_known: bool
    notes: list[str] = field(default_factory=list)
    measured_s: float | None = None  # this machine's measurement of the shape, when the ledger has one
    num_iterations: int = 1  # each prompt's groups serve this many updates (fresh prompts per step: P / mu)
    generate_every: int = 1  # optimizer steps between two generations

    @property
    def updates_per_hour(self) -> float:
        return 3600.0 / self.step_s if self.step_s > 0 else 0.0

    @property
    def fresh_prompts(self) -> float:
        """Prompts of the data a step uses up on average (TRL repeats each generation batch num_iterations
        times)."""
        return self.prompts / max(1, self.num_iterations)

    @property
    def prompts_per_hour(self) -> float:
        """Prompts of the data generated for and trained on per hour."""
        return self.fresh_prompts * self.updates_per_hour

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
            "updates_per_hour": round(self.updates_per_hour, 2),
            "prompts_per_step": self.prompts,
            "generate_every": self.generate_every,
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


def experts_touched(s: StepShape, tokens: float) -> float:
    """Routed experts of one block that `tokens` tokens route to between them (each picks experts_per_token
    of experts at random): E (1 - (1 - k/E)^tokens)."""
    if not s.experts or not s.experts_per_token:
        return 0.0
    share = min(1.0, s.experts_per_token / s.experts)
    return s.experts * (1.0 - (1.0 - share) ** max(tokens, 1.0))


def _linear_read(s: StepShape, tokens: float) -> float:
    """Linear weights a forward over `tokens` tokens at once reads: every dense weight, and the routed
    experts those tokens touch (a dense model: all of them)."""
    if not s.experts or not s.expert_params:
        return s.active_linear_params
    dense = s.linear_params - s.expert_params
    return dense + s.expert_params * experts_touched(s, tokens) / s.experts


def _weight_read_bytes(s: StepShape, batched: bool, tokens: float | None = None) -> float:
    """Bytes one forward reads of the weights (the output projection in 16-bit always; 4-bit weights
    dequantised when more than one row runs through them); `tokens` at once decide a mixture's experts
    read (None: every expert)."""
    linear = _linear_read(s, tokens if tokens is not None else float("inf"))
    if s.weight_bits == 4:
        per = DEQUANT_BYTES if batched else 0.5625
    elif s.weight_bits == 8:
        per = 1.0  # FP8 weights feed FP8 matmuls (vLLM's, and Unsloth's FP8 training) without a 16-bit copy
    else:
        per = 2.0 if not s.float32 else 4.0
    return linear * per + s.lm_head_params * (4.0 if s.float32 else 2.0)


def _layer_launch_s(s: StepShape) -> float:
    """Seconds eager PyTorch takes to launch one layer's kernels once (more for 4-bit weights)."""
    return KERNEL_LAUNCH_S * (DEQUANT_LAUNCH_FACTOR if s.weight_bits == 4 else 1.0)


def _decode_step(
    s: StepShape, sequences: float, context: float, bandwidth: float, flops: float, launch: float
) -> tuple[float, str]:
    reads = _weight_read_bytes(s, sequences > 1, sequences) + sequences * context * s.kv_bytes_per_token
    compute = 2.0 * (s.active_linear_params + s.lm_head_params) * sequences
    read_s, compute_s = reads / bandwidth, compute / flops
    body = max(read_s, compute_s)
    limit = "bandwidth" if read_s >= compute_s else "compute"
    if launch > body:
        limit = "engine"
    return body + launch, limit


def generation_time(s: StepShape, card: CardFacts) -> tuple[float, float, int, str]:
    """(seconds, waves, sequences at once, limit) of generating one step's completions: vLLM's engines (one,
    one per training process with TRL's colocated engine, one per copy on a server) and transformers (every
    training process its own share) generate side by side, each its share of the completions; an engine split
    tensor-parallel over tp GPUs reads and computes with all of them."""
    # vLLM generates in 16-bit whatever the trainer computes in (Unsloth's float32 is the training side's)
    bandwidth, _, prefill_flops = _speeds(card, s.float32 and s.generator != "vllm")
    engines = max(1, s.vllm_engines if s.generator == "vllm" else s.world)
    n = max(1, math.ceil(s.completions / engines))
    prompts = max(1, math.ceil(s.prompts / engines))
    if s.generator == "vllm" and s.vllm_tp > 1:
        bandwidth, prefill_flops = bandwidth * s.vllm_tp, prefill_flops * s.vllm_tp
    longest = longest_of(n, s.expected, s.cap)
    if s.generator == "vllm":
        at_once = min(n, max(1, s.max_num_seqs))
        if s.kv_tokens is not None:
            typical = s.prompt_tokens + min(s.cap, s.expected * (1.0 + LENGTH_SPREAD))
            at_once = max(1, min(at_once, int(s.kv_tokens // max(typical, 1))))
        steps = n * s.expected / at_once + (longest - s.expected)
        occupancy = n * s.expected / steps
        prefill = prompts * s.prompt_tokens * 2.0 * (s.active_linear_params + s.lm_head_params) / prefill_flops
        per_step, limit = _decode_step(
            s, occupancy, s.prompt_tokens + s.expected / 2.0, bandwidth, prefill_flops, VLLM_DECODE_STEP_S
        )
        return prefill + steps * per_step, n / at_once, at_once, limit
    # transformers: the whole generation batch at once, padded until the longest finishes
    if s.every_expert:
        s = replace(s, experts_per_token=s.experts, active_linear_params=s.linear_params)
    prefill = n * s.prompt_tokens * 2.0 * (s.active_linear_params + s.lm_head_params) / prefill_flops
    graphed = s.family in GRAPHED_FAMILIES and not s.plain
    launch = (
        (GRAPHED_LAUNCH_S if graphed else _layer_launch_s(s)) * s.layers * (PLAIN_GENERATE_SLOWDOWN if s.plain else 1.0)
    )
    per_step, limit = _decode_step(s, n, s.prompt_tokens + longest / 2.0, bandwidth, prefill_flops, launch)
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
    extra = s.extra_forwards + s.old_policy_forwards
    forwards = 1.0 + backward + (1.0 if s.checkpointing else 0.0) + extra
    attention = 4.0 * s.layers * s.q_dim * (s.prompt_tokens + longest) / 2.0  # per token, forward
    per_forward = 2.0 * s.active_linear_params * tokens + attention * tokens + 2.0 * s.lm_head_params * scored
    compute = forwards * per_forward / flops
    passes = 2.0 + (1.0 if s.checkpointing else 0.0) + extra  # weight reads: forward-like passes
    reads = passes * _weight_read_bytes(s, True, tokens) / bandwidth
    launches = passes * s.layers * _layer_launch_s(s) * 3.0 + (0.0 if s.plain else MICRO_BATCH_FIXED_S)
    # the GPU runs behind Python's launches: a micro-batch takes the longest of its work and their launches
    per_micro = max(compute, reads, launches)
    optimizer = 16.0 * s.trainable_params / bandwidth  # fp32 parameter, gradient and two moments, read and written
    seconds = micro_batches * per_micro + optimizer
    return seconds * (PLAIN_TRAINING_SLOWDOWN if s.plain else 1.0)


def programs_time(s: StepShape) -> float:
    """Seconds the rewards' programs take over a generation batch: every run over the machine's cores at once."""
    return s.completions * s.program_runs * PROGRAM_RUN_S / cores()


def scoring_time(s: StepShape, card: CardFacts) -> float:
    """Seconds the reward models' forward takes over a generation batch: 2 x parameters FLOPs a token, as prefill."""
    return 2.0 * s.scorer_params * s.completions * (s.prompt_tokens + s.expected) / _speeds(card, s.float32)[2]


def step_time(s: StepShape, card_name: str | None, memory_gib: float | None = None) -> StepTime:
    """The predicted step of `s` on the card NVML calls `card_name` (an unknown name: DEFAULT's speed)."""
    card = card_facts(card_name, memory_gib) or DEFAULT
    notes = []
    if not card.known:
        notes.append(
            f"card {card_name or 'unnamed'} not in the card table: speed from the default "
            f"({card.bandwidth_gb_s:g} GB/s, {card.tflops_16bit:g} TFLOPS), so the times err long"
        )
    every = s.generate_every
    # one generation batch holds steps_per_generation steps' prompts and serves `every` optimizer steps
    batch = replace(s, prompts=s.prompts * max(1, s.steps_per_generation)) if s.steps_per_generation > 1 else s
    generation, waves, at_once, limit = turns_generation_time(batch, card)
    generation /= every
    training = training_time(s, card)
    sync = 0.0
    if s.own_vllm_weights:  # the new weights go to vLLM before each generation
        weights = s.linear_params * 2.0 + s.lm_head_params * 2.0
        sync = weights / (HOST_LINK_GB_S * 1e9) / every
    rewards = scoring_time(batch, card) + programs_time(batch)
    fixed = STEP_FIXED_S + (STANDBY_SWITCH_S / every if s.standby else 0.0) + rewards / every
    total = generation + training + sync + fixed
    return StepTime(
        total,
        generation,
        training,
        sync,
        fixed,
        s.prompts,
        waves,
        at_once,
        limit,
        card.name,
        card.known,
        notes,
        num_iterations=max(1, s.num_iterations),
        generate_every=every,
    )


def predict(profile, arch, gpu, est=None, lengths=None, measured=None) -> StepTime:
    """The predicted step of `profile` on `gpu`, or this machine's measurement of it (as_measured)."""
    shape = shape_of(profile, arch, gpu, est, lengths)
    return as_measured(step_time(shape, getattr(gpu, "name", None), getattr(gpu, "total_gib", None)), measured)


def as_measured(result: StepTime, measured) -> StepTime:
    """`result`, or the step time `measured` carries (this machine's ledger figures for the shape) as its own."""
    seconds = getattr(measured, "step_s", None) if measured is not None else None
    if seconds:
        result.notes.append(f"measured {seconds:.2f} s per step on this machine (predicted {result.step_s:.2f})")
        scale = seconds / result.step_s if result.step_s > 0 else 1.0
        result.measured_s, result.step_s = seconds, seconds
        result.generation_s, result.training_s = result.generation_s * scale, result.training_s * scale
    return result
