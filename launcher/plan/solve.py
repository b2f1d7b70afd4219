"""WHICH configuration of a model a card should run: the fit solver.

The objective is learning per hour (launcher.plan.value): optimizer updates per hour, each worth P / (P + B)
for P prompts (GRPO groups) per update and B the critical batch; the step-time model (launcher.plan.speed)
predicts how long a step takes. The levers, in order of value (decided first, given up last):

  learning    1. the completion cap the task needs (launcher.plan.completion_lengths): a cap above it buys nothing, one
                 below it truncates answers
              2. generations per group: ambition 8, floor 4 (16 where the card has room for them at little cost
                 in learning per hour: LARGE_GROUP_COST)
              3. LoRA rank: the rung's, down to 8
              4. 16-bit weights: 4-bit when 16-bit does not fit, or when 4-bit learns more per hour (its memory
                 buys prompts per step and vLLM sequences; bitsandbytes' dequantisation slows every forward)
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

Here: `fit`, the entry point, and why nothing fits (a Shortfall, as data). The levers and the objective are in
launcher.plan.levers, the ambition in launcher.plan.ambition, the judging and the vLLM share in
launcher.plan.judge, the search in launcher.plan.search, the answer's records in launcher.plan.outcome and its
sentences in launcher.plan.wording.
"""

from __future__ import annotations

from dataclasses import replace

from launcher.card.detect import GpuInfo
from launcher.memory.estimate import estimate
from launcher.plan.ambition import Ambition, ambition_of
from launcher.plan.completion_lengths import completion_plan
from launcher.plan.judge import NO_LEDGER, Ledger, profile_key, usable_of
from launcher.plan.levers import (
    GENERATIONS_AMBITION,
    MIN_COMPLETION_LENGTH,
    MIN_GENERATIONS,
    PROMPTS_PIN,
    quality_key,
)
from launcher.plan.margins import card_for
from launcher.plan.outcome import BATCH, MEMORY, REFUSED, VLLM, Fit, Shortfall
from launcher.plan.search import Solver, learned_levers
from launcher.plan.wording import pinned_vllm_refused
from profiles.catalog import Architecture, catalogue_key, resolve
from profiles.keys import safe_name
from profiles.schema import LEVER_KEYS

# ---------------------------------------------------------------------------------------------------
# Entry points

SINGLE_GPU = {"num_gpus": 1, "vllm_mode": "colocate", "vllm_server_gpus": 1, "vllm_tensor_parallel": 1}


def fit(
    base,
    gpu: GpuInfo,
    *,
    arch: Architecture | None = None,
    ambition: Ambition | None = None,
    ledger: Ledger = NO_LEDGER,
    topology: dict | None = None,
) -> Fit:
    """The configuration of `base`'s model with the most prompts per hour that fits `gpu` (free memory less the
    margin), from `ambition` (default: `base`'s own intent), judged by this machine's `ledger` where it has
    measured a shape, on one GPU or the `topology` given (num_gpus, vllm_mode, vllm_server_gpus,
    vllm_tensor_parallel; `gpu` is then each GPU's card). The derived profile is named for what it is
    (derived_name); with a smaller fallback of the same intent where the search found one."""
    arch = arch or resolve(base.model)
    measurements = ledger.measurements
    lengths = completion_plan(base, arch, ambition.pinned if ambition is not None else frozenset(), measurements)
    amb = ambition or ambition_of(base, arch=arch, lengths=lengths)
    usable = usable_of(gpu)
    solver = Solver(arch, gpu, usable, ledger, lengths=lengths)
    base = base.model_copy(update={"device": "cuda", "zero_stage": 0, **(topology or SINGLE_GPU)})
    if solver.vllm_refused and base.fast_inference and "fast_inference" in amb.pinned:
        raise pinned_vllm_refused(solver.vllm_refused)
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
        return Fit(amb, None, None, None, usable, top_need, card_for(top_need), shortfall=shortfall(solver, base, amb))
    chosen = found.profile
    given_up = solver.given_up(top, solver.least_share(chosen, amb.pinned), found.four_bit_gain)
    need, est, measured = solver.need(chosen)
    updates = {k: getattr(chosen, k) for k in LEVER_KEYS}
    derived = base.replace(
        **updates,
        name=derived_name(arch, chosen),
        description=f"derived by the fit solver for {arch.name} on a {gpu.total_gib:g} GiB "
        f"card from the intent of {amb.source}",
    )
    fallbacks = []
    if found.smaller is not None and profile_key(found.smaller.profile) != profile_key(chosen):
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
        top_need,
        card_for(top_need),
        given_up,
        measured,
        found.speed,
        found.limited_by,
        fallbacks=fallbacks,
    )


