"""WHICH configuration of a model is the most ambitious that fits a card: the fit solver.

The objective ("most ambitious"): the most completion tokens per optimizer step, i.e. completions per step
(num_generations x prompts per step) x max_completion_length, never below MIN_GENERATIONS generations and
MIN_COMPLETION_LENGTH tokens (a GSM8K worked solution and its answer). Among configurations of equal objective,
more generations win (a larger group gives GRPO a better baseline). With the objective held, the other levers
are kept as close to the ambition as memory allows, in this order of value (the reverse of the order in which
they are given up, cheapest in training quality first):

    given up first   vLLM share            a reservation, not a need: from the whole generation batch in one wave
                                           down to one group (num_generations completions) at once
                     per-device batch      against gradient accumulation, the effective batch kept
                     checkpointing, standby slower steps, same learning
                     4-bit weights         when 16-bit does not fit
                     LoRA rank             down to 8
                     completion length, generations   the experiment itself
    last resort      vLLM itself           transformers generates instead, only when nothing fits with vLLM at
                                           the floors: no cost in quality, several times slower generation

The ambition is a shipped rung's intent (its generations, lengths, rank, batch; 16-bit unless said otherwise) or
what the user pinned with --set (a pinned key is never moved). Memory is judged as the plan judges it: this
machine's measurement of a shape (the ledger) when it has one, else the estimate, against free memory less the
margin. Search: for each (generations, length) pair in objective order, the pair is feasible when it fits with
every other lever at its cheapest; the first feasible pair is kept, then each lever in order of value takes the
most ambitious value that still fits, the vLLM share last. A few hundred estimates at most (about 40 us each).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from launcher.card.detect import GpuInfo, bf16_supported
from launcher.memory.estimate import GIB, Estimate, estimate, standby_utilisation, vllm_sizes, weights_bytes
from launcher.memory.ledger.weigh import measured_for
from launcher.plan.margins import card_for, margin_for
from profiles.catalog import Architecture, catalogue_key, resolve, vllm_refuses
from profiles.keys import safe_name
from profiles.keys import VLLM_LORA_RANKS
from profiles.schema import LEVER_KEYS

MIN_GENERATIONS = 4
MIN_COMPLETION_LENGTH = 256
COMPLETION_STEP = 128              # completion lengths tried: the ambition, then multiples of this below it
GENERATION_CHOICES = (16, 12, 8, 6, 4)
MIN_LORA_RANK = 8
CHECKPOINTING_ORDER = ("false", "true", "unsloth")   # each keeps less on the GPU than the one before
SHARE_CAP = 0.95                   # vLLM beside training: never more of the card than this
GIVEN_UP_ORDER = ("vllm_share", "batch", "checkpointing", "standby", "4-bit", "lora_rank", "completion_length",
                  "generations", "generator")
# The profile keys behind each lever: a key pinned with --set holds its lever where the profile has it.
LEVER_GROUPS = {
    "vllm_share": ("gpu_memory_utilization",), "batch": ("per_device_train_batch_size", "gradient_accumulation_steps"),
    "checkpointing": ("gradient_checkpointing",), "standby": ("vllm_standby",), "4-bit": ("load_in_4bit",),
    "lora_rank": ("lora_rank",), "completion_length": ("max_completion_length",),
    "generations": ("num_generations",), "generator": ("fast_inference",),
}


def objective(profile) -> int:
    """Completion tokens per optimizer step: what the solver maximises."""
    return profile.generation_batch * profile.max_completion_length


def quality_key(profile) -> tuple:
    """Orders configurations from the most ambitious: the objective, then each lever in order of value."""
    checkpointing = CHECKPOINTING_ORDER.index(profile.gradient_checkpointing)
    return (objective(profile), profile.num_generations, profile.lora_rank, not profile.load_in_4bit,
            not profile.vllm_standby, -checkpointing, profile.per_device_train_batch_size,
            profile.gpu_memory_utilization if profile.fast_inference else 0.0)


@dataclass(frozen=True)
class Ambition:
    """What a configuration would be given enough memory, and the keys the user pinned."""

    generations: int
    prompts_per_step: int
    completion: int
    prompt: int
    rank: int
    sixteen_bit: bool
    checkpointing: str
    batch: int
    standby: bool
    source: str                       # the rung it comes from
    pinned: frozenset = frozenset()

    @property
    def objective(self) -> int:
        return self.generations * self.prompts_per_step * self.completion

    def text(self) -> str:
        weights = "16-bit" if self.sixteen_bit else "4-bit"
        return (f"{self.generations} generations x {self.prompts_per_step} prompt(s) of {self.completion} tokens, "
                f"LoRA {self.rank}, {weights} (from {self.source})")


def ambition_of(profile, pinned=(), source: str | None = None) -> Ambition:
    """A profile's intent as an ambition: its generations, lengths, rank, batch and checkpointing; 16-bit weights
    unless load_in_4bit is pinned (4-bit is a lever) or it trains every parameter (which needs 16-bit anyway)."""
    pinned = frozenset(pinned)
    generations = profile.num_generations
    sixteen = True if "load_in_4bit" not in pinned else not profile.load_in_4bit
    return Ambition(generations=generations, prompts_per_step=max(1, profile.effective_batch // generations),
                    completion=profile.max_completion_length, prompt=profile.max_prompt_length,
                    rank=profile.lora_rank, sixteen_bit=sixteen or profile.lora_rank == 0,
                    checkpointing=profile.gradient_checkpointing, batch=profile.per_device_train_batch_size,
                    standby=profile.vllm_standby, source=source or profile.name, pinned=pinned)


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
class Fit:
    """The solver's answer for one ambition on one card."""

    ambition: Ambition
    profile: object | None            # the derived profile (validated), None when nothing fits
    estimate: Estimate | None
    need_gib: float | None            # what it is judged by (measured or estimated)
    usable_gib: float
    reason: str                       # why nothing fits, or how it was judged
    ambition_need_gib: float          # the full ambition's estimate, vLLM holding the whole generation batch
    card_for_ambition_gib: float      # the least card whose usable memory holds that
    given_up: list[GivenUp] = field(default_factory=list)
    measured: object = None

    @property
    def at_ambition(self) -> bool:
        """True when nothing of the experiment (generations, length, rank, precision) was given up."""
        return self.profile is not None and not any(
            g.lever in ("generations", "completion_length", "lora_rank", "4-bit") for g in self.given_up)

    @property
    def use(self) -> float | None:
        """The share of usable memory the chosen configuration needs."""
        return None if self.need_gib is None else self.need_gib / self.usable_gib


