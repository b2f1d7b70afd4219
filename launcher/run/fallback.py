"""WHAT to run after an attempt fails: shrink what its OOM names (keeping the effective batch), or fall back
to the next profile of the ladder. Pure policy: no processes, no files; tested on its own."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from contract import oom as oomlib
from contract import oom_site as oom_site
from contract.attempt import OOM, UNSUPPORTED
from contract.errors import UsageError
from launcher.memory.estimate import estimate
from launcher.plan.ambition import Ambition
from launcher.plan.judge import live_gib
from launcher.plan.levers import PROMPTS_PIN, SHARE_CAP
from launcher.plan.margins import OOM_HEADROOM_GIB, VLLM_HEADROOM_GIB
from launcher.plan.search import Solver
from profiles.catalog import resolve
from profiles.schema import LEVER_KEYS, Profile


def estimate_of(candidate) -> float | None:
    """A plan candidate's estimated total (GiB), or None when it has none."""
    est = getattr(candidate, "estimate", None)
    value = getattr(est, "total_gib", None)
    return float(value) if value is not None else None


def estimate_profile(profile: Profile, machine) -> Any:
    """The estimator's Estimate for a (changed) profile on this machine, or None when it cannot tell."""
    try:
        from launcher.memory.estimate import estimate

        gpu = machine.primary if machine is not None and profile.device == "cuda" else None
        return estimate(profile, gpu=gpu)
    except Exception:  # an estimate guides the fallback; it never stops it
        return None


@dataclass
class Decision:
    action: str  # "shrink", "next", "stop"
    text: str  # what is done and why, in plain words
    profile: Profile | None = None
    changes: dict = field(default_factory=dict)  # key -> [old, new] for a shrink
    skipped: list[str] = field(default_factory=list)


def _smallest_factor(n: int) -> int:
    for f in range(2, int(math.isqrt(n)) + 1):
        if n % f == 0:
            return f
    return n


def shrink_batch(profile: Profile) -> tuple[Profile | None, dict, str]:
    """Fewer completions per forward/backward, more accumulation: the effective batch and the group rule
    (per-device x accumulation divisible by num_generations) stay as they were."""
    b, ga = profile.per_device_train_batch_size, profile.gradient_accumulation_steps
    if b == 1:
        return None, {}, "per_device_train_batch_size is already 1: nothing to halve"
    factor = _smallest_factor(b)
    new_b, new_ga = b // factor, ga * factor
    verb = "halving" if factor == 2 else f"dividing by {factor}"
    shrunk = profile.replace(per_device_train_batch_size=new_b, gradient_accumulation_steps=new_ga)
    changes = {"per_device_train_batch_size": [b, new_b], "gradient_accumulation_steps": [ga, new_ga]}
    return (
        shrunk,
        changes,
        (
            f"{verb} per_device_train_batch_size {b} -> {new_b}, gradient_accumulation_steps "
            f"{ga} -> {new_ga}, effective batch kept at {shrunk.effective_batch}"
        ),
    )


def adjust_vllm_share(profile: Profile, report: oomlib.OomReport, machine) -> tuple[Profile | None, dict, str]:
    """Move vLLM's share the way its refusal asks (lower when it asked more than was free, higher when its
    share left too little KV cache), when the estimate says the result can start and fit."""
    if not profile.fast_inference:
        return None, {}, "the profile does not use vLLM"
    if profile.vllm_standby:
        # unsloth_zoo's load_vllm replaces gpu_memory_utilization with its own standby step, either way
        return (
            None,
            {},
            (
                "under vLLM standby Unsloth sets vLLM's share itself: another gpu_memory_utilization "
                "would start the same engine"
            ),
        )
    gpu = machine.primary if machine is not None else None
    total = report.total_gib or (gpu.total_gib if gpu is not None else None)
    if not total:
        return None, {}, "the card's total memory is unknown"
    old = profile.gpu_memory_utilization
    if report.vllm_problem == oomlib.VLLM_SHARE_TOO_LARGE:
        if report.free_gib is None:
            return None, {}, "the message does not say how much memory was free"
        new = math.floor(round((report.free_gib - VLLM_HEADROOM_GIB) / total * 100, 6)) / 100
        if new <= 0 or new >= old:
            return None, {}, f"only {oomlib.fmt_gib(report.free_gib)} was free: no smaller share helps"
    elif report.vllm_problem == oomlib.VLLM_SHARE_TOO_SMALL:
        short = report.shortfall_gib
        extra = (short + 0.25) if short else 0.1 * total
        new = math.ceil(round((old * total + extra) / total * 100, 6)) / 100
        if new >= 0.95:
            return None, {}, f"vLLM would need gpu_memory_utilization {new:.2f}: more than the card can give"
    else:
        return None, {}, "the message does not say which way vLLM's share is wrong"
    try:
        shrunk = profile.replace(gpu_memory_utilization=new)
    except UsageError as exc:
        return None, {}, str(exc)
    est = estimate_profile(shrunk, machine)
    if est is not None:
        if getattr(est, "vllm_problem", None):
            return None, {}, f"at {new:.2f} the estimate says vLLM cannot start ({est.vllm_problem})"
        free = gpu.free_gib if gpu is not None else None
        if new > old and free is not None and est.total_gib > free:
            return None, {}, (f"at {new:.2f} the estimate ({est.total_gib:.2f} GiB) exceeds the free {free:.2f} GiB")
    verb = "lowering" if new < old else "raising"
    return shrunk, {"gpu_memory_utilization": [old, new]}, f"{verb} gpu_memory_utilization {old:g} -> {new:g}"


