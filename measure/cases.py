"""WHAT the kit probes on a card, in which order, and what the models predict for each probe.

On a GPU, by default, the shipped rungs' own architectures at their shipped precision, the spread of sizes first
(0.5B, 8B in 4-bit, 14B in 16-bit, then the 3B): all through Unsloth's path (every shipped rung runs it), then
all again through plain TRL + PEFT, as far as the time goes. `--models` picks architectures instead, each in 16-bit and 4-bit. On the CPU: the tiny
architecture in float32 on both paths (the rehearsal that keeps the kit working).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from profiles.catalog import Architecture
    from profiles.schema import Profile

REPO = Path(__file__).resolve().parents[1]
PROFILES = REPO / "profiles"
GPU_BASE = PROFILES / "gpu-16gb-gemma3-1b.yaml"
CPU_BASE = PROFILES / "cpu-tiny-8gen.yaml"
UNSLOTH, PLAIN = "unsloth", "trl+peft"
# (architecture, precision): the shipped single-GPU rungs' models at their precision, in the order one call
# reaches them: the smallest, then the largest two (the step-time model's constants need the spread of
# sizes), then the 3B between them.
DEFAULT_GPU_CASES = (
    ("unsloth/Qwen2.5-0.5B-Instruct", "4-bit"),
    ("unsloth/Llama-3.1-8B-Instruct", "4-bit"),
    ("unsloth/Qwen2.5-14B-Instruct", "16-bit"),
    ("unsloth/Llama-3.2-3B-Instruct", "4-bit"),
)
# The probe's shape (memory is read here): GRPO's usual single-GPU settings.
GPU_SHAPE = (
    "max_seq_length=1024",
    "max_prompt_length=256",
    "max_completion_length=512",
    "lora_rank=16",
    "lora_alpha=16",
    "num_generations=4",
    "per_device_train_batch_size=4",
    "gradient_accumulation_steps=1",
    "fast_inference=false",
    "gradient_checkpointing=unsloth",
    "max_steps=1",
    "save_steps=1000",
    "dataset=arithmetic",
    "eval_samples=0",
    "train_samples=200",
)
CPU_SHAPE = (
    "max_completion_length=32",
    "num_generations=4",
    "per_device_train_batch_size=8",
    "gradient_accumulation_steps=1",
    "max_steps=1",
    "save_steps=1000",
    "eval_samples=0",
    "train_samples=200",
)
# Completion lengths every probe times a generation wave and a training step at: two, so that what a wave or
# a step costs whatever its length and what each token adds come apart.
GPU_TIMED_LENGTHS = (64, 320)
CPU_TIMED_LENGTHS = (8, 32)


def short_name(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model.rpartition("/")[2]).lower()


def case_key(row: dict) -> str:
    return f"{row['architecture']}|{row['path']}|{row['precision']}"


def path_requirements(cuda: bool, unsloth: bool, bitsandbytes: bool, precisions=None) -> dict:
    """(path, precision) -> why it cannot run here, or None. Unsloth's GPU load imports bitsandbytes for every
    model (unsloth_zoo patches 4-bit layers by class), so its path needs both; 4-bit needs bitsandbytes."""
    precisions = precisions or (["16-bit", "4-bit"] if cuda else ["float32"])
    needs = {}
    for path in (UNSLOTH, PLAIN):
        for precision in precisions:
            missing = []
            if path == UNSLOTH and not unsloth:
                missing.append("unsloth")
            if cuda and (precision == "4-bit" or path == UNSLOTH) and not bitsandbytes:
                missing.append("bitsandbytes")
            needs[(path, precision)] = f"not run (needs {' and '.join(missing)})" if missing else None
    return needs


def kit_settings(arch_name: str, path: str, precision: str, cuda: bool, bitsandbytes: bool) -> list[str]:
    """The --set overrides of one case over its base profile (kept in the report: the refit rebuilds the
    profile from them)."""
    name = f"check-{short_name(arch_name)}-{path.replace('+', '-')}-{precision.replace('-', '')}"
    settings = [
        f"name={name}",
        f"model={arch_name}",
        f"load_in_4bit={str(precision == '4-bit').lower()}",
        *(GPU_SHAPE if cuda else CPU_SHAPE),
    ]
    if cuda and not bitsandbytes:
        settings.append("optim=adamw_torch")  # the 8-bit optimizers are bitsandbytes'
    return settings


def kit_profile(settings: list[str], cuda: bool) -> Profile:
    from profiles.load import load_profile

    return load_profile(GPU_BASE if cuda else CPU_BASE, list(settings))


def _architectures(cuda: bool, models: list[str] | None) -> list[tuple[Architecture, list[str]]]:
    """[(architecture, precisions)] in the order they run."""
    from profiles.catalog import CATALOGUE, TINY, resolve

    if not cuda:
        return [(TINY, ["float32"])]
    if not models:
        return [(resolve(name, allow_hub=False), [precision]) for name, precision in DEFAULT_GPU_CASES]
    chosen = [a for a in sorted(CATALOGUE, key=lambda a: a.params) if any(m.lower() in a.name.lower() for m in models)]
    return [(arch, ["16-bit", "4-bit"]) for arch in chosen]


def planned_shape(arch_name: str, precision: str, machine) -> dict:
    """The shape the plan decides on for this architecture at this precision on this machine, generated by
    transformers (the kit has no vLLM): the generation batch it generates at once, the micro-batch it trains,
    the prompt tokens it expects, and the longest completion of each as the step-time model charges it (a
    wave runs until its longest answer ends, a micro-batch is padded to its longest). {"why": ...} where no
    rung fits. On the CPU: the CPU ladder's choice."""
    from launcher.plan.choose import make_plan
    from launcher.plan.ladder import ladder_rungs
    from launcher.plan.request import PlanRequest
    from launcher.plan.speed import longest_of
    from launcher.plan.step_shape import shape_of
    from profiles.catalog import resolve
    from profiles.load import load_profiles

    gpu = machine.primary
    left_out: list[str] = []
    if gpu is None:
        request = PlanRequest(ladder_rungs(load_profiles(PROFILES, device="cpu")), machine)
    else:
        written = [f"model={arch_name}", f"load_in_4bit={str(precision == '4-bit').lower()}", "fast_inference=false"]
        rungs = ladder_rungs(load_profiles(PROFILES, written, device="cuda", refused=left_out))
        pinned = {"load_in_4bit", "fast_inference"}
        request = PlanRequest(rungs, machine, model=arch_name, pinned=pinned, left_out=left_out)
    plan = make_plan(request)
    chosen = next((c for c in plan.candidates if c.fits), None)
    if chosen is None:
        return {"why": "no rung of the plan fits this card"}
    profile = chosen.profile
    shape = shape_of(profile, resolve(profile.model, allow_hub=False), gpu)
    sequences = shape.prompts * shape.generations
    return {
        "profile": profile.name,
        "sequences": sequences,
        "generations": shape.generations,
        "micro_batch": shape.micro_batch,
        "prompt_tokens": shape.prompt_tokens,
        "expected_tokens": shape.expected,
        "cap": shape.cap,
        "wave_tokens": max(1, round(longest_of(sequences, shape.expected, shape.cap))),
        "step_tokens": max(1, round(longest_of(shape.micro_batch, shape.expected, shape.cap))),
    }