def live_gib(est: Estimate, not_live) -> float:
    """The estimate without the components that are not held at one moment of the step."""
    return est.total_gib - sum(est.components.get(name, 0.0) for name in not_live)


def usable_of(gpu: GpuInfo) -> float:
    return gpu.free_gib - margin_for(gpu.total_gib, "cuda")


# ---------------------------------------------------------------------------------------------------

class Solver:
    """One model, one card, one budget (GiB the need must stay under), optionally this machine's ledger."""

    def __init__(self, arch: Architecture, gpu: GpuInfo, budget_gib: float, machine=None, measurements=None,
                 not_live=()):
        self.arch, self.gpu, self.budget = arch, gpu, budget_gib
        self.machine, self.measurements = machine, measurements
        self.not_live = tuple(not_live)  # components not held at the moment judged (an OOM's site)
        self.vllm_refused = vllm_refuses(arch, bf16_supported(gpu))
        self.share_cap = SHARE_CAP
        self.calls = 0

    # --- judging ------------------------------------------------------------------------------------
    def need(self, p) -> tuple[float, Estimate, object]:
        self.calls += 1
        est = estimate(p, self.arch, self.gpu)
        measured = None
        if self.measurements and self.machine is not None:
            measured = measured_for(self.measurements, p, self.machine)
        need = measured.need_gib if measured is not None and measured.need_gib is not None else est.total_gib
        if self.not_live:
            need = live_gib(est, self.not_live)
        return need, est, measured

    def fits(self, p) -> bool:
        if p.fast_inference and p.vllm_standby:
            share = standby_utilisation(self.gpu.total_gib) * self.gpu.total_gib * GIB
            if share < self._share_bytes(p, p.num_generations):
                return False  # standby's own share must still hold one group at once
        need, est, _ = self.need(p)
        if est.vllm_problem:
            return False
        if est.vllm_share_gib is not None and est.vllm_share_gib > self.gpu.free_gib:
            return False
        if est.server is not None and (est.server.vllm_problem or est.server.total_gib > usable_of(self.gpu)):
            return False  # a vLLM server GPU holds its share and its own context
        return need <= self.budget

    # --- the vLLM share -----------------------------------------------------------------------------
    def _share_bytes(self, p, sequences: int) -> float:
        """Weights, workspace and the KV cache of `sequences` full-length sequences at once."""
        workspace, kv_token, _ = vllm_sizes(p, self.arch)
        return (weights_bytes(self.arch, p.load_in_4bit, "cuda") + workspace
                + sequences * p.max_seq_length * kv_token)

    def share_range(self, p) -> tuple[float, float]:
        """(floor, full) utilisation in hundredths: one group at once, the whole generation batch at once."""
        total = self.gpu.total_gib * GIB
        floor = math.ceil(self._share_bytes(p, p.num_generations) / total * 100 - 1e-9) / 100
        full = math.ceil(self._share_bytes(p, p.effective_batch) / total * 100 - 1e-9) / 100
        return max(floor, 0.01), max(full, 0.01)

    def with_share(self, p, pinned: frozenset, at: str):
        """`p` with its vLLM share at the floor ("floor") or the largest that fits up to full ("best")."""
        if not p.fast_inference or "gpu_memory_utilization" in pinned:
            return p
        if p.uses_vllm_server:  # GPUs of its own: the largest share beside its CUDA context and NCCL buffers
            rest = estimate(p.model_copy(update={"gpu_memory_utilization": 0.01}), self.arch, self.gpu).server
            room = usable_of(self.gpu) - (rest.total_gib - 0.01 * self.gpu.total_gib)
            share = min(math.floor(room / self.gpu.total_gib * 100) / 100, self.share_cap)
            return p.model_copy(update={"gpu_memory_utilization": share}) if share > 0 else None
        if p.vllm_standby:  # Unsloth's standby sets the share itself; the profile says what it will be
            return p.model_copy(update={"gpu_memory_utilization": min(round(
                standby_utilisation(self.gpu.total_gib), 2), SHARE_CAP)})
        floor, full = self.share_range(p)
        if floor > self.share_cap:
            return None
        full = min(full, self.share_cap)
        if at == "floor":
            return p.model_copy(update={"gpu_memory_utilization": floor})
        top = p.model_copy(update={"gpu_memory_utilization": full})
        if self.fits(top):
            return top
        low, high = round(floor * 100), round(full * 100)  # floor fits (checked by the caller), full does not
        while high - low > 1:
            mid = (low + high) // 2
            if self.fits(p.model_copy(update={"gpu_memory_utilization": mid / 100})):
                low = mid
            else:
                high = mid
        return p.model_copy(update={"gpu_memory_utilization": low / 100})

    # --- the search ---------------------------------------------------------------------------------
    def options(self, base, amb: Ambition) -> dict:
        pinned = amb.pinned
        gens = [amb.generations] if "num_generations" in pinned else \
            [amb.generations] + [g for g in GENERATION_CHOICES if MIN_GENERATIONS <= g < amb.generations]
        if "max_completion_length" in pinned or amb.completion <= MIN_COMPLETION_LENGTH:
            lengths = [amb.completion]
        else:
            top = (amb.completion - 1) // COMPLETION_STEP * COMPLETION_STEP
            lengths = [amb.completion] + [n for n in range(top, MIN_COMPLETION_LENGTH - 1, -COMPLETION_STEP)
                                          if n >= MIN_COMPLETION_LENGTH]
            if lengths[-1] != MIN_COMPLETION_LENGTH:
                lengths.append(MIN_COMPLETION_LENGTH)
        if "lora_rank" in pinned or amb.rank == 0:
            ranks = [amb.rank]
        else:
            ranks = sorted({r for r in VLLM_LORA_RANKS if MIN_LORA_RANK <= r <= amb.rank} | {amb.rank},
                           reverse=True)
        if amb.rank == 0 or "load_in_4bit" in pinned:
            four_bit = [not amb.sixteen_bit]
        else:
            four_bit = [False, True]
        if "gradient_checkpointing" in pinned:
            checkpointing = [amb.checkpointing]
        else:
            checkpointing = list(CHECKPOINTING_ORDER[CHECKPOINTING_ORDER.index(amb.checkpointing):])
        if base.distributed:  # accelerate keeps checkpoints on the GPU ("true"); standby is Unsloth's
            checkpointing = [m for m in checkpointing if m != "unsloth"] or \
                ([] if "gradient_checkpointing" in pinned else ["true"])
        if not base.fast_inference or base.distributed:
            standby = [False]
        elif "vllm_standby" in pinned:
            standby = [amb.standby]
        else:
            standby = [False, True]
        return {"gens": gens, "lengths": lengths, "lora_rank": ranks, "load_in_4bit": four_bit,
                "gradient_checkpointing": checkpointing, "vllm_standby": standby}

    def batches(self, base, amb: Ambition, completions: int) -> list[int]:
        """Per-device batches that divide the effective batch, most first, none above the ambition's."""
        if "per_device_train_batch_size" in amb.pinned:
            return [base.per_device_train_batch_size] if completions % base.per_device_train_batch_size == 0 else []
        if "gradient_accumulation_steps" in amb.pinned:
            steps = base.gradient_accumulation_steps
            return [completions // steps] if completions % steps == 0 else []
        return [b for b in range(min(amb.batch, completions), 0, -1) if completions % b == 0]

    def shaped(self, base, amb: Ambition, gens: int, length: int, levers: dict, batch: int):
        completions = amb.prompts_per_step * gens
        rank = levers["lora_rank"]
        update = {"num_generations": gens, "max_completion_length": length, "max_prompt_length": amb.prompt,
                  "max_seq_length": amb.prompt + length, "per_device_train_batch_size": batch,
                  "gradient_accumulation_steps": completions // batch, **levers}
        if rank and base.lora_rank:
            update["lora_alpha"] = max(1, round(base.lora_alpha * rank / base.lora_rank))
        return base.model_copy(update=update)

    def feasible(self, base, amb, gens, length, levers, fixed: set, batch: int, standby_options) -> bool:
        for standby in (standby_options if "vllm_standby" not in fixed else [levers["vllm_standby"]]):
            p = self.shaped(base, amb, gens, length, {**levers, "vllm_standby": standby}, batch)
            p = self.with_share(p, amb.pinned, "floor")
            if p is not None and self.fits(p):
                return True
        return False

    def solve(self, base, amb: Ambition):
        """The most ambitious profile (unvalidated copy of `base`) that fits, or None. Generating with
        transformers instead of vLLM is the last resort: no cost in quality, but several times slower."""
        if self.vllm_refused and base.uses_vllm_server:
            return None  # the server cannot start here, and it is nothing but vLLM
        if self.vllm_refused and base.fast_inference:
            base = base.model_copy(update={"fast_inference": False, "vllm_standby": False})
        found = self._search(base, amb)
        if found is None and base.fast_inference and not base.uses_vllm_server and "fast_inference" not in amb.pinned:
            found = self._search(base.model_copy(update={"fast_inference": False, "vllm_standby": False}), amb)
        return found

    def _search(self, base, amb: Ambition):
        opts = self.options(base, amb)
        if not all(opts.values()):
            return None  # a pinned key the configuration cannot take (e.g. offloaded checkpoints on accelerate)
        pairs = sorted(((g, n) for g in opts["gens"] for n in opts["lengths"]),
                       key=lambda gn: (-gn[0] * gn[1], -gn[0]))
        order = ("lora_rank", "load_in_4bit", "gradient_checkpointing", "vllm_standby")
        for gens, length in pairs:
            batches = self.batches(base, amb, amb.prompts_per_step * gens)
            if not batches:
                continue
            levers = {key: opts[key][-1] for key in order}
            if not self.feasible(base, amb, gens, length, levers, set(), batches[-1], opts["vllm_standby"]):
                continue
            fixed: set = set()
            for key in order:
                for value in opts[key]:
                    trial = {**levers, key: value}
                    if self.feasible(base, amb, gens, length, trial, fixed | {key}, batches[-1],
                                     opts["vllm_standby"]):
                        levers = trial
                        break
                fixed.add(key)
            batch = next(b for b in batches if self.feasible(base, amb, gens, length, levers, fixed, b, ()))
            return self.with_share(self.shaped(base, amb, gens, length, levers, batch), amb.pinned, "best")
        return None

    # --- the ambition and what was given up ---------------------------------------------------------
    def ambitious(self, base, amb: Ambition):
        """The ambition as a profile: every lever where the ambition has it, vLLM holding the whole batch."""
        if self.vllm_refused and base.fast_inference:
            base = base.model_copy(update={"fast_inference": False, "vllm_standby": False})
        checkpointing = "true" if base.distributed and amb.checkpointing == "unsloth" else amb.checkpointing
        levers = {"lora_rank": amb.rank, "load_in_4bit": not amb.sixteen_bit,
                  "gradient_checkpointing": checkpointing,
                  "vllm_standby": amb.standby and base.fast_inference}
        completions = amb.prompts_per_step * amb.generations
        batch = max([b for b in range(1, min(amb.batch, completions) + 1) if completions % b == 0])
        p = self.shaped(base, amb, amb.generations, amb.completion, levers, batch)
        return self.full_share(p, amb.pinned)

    def full_share(self, p, pinned):
        if not p.fast_inference or p.vllm_standby or p.uses_vllm_server or "gpu_memory_utilization" in pinned:
            return p
        # in hundredths, uncapped: what the whole generation batch would take, even above what a card can give
        share = self._share_bytes(p, p.effective_batch) / (self.gpu.total_gib * GIB)
        return p.model_copy(update={"gpu_memory_utilization": math.ceil(share * 100 - 1e-9) / 100})

    def given_up(self, ambition_profile, chosen) -> list[GivenUp]:
        """Each lever's change from the ambition to the choice, with the GiB it saved, taken from the last given
        up (the experiment) to the first, so each saving is counted on the configuration it was taken from."""
        steps = (("generator", ("fast_inference",)), ("generations", ("num_generations",)),
                 ("completion_length", ("max_completion_length", "max_seq_length")),
                 ("lora_rank", ("lora_rank", "lora_alpha")), ("4-bit", ("load_in_4bit",)),
                 ("standby", ("vllm_standby",)), ("checkpointing", ("gradient_checkpointing",)),
                 ("batch", ("per_device_train_batch_size", "gradient_accumulation_steps")),
                 ("vllm_share", ("gpu_memory_utilization",)))
        current = ambition_profile
        before = estimate(current, self.arch, self.gpu).total_gib
        out: list[GivenUp] = []
        for lever, keys in steps:
            if all(getattr(current, k) == getattr(chosen, k) for k in keys):
                continue
            if lever == "vllm_share" and not chosen.fast_inference:
                continue
            if lever == "vllm_share" and chosen.gpu_memory_utilization >= current.gpu_memory_utilization:
                continue  # the share was not cut: it holds the whole generation batch
            update = {k: getattr(chosen, k) for k in keys}
            if lever in ("generations", "batch"):  # the effective batch follows the generations
                update.update({k: getattr(chosen, k) for k in ("per_device_train_batch_size",
                                                                 "gradient_accumulation_steps")})
                if lever == "generations":
                    update["per_device_train_batch_size"] = min(current.per_device_train_batch_size,
                                                                chosen.effective_batch)
                    update["gradient_accumulation_steps"] = max(
                        1, chosen.effective_batch // update["per_device_train_batch_size"])
            if lever == "generator":
                update["vllm_standby"] = False
            nxt = current.model_copy(update=update)
            if lever != "vllm_share":
                nxt = self.full_share(nxt, frozenset())
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
    if lever == "standby":
        return "on" if p.vllm_standby else "off"
    if lever == "checkpointing":
        return p.gradient_checkpointing
    if lever == "batch":
        return f"{p.per_device_train_batch_size} x {p.gradient_accumulation_steps}"
    return f"{p.gpu_memory_utilization:.2f}"


# ---------------------------------------------------------------------------------------------------
# Entry points

SINGLE_GPU = {"num_gpus": 1, "vllm_mode": "colocate", "vllm_server_gpus": 1, "vllm_tensor_parallel": 1}


def fit(base, gpu: GpuInfo, *, arch: Architecture | None = None, ambition: Ambition | None = None, pinned=(),
        machine=None, measurements=None, budget_gib: float | None = None, name: str | None = None,
        topology: dict | None = None) -> Fit:
    """The most ambitious configuration of `base`'s model that fits `gpu` (free memory less the margin, or
    `budget_gib`), starting from `ambition` (default: `base`'s own intent), on one GPU or the `topology` given
    (num_gpus, vllm_mode, vllm_server_gpus, vllm_tensor_parallel; `gpu` is then each GPU's card)."""
    arch = arch or resolve(base.model)
    amb = ambition or ambition_of(base, pinned)
    usable = usable_of(gpu) if budget_gib is None else budget_gib
    solver = Solver(arch, gpu, usable, machine, measurements)
    base = base.model_copy(update={"device": "cuda", "zero_stage": 0, **(topology or SINGLE_GPU)})
    if base.distributed:
        base = base.model_copy(update={"vllm_standby": False, "fast_inference": True if base.uses_vllm_server
                                       else base.fast_inference})
    top = solver.ambitious(base, amb)
    top_need = estimate(top, arch, gpu).total_gib
    found = solver.solve(base, amb)
    if found is None:
        return Fit(amb, None, None, None, usable, _nothing_fits(solver, base, amb, usable), top_need,
                   card_for(top_need))
    given_up = solver.given_up(top, found)
    need, est, measured = solver.need(found)
    updates = {k: getattr(found, k) for k in LEVER_KEYS}
    derived = base.replace(**updates, name=name or derived_name(arch, found),
                           description=f"derived by the fit solver for {arch.name} on a {gpu.total_gib:g} GiB "
                                       f"card from the intent of {amb.source}")
    source = f" ({measured.text()}; est. {est.total_gib:.2f})" if measured is not None else ""
    return Fit(amb, derived, est, need, usable, f"fits: {need:.2f} of {usable:.2f} GiB usable{source}", top_need,
               card_for(top_need), given_up, measured)


def _nothing_fits(solver: Solver, base, amb: Ambition, usable: float) -> str:
    """Why not even the least configuration fits: what it needs, its largest parts."""
    least = replace(amb, generations=min(amb.generations, MIN_GENERATIONS) if "num_generations" not in amb.pinned
                    else amb.generations, completion=min(amb.completion, MIN_COMPLETION_LENGTH)
                    if "max_completion_length" not in amb.pinned else amb.completion)
    opts = solver.options(base, amb)
    if solver.vllm_refused and base.fast_inference:
        base = base.model_copy(update={"fast_inference": False, "vllm_standby": False})
    levers = {"lora_rank": opts["lora_rank"][-1], "load_in_4bit": opts["load_in_4bit"][-1],
              "gradient_checkpointing": opts["gradient_checkpointing"][-1], "vllm_standby": False}
    p = solver.shaped(base, least, least.generations, least.completion, levers, 1)
    p = solver.with_share(p, amb.pinned, "floor") or p
    est = estimate(p, solver.arch, solver.gpu)
    if p.fast_inference and "fast_inference" not in amb.pinned:  # the last resort, transformers generating
        hf = p.model_copy(update={"fast_inference": False})
        hf_est = estimate(hf, solver.arch, solver.gpu)
        if est.vllm_problem or hf_est.total_gib < est.total_gib:
            p, est = hf, hf_est
    parts = sorted(((v, k) for k, v in est.components.items() if v > 0), reverse=True)[:3]
    what = (f"{least.generations} generations of {least.completion} tokens, LoRA {levers['lora_rank']}, "
            f"{'4-bit' if levers['load_in_4bit'] else '16-bit'}, batch 1, "
            + ("vLLM at one group" if p.fast_inference else "transformers generating"))
    if est.vllm_problem:
        return f"nothing fits: even {what}: {est.vllm_problem}"
    return (f"nothing fits: even {what} needs {est.total_gib:.2f} GiB, {usable:.2f} usable (largest: "
            + ", ".join(f"{k} {v:.2f}" for v, k in parts) + f"); a card of {card_for(est.total_gib):.1f} GiB "
            "would hold it")


def derived_name(arch: Architecture, p) -> str:
    """fit-MODEL-GxL-rR-4bit: what the configuration is, readable in a table and safe as a folder name."""
    model = safe_name(catalogue_key(arch.name), 24)  # a folder called modèle-été is fit-modele-ete-...
    weights = "4bit" if p.load_in_4bit else "16bit"
    prompts = p.effective_batch // p.num_generations
    generator = "" if p.fast_inference else "-hf"
    if p.distributed:
        generator += f"-{p.num_gpus}gpu" + (f"-server{p.vllm_server_gpus}" if p.uses_vllm_server else "")
    return (f"fit-{model}-{p.num_generations}x{prompts}x{p.max_completion_length}-r{p.lora_rank}-{weights}"
            f"{generator}")