def shrink_optimizer(profile: Profile) -> tuple[Profile | None, dict, str]:
    if "8bit" in profile.optim or profile.optim in ("sgd", "adafactor"):
        return None, {}, f"the optimizer ({profile.optim}) is already small"
    if profile.device != "cuda":
        return None, {}, "8-bit optimizers need a GPU"
    shrunk = profile.replace(optim="adamw_8bit")
    return (
        shrunk,
        {"optim": [profile.optim, "adamw_8bit"]},
        f"switching optim {profile.optim} -> adamw_8bit (optimizer state ~4x smaller)",
    )


def shrink_for(profile: Profile, report: oomlib.OomReport, machine) -> tuple[Profile | None, dict, str]:
    """The one shrink the OOM's site calls for: (new profile, changes, text) or (None, {}, why not)."""
    site = report.site
    if report.kind == oomlib.KIND_HOST:
        return None, {}, "host RAM ran out: a smaller GPU batch does not fix that"
    if report.kind == oomlib.KIND_VLLM or site == oom_site.SITE_VLLM_START:
        return adjust_vllm_share(profile, report, machine)
    if site == oom_site.SITE_MODEL_LOAD:
        return None, {}, "the weights alone do not fit"
    if site == oom_site.SITE_GENERATION:
        if (
            profile.device == "cuda"
            and not profile.fast_inference
            and not profile.distributed
            and report.shortfall_gib is not None
        ):
            # transformers' generate holds the KV cache of the whole generation batch: shorter completions help
            return shrink_after_oom(profile, report, machine)
        return (
            None,
            {},
            ("generation runs the whole generation batch at once: halving the per-device batch would not change it"),
        )
    if site == oom_site.SITE_OPTIMIZER:
        return shrink_optimizer(profile)
    # logits/log-probs, activations, backward, or a site the text does not name (GRPO's usual suspects): on a
    # GPU the solver shrinks by what the OOM says was missing; without its figures (or on the CPU) the batch halves
    if profile.device == "cuda" and not profile.distributed and report.shortfall_gib is not None:
        return shrink_after_oom(profile, report, machine)
    return shrink_batch(profile)


def next_profile(plan, current: str, tried: set[str], ceiling: tuple[float, str] | None) -> Decision:
    """The next profile down the ladder that the estimate says fits, estimated below the failed ones."""
    names = [c.profile.name for c in plan.candidates]
    start = names.index(current) + 1 if current in names else 0
    skipped = []
    for cand in plan.candidates[start:]:
        name = cand.profile.name
        est = estimate_of(cand)
        if name in tried:
            continue
        if not cand.fits:
            skipped.append(f"skipping {name}: {cand.reason or 'the estimate says it does not fit'}")
            continue
        if ceiling is not None and est is not None and est >= ceiling[0]:
            skipped.append(
                f"skipping {name}: estimated {est:.2f} GiB, not below the {ceiling[0]:.2f} GiB of "
                f"{ceiling[1]}, which ran out of memory"
            )
            continue
        return Decision(
            "next",
            f"falling back to {name}" + (f" (estimated {est:.2f} GiB)" if est else ""),
            profile=cand.profile,
            skipped=skipped,
        )
    return Decision("stop", "no profile left on the ladder", skipped=skipped)


