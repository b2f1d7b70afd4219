"""WHICH configuration of a model a card should run: the fit solver.

The objective is learning per hour (launcher.plan.value): optimizer updates per hour, each worth P / (P + B)
for P prompts (GRPO groups) per update and B the critical batch; the step-time model (launcher.plan.speed)
predicts how long a step takes. The levers, in order of value (decided first, given up last):

  learning    1. the completion cap the task needs (launcher.plan.lengths): a cap above it buys nothing, one
                 below it truncates answers
              2. generations per group: ambition 8, floor 4 (16 where the card has room for them at little cost
                 in learning per hour: LARGE_GROUP_COST)
              3. LoRA rank: the rung's, down to 8
              4. 16-bit weights: 4-bit when 16-bit does not fit
  throughput  5. prompts per step (1 to MAX_PROMPTS_PER_STEP): every count that fits is judged, and the one with
                 the most learning per hour is taken (memory, the objective or the cap says where it stops)
              6. per step, the fastest of what fits: the micro-batch, gradient checkpointing, vLLM standby, and the
                 vLLM share with max_num_seqs, sized so that a step's completions generate in as few waves as
                 possible
  last resort vLLM itself: transformers generates instead, only when nothing fits with vLLM at the floors

Memory is judged as the plan judges it: this machine's measurement of a shape (the ledger) against usable
memory, else the estimate against the part of usable memory an estimate alone may use (margins.estimate_limit).
The search: the learning levers in their order, each at the most ambitious value that fits with every
throughput lever at its least (one prompt, micro-batch 1, the heaviest checkpointing, vLLM holding one group);
then prompts per step upward, each with its fastest micro-batch, checkpointing, standby and share.

Standby (UNSLOTH_VLLM_STANDBY) takes Unsloth's own share of the card (it replaces gpu_memory_utilization); the
solver never chooses it with 4-bit weights, where Unsloth's open reports have it run out of memory at start
(STANDBY_FAILURES); a user who pins it gets it, and the plan says why it may fail.
Full fine-tuning stays the user's choice (lora_rank 0 in the rung or pinned).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from launcher.card.detect import GpuInfo, bf16_supported
from launcher.memory.estimate import GIB, Estimate, estimate, standby_utilisation, vllm_sizes, weights_bytes
from launcher.memory.ledger.weigh import measured_for
from launcher.plan.lengths import CompletionPlan, completion_plan
from launcher.plan.margins import card_for, estimate_limit, margin_for
from launcher.plan.speed import StepTime, predict
from launcher.plan.value import critical_batch, learning_per_hour
from profiles.catalog import Architecture, catalogue_key, resolve, vllm_refuses
from profiles.keys import VLLM_LORA_RANKS, safe_name
from profiles.schema import LEVER_KEYS, MEMORY_KEYS

OBJECTIVE = "learning per hour: updates per hour x P / (P + B)"
MIN_GENERATIONS = 4
GENERATIONS_AMBITION = 8
MAX_GENERATIONS = 16
GENERATION_CHOICES = (8, 6, 4)
LARGE_GROUP_COST = 0.10  # 16 generations when they cost at most this share of prompts per hour
MIN_COMPLETION_LENGTH = 128  # below the task's cap only when nothing else fits: in steps of this
COMPLETION_STEP = 128
PROMPT_CHOICES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
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
    return learning_per_hour(speed.updates_per_hour, speed.prompts, critical_batch(device).prompts)


def quality_key(profile, speed: StepTime | None = None, need: int | None = None) -> tuple:
    """Orders configurations from the most valuable: the learning levers in their order (a completion cap
    counts up to `need`, the cap the task needs: more buys nothing), then learning per hour, then the larger
    group."""
    cap = min(profile.max_completion_length, need) if need else profile.max_completion_length
    return (
        cap,
        min(profile.num_generations, GENERATIONS_AMBITION),
        profile.lora_rank,
        not profile.load_in_4bit,
        round(objective(profile, speed), 6),
        profile.num_generations,
    )


@dataclass(frozen=True)
class Ambition:
    """What a configuration would learn with given enough memory, and the keys the user pinned."""

    generations: int
    prompts_per_step: int  # the least prompts per step (a pinned or held one: the only one)
    completion: int  # the cap the task needs, or the pinned cap
    prompt: int
    rank: int
    sixteen_bit: bool
    checkpointing: str
    batch: int
    standby: bool
    source: str  # the rung it comes from
    pinned: frozenset = frozenset()
    expected: int = 0  # tokens a completion is expected to run (0: the task's)
    basis: str = ""  # where the cap and the expected length come from

    def text(self) -> str:
        weights = "16-bit" if self.sixteen_bit else "4-bit"
        return (
            f"{self.generations} generations of up to {self.completion} tokens, LoRA {self.rank}, {weights} "
            f"(from {self.source})"
        )


def _pinned_prompts(profile, pinned: frozenset) -> int | None:
    """The prompts per step the pins hold, or None when the solver may choose them."""
    if PROMPTS_PIN in pinned or {"per_device_train_batch_size", "gradient_accumulation_steps"} <= pinned:
        return max(1, profile.effective_batch // profile.num_generations)
    return None


def ambition_of(
    profile,
    pinned=(),
    source: str | None = None,
    arch: Architecture | None = None,
    lengths: CompletionPlan | None = None,
    measurements=None,
) -> Ambition:
    """A profile's intent as an ambition: generations 8 (or pinned), the cap the task needs (or pinned; measured
    where the ledger has the answers' lengths), its LoRA rank, 16-bit weights unless load_in_4bit is pinned; the
    throughput levers are the solver's."""
    pinned = frozenset(pinned)
    arch = arch or resolve(profile.model)
    if lengths is None:
        lengths = completion_plan(profile, arch, pinned, measurements)
    generations = profile.num_generations if "num_generations" in pinned else GENERATIONS_AMBITION
    sixteen = True if "load_in_4bit" not in pinned else not profile.load_in_4bit
    prompts = _pinned_prompts(profile, pinned)
    completion = lengths.cap
    if arch.max_positions:  # never past the positions the model reads: what the prompt leaves, at most
        completion = max(0, min(completion, arch.max_positions - profile.max_prompt_length))
    return Ambition(
        generations=generations,
        prompts_per_step=prompts or 1,
        completion=completion,
        prompt=profile.max_prompt_length,
        rank=profile.lora_rank,
        sixteen_bit=sixteen or profile.lora_rank == 0,
        checkpointing=profile.gradient_checkpointing,
        batch=profile.per_device_train_batch_size,
        standby=profile.vllm_standby,
        source=source or profile.name,
        pinned=pinned,
        expected=lengths.expected,
        basis=lengths.basis,
    )


