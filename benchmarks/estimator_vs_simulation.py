#!/usr/bin/env python3
"""The estimator's `trl` path against a simulated training step, component by component.

    python benchmarks/estimator_vs_simulation.py [--section after] [--models NAME ...] [--cache FILE]

For each catalogue model, LoRA (r 16, every linear layer, fp32 adapters) and full fine-tuning, gradient
checkpointing off and on, and two lengths, one plain-TRL GRPO step (bf16, AdamW, per-device batch 2, padded
batch, beta 0) is simulated with fake tensors (benchmarks/step_simulation.py) and set beside
launcher.memory.estimate's figures for the same profile. Writes one section ("before" or "after") of
benchmarks/estimator_vs_simulation.md and keeps the other. Percentages are (estimate - simulation) /
simulation. The total compares the estimator's training components (everything but the CUDA context, vLLM
and generation, which the simulation cannot see) with the simulated peak of live bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from launcher.memory.estimate import GIB, estimate  # noqa: E402
from profiles.catalog import resolve  # noqa: E402
from profiles.load import profile_from_dict  # noqa: E402

MODELS = (
    "Qwen/Qwen2.5-0.5B-Instruct",
    "Qwen/Qwen2.5-1.5B-Instruct",
    "meta-llama/Llama-3.2-1B-Instruct",
    "meta-llama/Llama-3.2-3B-Instruct",
    "google/gemma-3-1b-it",
    "meta-llama/Llama-3.1-8B-Instruct",
)
LENGTHS = ((256, 768), (512, 1536))
BATCH = 2
LORA_RANK = 16
TRAINING = (
    "weights",
    "lora",
    "gradients",
    "optimizer",
    "optimizer_step",
    "activations",
    "activation_checkpoints",
    "logits",
    "peak_overlap",
)
OUTPUT = REPO / "benchmarks" / "estimator_vs_simulation.md"


def profile_for(model: str, lora_rank: int, checkpointing: bool, prompt: int, completion: int):
    return profile_from_dict(
        dict(
            model=model,
            dataset="arithmetic",
            load_in_4bit=False,
            fast_inference=False,
            lora_rank=lora_rank,
            lora_alpha=2 * max(lora_rank, 1),
            per_device_train_batch_size=BATCH,
            gradient_accumulation_steps=1,
            num_generations=BATCH,
            max_prompt_length=prompt,
            max_completion_length=completion,
            max_seq_length=prompt + completion,
            optim="adamw_torch",
            beta=0.0,
            gradient_checkpointing="true" if checkpointing else "false",
        ),
        "<benchmark>",
    )


def estimated(model, lora_rank, checkpointing, prompt, completion) -> dict[str, float]:
    """The estimator's training components in bytes, and their sum."""
    est = estimate(profile_for(model, lora_rank, checkpointing, prompt, completion), backend="trl")
    parts = {k: est.components.get(k, 0.0) * GIB for k in TRAINING}
    parts["total"] = sum(parts.values())
    return parts


def simulated(model, lora_rank, checkpointing, prompt, completion) -> dict[str, float]:
    from benchmarks.step_simulation import simulate

    sim = simulate(
        resolve(model),
        lora_rank=lora_rank,
        checkpointing=checkpointing,
        batch=BATCH,
        prompt=prompt,
        completion=completion,
    )
    return dict(sim.__dict__)


def grid(models):
    for model in models:
        for lora_rank in (LORA_RANK, 0):
            for checkpointing in (False, True):
                for prompt, completion in LENGTHS:
                    yield model, lora_rank, checkpointing, prompt, completion


def pairs(est: dict, sim: dict, checkpointing: bool) -> list[tuple[str, float, float]]:
    """(component, estimate, simulation) in the order of the table."""
    rows = [
        ("weights", est["weights"], sim["weights"]),
        ("lora", est["lora"], sim["lora"]),
        ("gradients", est["gradients"], sim["gradients"]),
        ("optimizer", est["optimizer"], sim["optimizer"]),
    ]
    if checkpointing:
        rows += [
            ("checkpoints", est["activation_checkpoints"], sim["stored"]),
            ("recompute", est["activations"], sim["recompute"]),
        ]
    else:
        rows += [("activations", est["activations"], sim["stored"])]
    rows += [("head", est["logits"], sim["head"]), ("total/peak", est["total"], sim["peak"])]
    return rows


def error(estimate_bytes: float, simulation_bytes: float) -> float | None:
    if simulation_bytes == 0:
        return None if estimate_bytes == 0 else float("inf")
    return (estimate_bytes - simulation_bytes) / simulation_bytes