def shortfall(solver: Solver, base, amb: Ambition) -> Shortfall:
    """Why not even the least configuration of `amb` fits: what it is, what it needs and its largest parts;
    and, when the pins are the cause (the least configuration without them fits), those pins."""
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
        **learned_levers(
            (
                least.completion,
                least.generations,
                (opts["lora_rank"] or [least.rank])[-1],
                (opts["load_in_4bit"] or [True])[-1],
            )
        ),
        "gradient_checkpointing": (opts["gradient_checkpointing"] or ["true"])[-1],
        "vllm_standby": False,
    }
    prompts = solver.least_prompts(base, least, opts, least.generations) or (opts["prompts"] or [1])[0]
    batches = solver.batches(base, least, prompts * least.generations)
    if not batches:
        return Shortfall(BATCH, least.generations, least.completion, prompts)
    p = solver.least_share(solver.shaped(base, least, levers, prompts, batches[-1]), amb.pinned)
    est = estimate(p, solver.arch, solver.gpu)
    if p.fast_inference and "fast_inference" not in amb.pinned:  # the last resort, transformers generating
        hf = p.model_copy(update={"fast_inference": False, "vllm_standby": False, "vllm_max_num_seqs": 0})
        hf_est = estimate(hf, solver.arch, solver.gpu)
        if est.vllm_problem or hf_est.total_gib < est.total_gib:
            p, est = hf, hf_est
    parts = sorted(((v, k) for k, v in est.components.items() if v > 0), reverse=True)[:3]
    if est.vllm_problem:
        kind = VLLM
    elif est.total_gib <= solver.limit:  # the least fits by itself: a pinned lever or the ledger refused the rest
        kind = REFUSED
    else:
        kind = MEMORY
    found = Shortfall(
        kind,
        least.generations,
        least.completion,
        prompts,
        rank=levers["lora_rank"],
        four_bit=levers["load_in_4bit"],
        batch=batches[-1],
        vllm=p.fast_inference,
        need_gib=est.total_gib,
        limit_gib=solver.limit,
        usable_gib=solver.budget,
        largest=tuple((k, v) for v, k in parts),
        card_gib=card_for(est.total_gib / 0.92),
        vllm_problem=est.vllm_problem or "",
    )
    pins = sorted(amb.pinned - {PROMPTS_PIN, "model"})
    if not pins:
        return found
    free_amb = replace(amb, pinned=frozenset(), generations=GENERATIONS_AMBITION)
    free = Solver(solver.arch, solver.gpu, solver.budget, lengths=solver.lengths)
    if free.search(base, free_amb) is None:
        return found
    return replace(found, pins=tuple(pins))


def derived_name(arch: Architecture, p) -> str:
    """fit-MODEL-GxPxL-rR-4bit: what the configuration is, readable in a table and safe as a folder name."""
    model = safe_name(catalogue_key(arch.name), 24)  # a folder called modèle-été is fit-modele-ete-...
    weights = "4bit" if p.load_in_4bit else "16bit"
    prompts = p.effective_batch // p.num_generations
    generator = "" if p.fast_inference else "-hf"
    if p.distributed:
        generator += f"-{p.num_gpus}gpu" + (f"-server{p.vllm_server_gpus}" if p.uses_vllm_server else "")
    return f"fit-{model}-{p.num_generations}x{prompts}x{p.max_completion_length}-r{p.lora_rank}-{weights}{generator}"