@dataclass
class GivenUp:
    lever: str
    before: str
    after: str
    saves_gib: float

    def text(self) -> str:
        return f"{self.lever.replace('_', ' ')} {self.before} -> {self.after} saves {self.saves_gib:.2f} GiB"

    def to_json(self) -> dict:
        return {"lever": self.lever, "from": self.before, "to": self.after, "saves_gib": round(self.saves_gib, 3)}


@dataclass
class Choice:
    """The solver's pick for one ambition: the profile (not yet validated), its predicted step and why it
    stopped there."""

    profile: object
    speed: StepTime
    limited_by: str
    smaller: Choice | None = None  # the same learning at its least throughput: a fallback that needs far less

    @property
    def prompts_per_hour(self) -> float:
        return self.speed.prompts_per_hour

    @property
    def value(self) -> float:
        """Learning per hour, the objective."""
        return objective(self.profile, self.speed)


@dataclass
class Fit:
    """The solver's answer for one ambition on one card."""

    ambition: Ambition
    profile: object | None  # the derived profile (validated), None when nothing fits
    estimate: Estimate | None
    need_gib: float | None  # what it is judged by (measured or estimated)
    usable_gib: float
    reason: str  # why nothing fits, or how it was judged
    ambition_need_gib: float  # the learning ambition at its least throughput
    card_for_ambition_gib: float  # the least card whose usable memory holds that
    given_up: list[GivenUp] = field(default_factory=list)
    measured: object = None
    speed: StepTime | None = None
    limited_by: str = ""
    pin_problem: str | None = None
    fallbacks: list = field(
        default_factory=list
    )  # (validated profile, quality key): the same with fewer prompts    # nothing fits because of the pins: what the least configuration without them needs

    @property
    def at_ambition(self) -> bool:
        """True when nothing of the experiment (generations, length, rank, precision) was given up."""
        return self.profile is not None and not any(
            g.lever in ("generations", "completion_length", "lora_rank", "4-bit") for g in self.given_up
        )

    @property
    def use(self) -> float | None:
        """The share of usable memory the chosen configuration needs."""
        return None if self.need_gib is None else self.need_gib / self.usable_gib

    def key(self) -> tuple:
        return (
            self.profile is not None,
            quality_key(self.profile, self.speed, self.ambition.completion) if self.profile is not None else (),
        )


def live_gib(est: Estimate, not_live) -> float:
    """The estimate without the components that are not held at one moment of the step."""
    return est.total_gib - sum(est.components.get(name, 0.0) for name in not_live)


def usable_of(gpu: GpuInfo) -> float:
    return gpu.free_gib - margin_for(gpu.total_gib, "cuda")


def limit_text(limited_by: str) -> str:
    return {
        "memory": "memory (the next prompts per step do not fit)",
        "objective": f"the objective (more prompts per step would learn less per hour, {critical_batch().text()})",
        "cap": f"the prompts-per-step cap ({MAX_PROMPTS_PER_STEP}), the card still had room",
        "pinned": "the pinned batch",
    }.get(limited_by, limited_by)


_KEY_FIELDS = tuple(dict.fromkeys(MEMORY_KEYS + LEVER_KEYS))


def _profile_key(p) -> tuple:
    return tuple(tuple(v) if isinstance(v, list) else v for v in (getattr(p, k) for k in _KEY_FIELDS))


# ---------------------------------------------------------------------------------------------------