def plan_cases(machine, unsloth: bool, bitsandbytes: bool, models: list[str] | None) -> list[dict]:
    """Every (architecture, path, precision) in the order they run: Unsloth's path for every architecture
    first (every shipped rung runs it), then plain TRL + PEFT for each again. Each case carries its estimate,
    whether the plan says it fits, and why it cannot run here (a missing library) if so."""
    from launcher.memory.estimate import estimate
    from launcher.plan.choose import make_plan
    from launcher.plan.request import PlanRequest

    gpu = machine.primary
    cuda = gpu is not None
    cases = []
    for wanted_path in (UNSLOTH, PLAIN):
        for arch, precisions in _architectures(cuda, models):
            needs = path_requirements(cuda, unsloth, bitsandbytes, precisions)
            for (path, precision), missing in needs.items():
                if path != wanted_path:
                    continue
                settings = kit_settings(arch.name, path, precision, cuda, bitsandbytes)
                profile = kit_profile(settings, cuda)
                candidate = make_plan(PlanRequest([profile], machine, derive=False)).candidates[0]
                est = estimate(profile, gpu=gpu, backend=("trl" if path == PLAIN else "unsloth") if cuda else None)
                planned = None
                if path == UNSLOTH and not missing:  # the path every single-GPU plan runs
                    try:
                        planned = planned_shape(arch.name, precision, machine)
                    except Exception as exc:  # noqa: BLE001 - the plan's shape is a figure more, never a stop
                        planned = {"why": f"not planned: {type(exc).__name__}: {str(exc)[:200]}"}
                    if planned.get("sequences"):
                        planned["predicted_wave_s"] = predict_timed(
                            profile,
                            gpu,
                            "generation",
                            planned["sequences"],
                            planned["prompt_tokens"],
                            planned["wave_tokens"],
                        )
                        planned["predicted_step_s"] = predict_timed(
                            profile,
                            gpu,
                            "training",
                            planned["micro_batch"],
                            planned["prompt_tokens"],
                            planned["step_tokens"],
                        )
                cases.append(
                    {
                        "name": profile.name,
                        "architecture": arch.name,
                        "params": arch.params,
                        "path": path,
                        "precision": precision,
                        "optim": profile.optim,
                        "settings": settings,
                        "profile": profile,
                        "fits": candidate.fits,
                        "reason": candidate.reason,
                        "estimate": est,
                        "missing": missing,
                        "planned": planned,
                    }
                )
    return cases