def cell(e: float, s: float) -> str:
    err = error(e, s)
    if err is None:
        return "0 / 0"
    return f"{e / GIB:.3f} / {s / GIB:.3f} ({err * 100:+.0f}%)"


def section(title: str, rows: list[tuple[tuple, dict, dict]]) -> str:
    """One table per model; the last column is the estimator's own peak terms (no simulated counterpart:
    the optimizer step's temporaries and, negative, what never peaks together), which its total includes."""
    head = (
        "| tuning | GC | tokens | weights | lora | gradients | optimizer | activations or checkpoints "
        "| recompute | head | total / peak | step, overlap |"
    )
    lines = [f"## {title}", "", "GiB, estimate / simulation (error)."]
    worst: dict[str, float] = {}
    model_now = None
    for (model, lora_rank, gc, prompt, completion), est, sim in rows:
        if model != model_now:
            lines += ["", f"### {model.split('/')[-1]}", "", head, "|" + "---|" * 12]
            model_now = model
        named = {name: (e, s) for name, e, s in pairs(est, sim, gc)}
        for name, (e, s) in named.items():
            err = error(e, s)
            if err is not None:
                key = "activations" if name in ("checkpoints", "activations") else name
                worst[key] = max(worst.get(key, 0.0), abs(err))
        act = named.get("checkpoints") or named["activations"]
        recompute = cell(*named["recompute"]) if gc else "–"
        own = f"{est['optimizer_step'] / GIB:.3f}, {est['peak_overlap'] / GIB:.3f}"
        lines.append(
            f"| {'LoRA r16' if lora_rank else 'full'} | {'on' if gc else 'off'} "
            f"| {prompt}+{completion} | {cell(*named['weights'])} | {cell(*named['lora'])} "
            f"| {cell(*named['gradients'])} | {cell(*named['optimizer'])} | {cell(*act)} | {recompute} "
            f"| {cell(*named['head'])} | {cell(*named['total/peak'])} | {own} |"
        )
    lines += [
        "",
        "Worst absolute error by component: " + ", ".join(f"{k} {v * 100:.0f}%" for k, v in worst.items()),
        "",
    ]
    return "\n".join(lines)


HEADER = """# The estimator's `trl` path against a simulated training step

Written by `python benchmarks/estimator_vs_simulation.py`. One plain-TRL (1.15) + PEFT GRPO step, bf16 with
autocast, AdamW (torch), per-device batch 2 of padded prompt + completion sequences, beta 0, simulated with
fake tensors on CPU (benchmarks/step_simulation.py: SDPA routed to the flash / memory-efficient kernels a
GPU picks, TRL's chunked LM head run with its Triton launches stubbed out). "activations or checkpoints" is
what the backbone's forward keeps for backward; "recompute" (checkpointing on) is what the backbone's
backward holds besides gradients (one layer recomputed, PEFT's input casts, the gradient flowing back);
"head" is what the LM head and the GRPO loss hold besides gradients; "total / peak" sets the sum of the
estimator's training components against the simulated peak of all live bytes. Not simulated: the CUDA
context, the caching allocator's slack, kernel workspaces, vLLM or generate, 4-bit weights, Unsloth.
"""


def write(title: str, body: str) -> None:
    text = OUTPUT.read_text() if OUTPUT.exists() else HEADER
    sections = dict(re.findall(r"(?ms)^## (before|after)\n(.*?)(?=^## |\Z)", text))
    sections[title] = body.split("\n", 1)[1]
    order = [t for t in ("before", "after") if t in sections]
    OUTPUT.write_text(HEADER + "\n" + "\n".join(f"## {t}\n{sections[t].rstrip()}\n" for t in order))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--section", choices=("before", "after"), default="after")
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument(
        "--cache", help="JSON file keeping simulations between runs (they do not depend on the estimator)"
    )
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(int(os.environ.get("SIMULATION_THREADS", "2")))
    cache = json.loads(Path(args.cache).read_text()) if args.cache and Path(args.cache).exists() else {}
    rows = []
    for key in grid(args.models):
        name = "|".join(map(str, key))
        if name not in cache:
            start = time.perf_counter()
            cache[name] = simulated(*key)
            print(f"{name}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
            if args.cache:
                Path(args.cache).write_text(json.dumps(cache))
        rows.append((key, estimated(*key), cache[name]))
    write(args.section, section(args.section, rows))
    print(f"wrote the '{args.section}' section of {OUTPUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