def decide(
    plan,
    profile: Profile,
    status: str,
    report: oomlib.OomReport | None,
    shrunk: set[str],
    tried: set[str],
    ceiling: tuple[float, str] | None,
) -> Decision:
    """What to do after a failed attempt of `profile` (status oom or unsupported)."""
    prefix = ""
    if status == OOM and report is not None:
        if profile.name not in shrunk:
            new, changes, text = shrink_for(profile, report, plan.machine)
            if new is not None:
                return Decision("shrink", text, profile=new, changes=changes)
            prefix = f"no shrink ({text}); "
        else:
            prefix = f"{profile.name} was already shrunk once; "
    elif status == UNSUPPORTED:
        prefix = "the architecture cannot be loaded; "
    nxt = next_profile(plan, profile.name, tried, ceiling)
    nxt.text = prefix + nxt.text
    return nxt


# ---------------------------------------------------------------------------------------------------
# The solver's shrink after an out-of-memory failure

# While transformers generates, the training pass holds nothing yet: its parts do not count against that OOM.
TRAINING_PASS_PARTS = ("activations", "activation_checkpoints", "logits", "standby_reuse")


def shrink_after_oom(profile: Profile, report: oomlib.OomReport, machine) -> tuple[Profile | None, dict, str]:
    """The fallback's shrink through the solver: the configuration closest to `profile` (the same generations
    and effective batch) whose estimate is lower by at least the OOM's shortfall (asked - free) plus a headroom,
    levers given up in the solver's order. (new profile, {key: [old, new]}, text), or (None, {}, why not)."""
    gpu = machine.primary if machine is not None else None
    short = report.shortfall_gib
    if gpu is None or profile.device != "cuda" or profile.distributed:
        return None, {}, "the solver shrinks single-GPU profiles"
    if short is None:
        return None, {}, "the message does not say how much was missing"
    arch = resolve(profile.model)
    not_live = TRAINING_PASS_PARTS if report.site == "generation" else ()
    current = live_gib(estimate(profile, arch, gpu), not_live)
    saving = short + OOM_HEADROOM_GIB
    budget = current - saving
    amb = Ambition(
        generations=profile.num_generations,
        prompts_per_step=max(1, profile.effective_batch // profile.num_generations),
        completion=profile.max_completion_length,
        prompt=profile.max_prompt_length,
        rank=profile.lora_rank,
        sixteen_bit=not profile.load_in_4bit,
        checkpointing=profile.gradient_checkpointing,
        batch=profile.per_device_train_batch_size,
        standby=profile.vllm_standby,
        source=profile.name,
        pinned=frozenset(
            {"num_generations", PROMPTS_PIN, "max_prompt_length"}
            | ({"load_in_4bit"} if profile.load_in_4bit else set())
            | ({"fast_inference"} if not profile.fast_inference else set())
        ),
        expected=profile.expected_completion_length,
    )
    # the budget already keeps the shortfall's headroom: no second one for the estimate's error
    solver = Solver(arch, gpu, budget, shrink=not_live)
    solver.share_cap = min(SHARE_CAP, profile.gpu_memory_utilization)  # never a larger share than the one that ran
    found = solver.solve(profile, amb)
    if found is None:
        return (
            None,
            {},
            (
                f"no configuration of {profile.num_generations} generations x effective batch "
                f"{profile.effective_batch} is estimated {saving:.2f} GiB below this one's {current:.2f} "
                f"(the shortfall {short:.2f} + {OOM_HEADROOM_GIB} headroom)"
            ),
        )
    changes = {
        k: [getattr(profile, k), getattr(found, k)] for k in LEVER_KEYS if getattr(profile, k) != getattr(found, k)
    }
    shrunk = profile.replace(**{k: new for k, (_, new) in changes.items()})
    after = live_gib(estimate(shrunk, arch, gpu), not_live)
    moved = ", ".join(f"{k} {old} -> {new}" for k, (old, new) in changes.items())
    moment = " while generating" if not_live else ""
    return (
        shrunk,
        changes,
        (
            f"solver: {moved} (estimate{moment} {current:.2f} -> {after:.2f} GiB, at least the "
            f"shortfall {short:.2f} + {OOM_HEADROOM_GIB} GiB lower), effective batch kept at "
            f"{shrunk.effective_batch}"
        ),
    )


# ---------------------------------------------------------------------------------------------------
# After the length probe: the answers need a larger cap


def _verdict_here(profile: Profile, plan) -> tuple[bool, str]:
    """(fits, why) of a changed profile on the plan's machine, judged as the plan judges a candidate."""
    from launcher.plan.choose import make_plan
    from launcher.plan.request import PlanRequest

    judged = make_plan(PlanRequest([profile], plan.machine, margin_gib=plan.margin_gib, derive=False)).candidates[0]
    return judged.fits, judged.reason


def replan_lengths(
    plan, profile: Profile, lengths: dict | None, pinned, tried: set[str], ceiling: tuple[float, str] | None
) -> Decision:
    """What runs after an attempt whose answers were cut at the cap (status replanned): the profile with the cap
    and expected length the measurement calls for (contract.length_rule.lengths_after) and max_seq_length to hold
    them, when it fits this machine as the plan judges; else, on one GPU, the solver's configuration that keeps
    the new cap (other levers given up in its order); else the next profile of the ladder that fits. A key the
    user pinned (--set, or written in the --profile file) is not moved."""
    from contract.length_rule import MeasuredLengths, lengths_after

    measured = MeasuredLengths.from_json(lengths)
    if measured is None:
        nxt = next_profile(plan, profile.name, tried, ceiling)
        nxt.text = "the attempt's measured lengths cannot be read; " + nxt.text
        return nxt
    old_cap, old_expected = profile.max_completion_length, profile.expected_completion_length
    cap, expected = lengths_after(measured, old_cap, (lengths or {}).get("planned_expected"))
    if "max_completion_length" in pinned:
        cap = old_cap
    elif "max_seq_length" in pinned:  # the cap grows only as far as the pinned sequence holds it
        cap = max(old_cap, min(cap, profile.max_seq_length - profile.max_prompt_length))
    if "expected_completion_length" in pinned:
        expected = old_expected
    expected = min(expected, cap)
    wanted = {
        "max_completion_length": cap,
        "expected_completion_length": expected,
        "max_seq_length": max(profile.max_seq_length, profile.max_prompt_length + cap),
    }
    changes = {k: [getattr(profile, k), v] for k, v in wanted.items() if getattr(profile, k) != v}
    measured_text = (
        f"{measured.samples} answers: {measured.p95} tokens at the 95th percentile, {measured.cut_share:.0%} cut "
        f"at {old_cap}"
    )
    try:
        candidate = profile.replace(**{k: new for k, (_, new) in changes.items()})
    except UsageError as exc:
        nxt = next_profile(plan, profile.name, tried, ceiling)
        nxt.text = f"the re-planned lengths are refused ({exc}); " + nxt.text
        return nxt
    moved = ", ".join(f"{k} {old} -> {new}" for k, (old, new) in changes.items()) or "nothing to change"
    fits, why = _verdict_here(candidate, plan)
    if fits:
        return Decision(
            "replan", f"re-planned from the measured answers ({measured_text}): {moved}; {why}", candidate, changes
        )
    gpu = plan.machine.primary if plan.machine is not None else None
    if profile.device == "cuda" and not profile.distributed and gpu is not None:
        from launcher.plan.ambition import ambition_of
        from launcher.plan.judge import Ledger
        from launcher.plan.solve import fit

        arch = resolve(candidate.model)
        kept = frozenset({"max_completion_length", "expected_completion_length"}) | frozenset(pinned)
        found = fit(
            candidate, gpu, arch=arch, ambition=ambition_of(candidate, kept, arch=arch), ledger=Ledger(plan.machine)
        )
        if found.profile is not None:
            solved = found.profile.replace(name=profile.name)
            refit = {k: [getattr(profile, k), getattr(solved, k)] for k in (*LEVER_KEYS, "max_seq_length")}
            refit = {k: v for k, v in refit.items() if v[0] != v[1]}
            return Decision(
                "replan",
                f"re-planned from the measured answers ({measured_text}): at the cap of {cap} this configuration "
                f"does not fit ({why}); the solver's: "
                + ", ".join(f"{k} {old} -> {new}" for k, (old, new) in refit.items()),
                solved,
                refit,
            )
    nxt = next_profile(plan, profile.name, tried | {profile.name}, ceiling)
    nxt.text = f"the answers need a cap of {cap} ({measured_text}), which does not fit ({why}); " + nxt.text
    return nxt