# ------------------------------------------------------------------------------------------------ predictions


def timed_shape(profile, arch, gpu, sequences: int, prompt_tokens: int, completion_tokens: int, plain: bool = False):
    """The step-time model's StepShape for exactly what the kit timed: `sequences` completions of exactly
    `completion_tokens` tokens after prompts `prompt_tokens` wide, generated at once by transformers and
    trained as one micro-batch, on Unsloth's path or (`plain`) plain TRL + PEFT's; no reference or old-policy
    forward (the timed step scores neither) and one generation a step."""
    from launcher.plan.step_shape import shape_of

    shape = shape_of(profile, arch, gpu)
    generations = max(1, min(int(profile.num_generations), sequences))
    return dataclasses.replace(
        shape,
        generator="transformers",
        prompts=max(1, sequences // generations),
        generations=generations,
        micro_batch=sequences,
        prompt_tokens=int(prompt_tokens),
        expected=int(completion_tokens),
        cap=int(completion_tokens),
        extra_forwards=0,
        standby=False,
        own_vllm_weights=False,
        world=1,
        num_iterations=1,
        steps_per_generation=1,
        plain=plain,
    )


def card_of(gpu):
    """The card table's facts for `gpu`, or the default's (unknown cards and the CPU)."""
    from launcher.card.facts import DEFAULT, card_facts

    if gpu is None:
        return DEFAULT
    return card_facts(gpu.name, gpu.total_gib) or DEFAULT


def predict_timed(
    profile,
    gpu,
    kind: str,
    sequences: int,
    prompt_tokens: int,
    completion_tokens: int,
    constants=None,
    plain: bool = False,
):
    """Predicted seconds of one timed generation wave (kind "generation") or training step ("training") at
    that shape, on Unsloth's path or (`plain`) plain TRL + PEFT's; `constants` (measure.refit) overrides the
    step-time model's constants. None where the model cannot say."""
    from launcher.plan import speed
    from profiles.catalog import resolve

    try:
        arch = resolve(profile.model, allow_hub=False)
        shape = timed_shape(profile, arch, gpu, sequences, prompt_tokens, completion_tokens, plain)
        with speed.constants_set(constants or {}):
            if kind == "generation":
                return speed.generation_time(shape, card_of(gpu))[0]
            return speed.training_time(shape, card_of(gpu))
    except Exception:  # noqa: BLE001 - a prediction is a comparison, never a reason to stop measuring
        return None