class Solver:
    """One model, one card, one budget (GiB the need must stay under), optionally this machine's ledger.
    `headroom`: a shape judged by the estimate alone keeps the estimate's headroom (off for the OOM shrink,
    whose budget already holds one)."""

    def __init__(
        self,
        arch: Architecture,
        gpu: GpuInfo,
        budget_gib: float,
        machine=None,
        measurements=None,
        not_live=(),
        headroom: bool = True,
        lengths: CompletionPlan | None = None,
    ):
        self.arch, self.gpu, self.budget = arch, gpu, budget_gib
        self.limit = estimate_limit(budget_gib) if headroom else budget_gib
        self.machine, self.measurements = machine, measurements
        self.not_live = tuple(not_live)  # components not held at the moment judged (an OOM's site)
        self.vllm_refused = vllm_refuses(arch, bf16_supported(gpu))
        self.share_cap = SHARE_CAP
        self.lengths = lengths
        self.calls = 0
        self._needs: dict[tuple, tuple] = {}
        self._speeds: dict[tuple, StepTime] = {}

    # --- judging ------------------------------------------------------------------------------------
    def need(self, p) -> tuple[float, Estimate, object]:
        key = _profile_key(p)
        found = self._needs.get(key)
        if found is not None:
            return found
        self.calls += 1
        est = estimate(p, self.arch, self.gpu)
        measured = None
        if self.measurements and self.machine is not None:
            measured = measured_for(self.measurements, p, self.machine)
        need = measured.need_gib if measured is not None and measured.need_gib is not None else est.total_gib
        if self.not_live:
            need = live_gib(est, self.not_live)
        self._needs[key] = (need, est, measured)
        return need, est, measured

    def fits(self, p) -> bool:
        need, est, measured = self.need(p)
        if est.vllm_problem:
            return False
        if est.vllm_share_gib is not None and est.vllm_share_gib > self.gpu.free_gib:
            return False
        if est.server is not None and (
            est.server.vllm_problem or est.server.total_gib > estimate_limit(usable_of(self.gpu))
        ):
            return False  # a vLLM server GPU holds its share and its own context
        measured_here = measured is not None and measured.need_gib is not None
        return need <= (self.budget if measured_here else self.limit)

    def speed(self, p) -> StepTime:
        key = _profile_key(p)
        found = self._speeds.get(key)
        if found is None:
            _, est, measured = self.need(p)
            found = predict(p, self.arch, self.gpu, est, self.lengths, measured)
            self._speeds[key] = found
        return found

    # --- the vLLM share -----------------------------------------------------------------------------
    def _engine_bytes(self, p, sequences: int, share: float | None = None) -> float:
        """Weights, workspace (of an engine of `sequences` at once) and the KV cache of `sequences`
        full-length sequences: the share that holds them all at once. TRL's own colocated engine (several
        training GPUs) holds 1/tp of the weights and vLLM's own workspace, as the estimate counts it."""
        if p.distributed:
            tp = max(1, p.vllm_tensor_parallel)
            workspace, kv_token, _ = vllm_sizes(p, self.arch, tp)
            weights = weights_bytes(self.arch, p.load_in_4bit, "cuda") / tp
            return weights + workspace + max(1, sequences) * p.max_seq_length * kv_token
        weights = weights_bytes(self.arch, p.load_in_4bit, "cuda")
        guess = share if share is not None else weights
        for _ in range(2):  # the workspace depends on the engine's tier, which depends on the share
            workspace, kv_token, _ = vllm_sizes(p, self.arch, share_bytes=guess, seqs=max(1, sequences))
            guess = weights + workspace + sequences * p.max_seq_length * kv_token
        return guess

    def _sequences_in(self, p, share_bytes: float, most: int) -> int:
        """How many full-length sequences a share holds beside the weights and its workspace (at most `most`)."""
        weights = weights_bytes(self.arch, p.load_in_4bit, "cuda")
        sequences = most
        for _ in range(2):
            workspace, kv_token, one = vllm_sizes(p, self.arch, share_bytes=share_bytes, seqs=max(1, sequences))
            sequences = max(0, min(most, int((share_bytes - weights - workspace) // one)))
        return sequences

    def with_share(self, p, pinned: frozenset, at: str = "best"):
        """`p` with its vLLM share and sequences at once: at "floor" one group at once, at "best" the whole
        step's completions at once where they fit, else the largest share that fits. None when not even the
        floor fits."""
        if not p.fast_inference:
            return p if self.fits(p) else None
        if p.uses_vllm_server:  # GPUs of its own: the largest share beside its CUDA context and NCCL buffers
            if "gpu_memory_utilization" not in pinned:
                rest = estimate(p.model_copy(update={"gpu_memory_utilization": 0.01}), self.arch, self.gpu).server
                room = estimate_limit(usable_of(self.gpu)) - (rest.total_gib - 0.01 * self.gpu.total_gib)
                share = min(math.floor(room / self.gpu.total_gib * 100) / 100, self.share_cap)
                if share <= 0:
                    return None
                p = p.model_copy(update={"gpu_memory_utilization": share})
            return p if self.fits(p) else None
        total = self.gpu.total_gib * GIB
        group = p.num_generations
        wanted = group if at == "floor" else p.effective_batch
        own_seqs = "vllm_max_num_seqs" in pinned or p.distributed  # TRL's own engine sizes itself
        if p.vllm_standby:  # Unsloth's standby sets the share itself; the profile says what it will be
            share = min(round(standby_utilisation(self.gpu.total_gib), 2), SHARE_CAP)
        elif "gpu_memory_utilization" in pinned:
            share = p.gpu_memory_utilization
        else:
            floor = math.ceil(self._engine_bytes(p, group) / total * 100 - 1e-9) / 100
            full = math.ceil(self._engine_bytes(p, wanted) / total * 100 - 1e-9) / 100
            if floor > self.share_cap:
                return None
            probe = p.model_copy(
                update={
                    "gpu_memory_utilization": floor,
                    "vllm_max_num_seqs": p.vllm_max_num_seqs if own_seqs else group,
                }
            )
            need, est, _ = self.need(probe)
            # the need grows one for one with the share (it holds the weights, then vLLM's own memory)
            room = (self.limit - (need - floor * self.gpu.total_gib)) / self.gpu.total_gib
            top = min(math.floor(room * 100 + 1e-9) / 100, self.share_cap)
            share = floor if at == "floor" else max(floor, min(full, top))
        update = {"gpu_memory_utilization": share}
        if not own_seqs:
            update["vllm_max_num_seqs"] = (
                max(1, self._sequences_in(p, share * total, wanted)) if not p.distributed else 0
            )
        q = p.model_copy(update=update)
        if self.fits(q):
            return q
        if p.vllm_standby or "gpu_memory_utilization" in pinned or at == "floor":
            return None
        lower = round(share - 0.01, 2)  # the closed form rounds; one step down settles it
        if lower < floor:
            return None
        update["gpu_memory_utilization"] = lower
        if not own_seqs:
            update["vllm_max_num_seqs"] = max(1, self._sequences_in(p, lower * total, wanted))
        q = p.model_copy(update=update)
        return q if self.fits(q) else None

    # --- the options --------------------------------------------------------------------------------
    def options(self, base, amb: Ambition) -> dict:
        pinned = amb.pinned
        if "num_generations" in pinned:
            gens = [amb.generations]
        else:
            gens = [g for g in GENERATION_CHOICES if MIN_GENERATIONS <= g <= amb.generations] or [amb.generations]
        most = amb.completion
        if "max_seq_length" in pinned:
            most = min(most, base.max_seq_length - amb.prompt)
        if "max_completion_length" in pinned:
            lengths = [amb.completion] if amb.completion <= most else []
        else:
            top = min(most, amb.completion)
            lengths = (
                [top]
                + [
                    n
                    for n in range(
                        (top - 1) // COMPLETION_STEP * COMPLETION_STEP, MIN_COMPLETION_LENGTH - 1, -COMPLETION_STEP
                    )
                    if n >= MIN_COMPLETION_LENGTH
                ]
                if top >= 1
                else []
            )
        if "lora_rank" in pinned or amb.rank == 0:
            ranks = [amb.rank]
        else:
            ranks = sorted({r for r in VLLM_LORA_RANKS if MIN_LORA_RANK <= r <= amb.rank} | {amb.rank}, reverse=True)
        if amb.rank == 0 or "load_in_4bit" in pinned:
            four_bit = [not amb.sixteen_bit]
        else:
            four_bit = [False, True]
        if "gradient_checkpointing" in pinned:
            checkpointing = [amb.checkpointing]
            if base.distributed and amb.checkpointing == "unsloth":
                checkpointing = []  # accelerate keeps checkpoints on the GPU: "unsloth" is Unsloth's
        elif base.distributed:
            checkpointing = ["false", "true"]
        else:
            checkpointing = ["false", "unsloth"]  # "true" runs as fast as "unsloth" and keeps more on the GPU
        if not base.fast_inference or base.distributed:
            standby = [False] if "vllm_standby" not in pinned or not amb.standby else []
        elif "vllm_standby" in pinned:
            standby = [amb.standby]
        elif "gpu_memory_utilization" in pinned:
            standby = [False]  # standby would replace the pinned share with Unsloth's own
        else:
            standby = [False, True]
        fixed = amb.prompts_per_step if _pinned_prompts(base, pinned) is not None else None
        prompts = [fixed] if fixed is not None else [p for p in PROMPT_CHOICES if p >= amb.prompts_per_step]
        return {
            "gens": gens,
            "lengths": lengths,
            "lora_rank": ranks,
            "load_in_4bit": four_bit,
            "gradient_checkpointing": checkpointing,
            "vllm_standby": standby,
            "prompts": prompts,
        }

    @staticmethod
    def standby_allowed(amb: Ambition, four_bit: bool, option: bool) -> bool:
        """Standby as an option for these weights: never chosen by the solver with 4-bit (STANDBY_FAILURES)."""
        return not option or "vllm_standby" in amb.pinned or not four_bit

    def batches(self, base, amb: Ambition, completions: int) -> list[int]:
        """Per-device batches that divide the step's completions of one process, most first."""
        if "per_device_train_batch_size" in amb.pinned:
            return [base.per_device_train_batch_size] if completions % base.per_device_train_batch_size == 0 else []
        if "gradient_accumulation_steps" in amb.pinned:
            steps = base.gradient_accumulation_steps
            return [completions // steps] if completions % steps == 0 else []
        return [b for b in range(completions, 0, -1) if completions % b == 0]

    def shaped(self, base, amb: Ambition, gens: int, length: int, levers: dict, prompts: int, batch: int):
        completions = prompts * gens
        rank = levers["lora_rank"]
        seq = base.max_seq_length if "max_seq_length" in amb.pinned else amb.prompt + length
        expected = (
            base.expected_completion_length
            if "expected_completion_length" in amb.pinned
            else min(amb.expected, length)
            if amb.expected
            else 0
        )
        update = {
            "num_generations": gens,
            "max_completion_length": length,
            "max_prompt_length": amb.prompt,
            "max_seq_length": seq,
            "per_device_train_batch_size": batch,
            "gradient_accumulation_steps": completions // batch,
            "expected_completion_length": expected,
            **levers,
        }
        if rank and base.lora_rank and "lora_alpha" not in amb.pinned:
            update["lora_alpha"] = max(1, round(base.lora_alpha * rank / base.lora_rank))
        return base.model_copy(update=update)

    # --- the search ---------------------------------------------------------------------------------
    def least_prompts(self, base, amb: Ambition, opts: dict, gens: int) -> int | None:
        """The fewest prompts per step whose completions a (pinned) batch cuts into whole groups."""
        return next((p for p in opts["prompts"] if self.batches(base, amb, p * gens)), None)

    def _least(self, base, amb, opts, gens, length, rank, four_bit) -> bool:
        """Whether the learning levers fit with every throughput lever at its least."""
        prompts = self.least_prompts(base, amb, opts, gens)
        if prompts is None:
            return False
        batches = self.batches(base, amb, prompts * gens)
        for standby in opts["vllm_standby"]:
            if not self.standby_allowed(amb, four_bit, standby):
                continue
            levers = {
                "lora_rank": rank,
                "load_in_4bit": four_bit,
                "gradient_checkpointing": opts["gradient_checkpointing"][-1],
                "vllm_standby": standby,
            }
            p = self.shaped(base, amb, gens, length, levers, prompts, batches[-1])
            if self.with_share(p, amb.pinned, "floor") is not None:
                return True
        return False

    def learning(self, base, amb: Ambition, opts: dict) -> tuple[int, int, int, bool] | None:
        """(completion length, generations, rank, 4-bit): each learning lever at its most valuable value that
        fits, in their order of value, with the throughput levers at their least."""
        cheapest_rank, cheapest_bits = opts["lora_rank"][-1], opts["load_in_4bit"][-1]
        for length in opts["lengths"]:
            for gens in opts["gens"]:
                if self._least(base, amb, opts, gens, length, cheapest_rank, cheapest_bits):
                    rank = next(
                        r for r in opts["lora_rank"] if self._least(base, amb, opts, gens, length, r, cheapest_bits)
                    )
                    four_bit = next(
                        b for b in opts["load_in_4bit"] if self._least(base, amb, opts, gens, length, rank, b)
                    )
                    return length, gens, rank, four_bit
        return None

    def best_at(self, base, amb: Ambition, opts: dict, learned: tuple, prompts: int) -> Choice | None:
        """The fastest configuration of `prompts` per step with the learning levers `learned`."""
        length, gens, rank, four_bit = learned
        batches = self.batches(base, amb, prompts * gens)
        best = None
        for checkpointing in opts["gradient_checkpointing"]:
            for standby in opts["vllm_standby"]:
                if not self.standby_allowed(amb, four_bit, standby):
                    continue
                levers = {
                    "lora_rank": rank,
                    "load_in_4bit": four_bit,
                    "gradient_checkpointing": checkpointing,
                    "vllm_standby": standby,
                }

                def placed(batch, levers=levers):
                    return self.with_share(self.shaped(base, amb, gens, length, levers, prompts, batch), amb.pinned)

                # the largest batch that fits (memory grows with the batch: a binary search), and the next
                # smaller one, whose vLLM share may be larger
                low, high, found = 0, len(batches) - 1, None
                while low <= high:
                    middle = (low + high) // 2
                    p = placed(batches[middle])
                    if p is not None:
                        found, high = (middle, p), middle - 1
                    else:
                        low = middle + 1
                if found is None:
                    continue
                candidates = [found[1]]
                if found[0] + 1 < len(batches):
                    smaller = placed(batches[found[0] + 1])
                    if smaller is not None:
                        candidates.append(smaller)
                for p in candidates:
                    choice = Choice(p, self.speed(p), "")
                    if best is None or choice.value > best.value:
                        best = choice
        return best

    def search(self, base, amb: Ambition) -> Choice | None:
        """The solver's choice for `base` (unvalidated copy), or None when nothing fits."""
        if self.vllm_refused and base.uses_vllm_server:
            return None  # the server cannot start here, and it is nothing but vLLM
        if self.vllm_refused and base.fast_inference:
            base = base.model_copy(update={"fast_inference": False, "vllm_standby": False, "vllm_max_num_seqs": 0})
        found = self._search(base, amb)
        if found is None and base.fast_inference and not base.uses_vllm_server and "fast_inference" not in amb.pinned:
            found = self._search(
                base.model_copy(update={"fast_inference": False, "vllm_standby": False, "vllm_max_num_seqs": 0}), amb
            )
        return found

    def solve(self, base, amb: Ambition):
        """The chosen profile (unvalidated copy of `base`), or None."""
        found = self.search(base, amb)
        return found.profile if found is not None else None

    def _search(self, base, amb: Ambition) -> Choice | None:
        opts = self.options(base, amb)
        if not all(
            opts[k]
            for k in (
                "gens",
                "lengths",
                "lora_rank",
                "load_in_4bit",
                "gradient_checkpointing",
                "vllm_standby",
                "prompts",
            )
        ):
            return None  # a pinned key the configuration cannot take (e.g. offloaded checkpoints on accelerate)
        learned = self.learning(base, amb, opts)
        if learned is None:
            return None
        best, last, limited = None, None, "cap"
        for prompts in opts["prompts"]:
            if not self.batches(base, amb, prompts * learned[1]):
                continue  # a pinned batch does not cut these completions into whole groups
            choice = self.best_at(base, amb, opts, learned, prompts)
            if choice is None:
                limited = "memory" if best is not None else limited
                break
            last = choice
            if best is None or choice.value > best.value:
                best = choice
        if best is None:
            return None
        if best is not last:  # a larger step fitted, and learned less per hour
            limited = "objective"
        best.smaller = self._least_choice(base, amb, opts, learned)
        if len(opts["prompts"]) == 1:
            limited = "pinned"
        best.limited_by = limited
        length, gens, rank, four_bit = learned
        if gens == GENERATIONS_AMBITION and "num_generations" not in amb.pinned and limited == "cap":
            prompts = max(1, best.speed.prompts // max(best.profile.num_gpus, 1))
            larger = self.best_at(base, amb, opts, (length, MAX_GENERATIONS, rank, four_bit), prompts)
            if larger is not None and larger.value >= (1 - LARGE_GROUP_COST) * best.value:
                larger.limited_by = limited
                best = larger
        return best

    def _least_choice(self, base, amb: Ambition, opts: dict, learned: tuple) -> Choice | None:
        """The learning levers `learned` at the least throughput (the fallback rung): one prompt per step,
        micro-batch 1, the heaviest checkpointing, vLLM holding one group."""
        length, gens, rank, four_bit = learned
        prompts = self.least_prompts(base, amb, opts, gens) or opts["prompts"][0]
        batches = self.batches(base, amb, prompts * gens)
        levers = {
            "lora_rank": rank,
            "load_in_4bit": four_bit,
            "gradient_checkpointing": opts["gradient_checkpointing"][-1],
            "vllm_standby": opts["vllm_standby"][0] if "vllm_standby" in amb.pinned else False,
        }
        if not batches:
            return None
        p = self.with_share(self.shaped(base, amb, gens, length, levers, prompts, batches[-1]), amb.pinned, "floor")
        return Choice(p, self.speed(p), "fallback") if p is not None else None

    # --- the ambition and what was given up ---------------------------------------------------------
    def ambitious(self, base, amb: Ambition):
        """The learning ambition as a profile at its least throughput: one prompt per step (or the pinned
        prompts), micro-batch 1, the heaviest checkpointing, vLLM holding one group."""
        if self.vllm_refused and base.fast_inference:
            base = base.model_copy(update={"fast_inference": False, "vllm_standby": False, "vllm_max_num_seqs": 0})
        checkpointing = "true" if base.distributed else "unsloth"
        if "gradient_checkpointing" in amb.pinned:
            checkpointing = amb.checkpointing
        levers = {
            "lora_rank": amb.rank,
            "load_in_4bit": not amb.sixteen_bit,
            "gradient_checkpointing": checkpointing,
            "vllm_standby": amb.standby and base.fast_inference and "vllm_standby" in amb.pinned,
        }
        completions = amb.prompts_per_step * amb.generations
        batches = self.batches(base, amb, completions) or [1]
        p = self.shaped(base, amb, amb.generations, amb.completion, levers, amb.prompts_per_step, batches[-1])
        return self.least_share(p, amb.pinned)

    def least_share(self, p, pinned):
        """`p` with vLLM holding one group at once (whatever the card can give)."""
        if not p.fast_inference or p.vllm_standby or p.uses_vllm_server or "gpu_memory_utilization" in pinned:
            return p
        share = self._engine_bytes(p, p.num_generations) / (self.gpu.total_gib * GIB)
        seqs = p.vllm_max_num_seqs if "vllm_max_num_seqs" in pinned or p.distributed else p.num_generations
        return p.model_copy(
            update={"gpu_memory_utilization": min(math.ceil(share * 100 - 1e-9) / 100, 0.99), "vllm_max_num_seqs": seqs}
        )

    def given_up(self, ambition_profile, chosen) -> list[GivenUp]:
        """Each learning lever's change from the ambition to the choice, with the GiB it saved, taken from the
        last given up (the experiment) to the first, each at the least throughput (one group in vLLM)."""
        steps = (
            ("generator", ("fast_inference",)),
            ("completion_length", ("max_completion_length", "max_seq_length")),
            ("generations", ("num_generations",)),
            ("lora_rank", ("lora_rank", "lora_alpha")),
            ("4-bit", ("load_in_4bit",)),
        )
        current = ambition_profile
        before = estimate(current, self.arch, self.gpu).total_gib
        out: list[GivenUp] = []
        for lever, keys in steps:
            if all(getattr(current, k) == getattr(chosen, k) for k in keys):
                continue
            update = {k: getattr(chosen, k) for k in keys}
            if lever == "generations":  # the same prompts per step, in whole groups
                prompts = max(1, current.effective_batch // current.num_generations)
                update.update(
                    {"per_device_train_batch_size": 1, "gradient_accumulation_steps": prompts * chosen.num_generations}
                )
            if lever == "generator":
                update.update({"vllm_standby": False, "vllm_max_num_seqs": 0})
            nxt = self.least_share(current.model_copy(update=update), frozenset())
            after = estimate(nxt, self.arch, self.gpu).total_gib
            out.append(GivenUp(lever, _lever_text(lever, current), _lever_text(lever, nxt), before - after))
            current, before = nxt, after
        return out


def _lever_text(lever: str, p) -> str:
    if lever == "generator":
        return "vLLM" if p.fast_inference else "transformers"
    if lever == "generations":
        return str(p.num_generations)
    if lever == "completion_length":
        return str(p.max_completion_length)
    if lever == "lora_rank":
        return str(p.lora_rank)
    if lever == "4-bit":
        return "4-bit" if p.load_in_4bit else "16-bit"
    return str(getattr(p, lever, "?"))


# ---------------------------------------------------------------------------------------------------
# Entry points

SINGLE_GPU = {"num_gpus": 1, "vllm_mode": "colocate", "vllm_server_gpus": 1, "vllm_tensor_parallel": 1}


def fit(
    base,
    gpu: GpuInfo,
    *,
    arch: Architecture | None = None,
    ambition: Ambition | None = None,
    pinned=(),
    machine=None,
    measurements=None,
    budget_gib: float | None = None,
    name: str | None = None,
    topology: dict | None = None,
) -> Fit:
    """The configuration of `base`'s model with the most prompts per hour that fits `gpu` (free memory less the
    margin, or `budget_gib`), from `ambition` (default: `base`'s own intent), on one GPU or the `topology`
    given (num_gpus, vllm_mode, vllm_server_gpus, vllm_tensor_parallel; `gpu` is then each GPU's card)."""
    arch = arch or resolve(base.model)
    lengths = completion_plan(base, arch, ambition.pinned if ambition is not None else frozenset(pinned), measurements)
    amb = ambition or ambition_of(base, pinned, arch=arch, lengths=lengths)
    usable = usable_of(gpu) if budget_gib is None else budget_gib
    solver = Solver(arch, gpu, usable, machine, measurements, lengths=lengths)
    base = base.model_copy(update={"device": "cuda", "zero_stage": 0, **(topology or SINGLE_GPU)})
    if solver.vllm_refused and base.fast_inference and "fast_inference" in amb.pinned:
        from contract.errors import ProfileError

        raise ProfileError(
            "--set",
            "fast_inference",
            f"pinned true, but {solver.vllm_refused}",
            "drop --set fast_inference=true: transformers generates on this card",
        )
    if base.distributed:
        base = base.model_copy(
            update={
                "vllm_standby": False,
                "vllm_max_num_seqs": 0,
                "fast_inference": True if base.uses_vllm_server else base.fast_inference,
            }
        )
    top = solver.ambitious(base, amb)
    top_need = estimate(top, arch, gpu).total_gib
    found = solver.search(base, amb)
    if found is None:
        reason, pin_problem = _nothing_fits(solver, base, amb, usable)
        return Fit(amb, None, None, None, usable, reason, top_need, card_for(top_need), pin_problem=pin_problem)
    chosen = found.profile
    given_up = solver.given_up(top, solver.least_share(chosen, amb.pinned))
    need, est, measured = solver.need(chosen)
    updates = {k: getattr(chosen, k) for k in LEVER_KEYS}
    derived = base.replace(
        **updates,
        name=name or derived_name(arch, chosen),
        description=f"derived by the fit solver for {arch.name} on a {gpu.total_gib:g} GiB "
        f"card from the intent of {amb.source}",
    )
    source = f" ({measured.text()}; est. {est.total_gib:.2f})" if measured is not None else ""
    fallbacks = []
    if found.smaller is not None and name is None and _profile_key(found.smaller.profile) != _profile_key(chosen):
        smaller = found.smaller.profile
        fallbacks.append(
            (
                base.replace(
                    **{k: getattr(smaller, k) for k in LEVER_KEYS},
                    name=derived_name(arch, smaller),
                    description=derived.description,
                ),
                quality_key(smaller, found.smaller.speed, amb.completion),
            )
        )
    return Fit(
        amb,
        derived,
        est,
        need,
        usable,
        f"fits: {need:.2f} of {usable:.2f} GiB usable{source}",
        top_need,
        card_for(top_need),
        given_up,
        measured,
        found.speed,
        found.limited_by,
        fallbacks=fallbacks,
    )


def _nothing_fits(solver: Solver, base, amb: Ambition, usable: float) -> tuple[str, str | None]:
    """(why not even the least configuration fits: what it needs, its largest parts; and, when the pins are
    the cause, what the least configuration without them needs, else None)."""
    least = replace(
        amb,
        generations=min(amb.generations, MIN_GENERATIONS) if "num_generations" not in amb.pinned else amb.generations,
        completion=min(amb.completion, MIN_COMPLETION_LENGTH)
        if "max_completion_length" not in amb.pinned
        else amb.completion,
    )
    opts = solver.options(base, amb)
    if solver.vllm_refused and base.fast_inference:
        base = base.model_copy(update={"fast_inference": False, "vllm_standby": False, "vllm_max_num_seqs": 0})
    levers = {
        "lora_rank": (opts["lora_rank"] or [least.rank])[-1],
        "load_in_4bit": (opts["load_in_4bit"] or [True])[-1],
        "gradient_checkpointing": (opts["gradient_checkpointing"] or ["true"])[-1],
        "vllm_standby": False,
    }
    prompts = solver.least_prompts(base, least, opts, least.generations) or (opts["prompts"] or [1])[0]
    batches = solver.batches(base, least, prompts * least.generations)
    if not batches:
        return (
            f"nothing fits: {least.generations} generations x {prompts} prompt(s) per step cannot be cut into "
            "the pinned batch",
            None,
        )
    p = solver.least_share(
        solver.shaped(base, least, least.generations, least.completion, levers, prompts, batches[-1]), amb.pinned
    )
    est = estimate(p, solver.arch, solver.gpu)
    if p.fast_inference and "fast_inference" not in amb.pinned:  # the last resort, transformers generating
        hf = p.model_copy(update={"fast_inference": False, "vllm_standby": False, "vllm_max_num_seqs": 0})
        hf_est = estimate(hf, solver.arch, solver.gpu)
        if est.vllm_problem or hf_est.total_gib < est.total_gib:
            p, est = hf, hf_est
    parts = sorted(((v, k) for k, v in est.components.items() if v > 0), reverse=True)[:3]
    what = (
        f"{least.generations} generations of {least.completion} tokens, LoRA {levers['lora_rank']}, "
        f"{'4-bit' if levers['load_in_4bit'] else '16-bit'}, {prompts} prompt(s) a step, batch "
        f"{batches[-1]}, " + ("vLLM holding one group" if p.fast_inference else "transformers generating")
    )
    limit = solver.limit
    if est.vllm_problem:
        reason = f"nothing fits: even {what}: {est.vllm_problem}"
    elif est.total_gib <= limit:  # the least fits by itself: a pinned lever or the ledger refused the rest
        reason = (
            f"nothing fits: even {what} is refused here (estimated {est.total_gib:.2f} GiB of {limit:.2f} an "
            "estimate may use); this machine's ledger or a pinned key rules out every larger step"
        )
    else:
        reason = (
            f"nothing fits: even {what} needs {est.total_gib:.2f} GiB, {limit:.2f} of {usable:.2f} usable "
            "an estimate may use (largest: "
            + ", ".join(f"{k} {v:.2f}" for v, k in parts)
            + f"); a card of {card_for(est.total_gib / 0.92):.1f} GiB would hold it"
        )
    pins = sorted(amb.pinned - {PROMPTS_PIN, "model"})
    if not pins:
        return reason, None
    free_amb = replace(amb, pinned=frozenset(), generations=GENERATIONS_AMBITION)
    free = Solver(solver.arch, solver.gpu, solver.budget, lengths=solver.lengths)
    if free.search(base, free_amb) is None:
        return reason, None
    return reason, f"with --set {', '.join(pins)} nothing fits on this card, and without them a configuration does"


def derived_name(arch: Architecture, p) -> str:
    """fit-MODEL-GxPxL-rR-4bit: what the configuration is, readable in a table and safe as a folder name."""
    model = safe_name(catalogue_key(arch.name), 24)  # a folder called modèle-été is fit-modele-ete-...
    weights = "4bit" if p.load_in_4bit else "16bit"
    prompts = p.effective_batch // p.num_generations
    generator = "" if p.fast_inference else "-hf"
    if p.distributed:
        generator += f"-{p.num_gpus}gpu" + (f"-server{p.vllm_server_gpus}" if p.uses_vllm_server else "")
    return f"fit-{model}-{p.num_generations}x{prompts}x{p.max_completion_length}-r{p.lora_rank}-{weights}{generator}"
