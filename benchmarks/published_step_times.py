"""The step-time model (launcher/plan/speed.py) against GRPO runs others published with a measured time per step.

    python benchmarks/published_step_times.py [--summary] [--json FILE]

For every record of benchmarks/published_step_times.yaml with a known card: the model's prediction from the
record's own settings (model shape, weights, LoRA, generations, batch, lengths, generator), its mean completion
length as the expected length, and the measured seconds per step; the error as predicted / measured. Then the
median and worst error over all records and over the clean ones (not doubtful, no image prompts, no reward that
runs code, a logged mean completion length), by card and by generator, and card-to-card ratios of the same
configuration (predicted against measured). The model's constants are the same for every record: none is set
from a record.

What the model cannot see, and the records say: a run's first steps compile (short runs overstate the steady
state); image prompts hold tokens the settings do not give (their prompt cap is taken); a reward that runs code
adds CPU time; the engines of 2025's notebooks ran with 128-320 sequences at once (more than any record's
completions per step), so every record is predicted with all its completions at once. The record's transformers
(its printed version), not this machine's, decides whether a mixture generates through every expert
(launcher.plan.step_shape.every_expert_generates: gpt-oss before transformers 5).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from launcher.card.detect import GpuInfo  # noqa: E402
from launcher.card.facts import DEFAULT, card_facts  # noqa: E402
from launcher.plan.completion_lengths import CompletionPlan  # noqa: E402
from launcher.plan.speed import generation_time, step_time, training_time  # noqa: E402
from launcher.plan.step_shape import every_expert_generates, shape_of  # noqa: E402
from profiles.catalog import Architecture, resolve  # noqa: E402
from profiles.schema import profile_from_dict  # noqa: E402

DATA = REPO / "benchmarks" / "published_step_times.yaml"
# Assumed where a record logged no mean completion length: this share of its cap
UNKNOWN_MEAN_SHARE = 0.75
# TRL's default beta before 0.19 (June 2025) was 0.04: a reference forward per step (the adapter disabled)
OLD_TRL_BETA = 0.04


# Shapes of models outside the catalogue, from their public config.json files
EXTRA = {
    # openai/gpt-oss-20b: 24 layers, hidden 2880, 64 query and 8 KV heads of 64, 32 experts of 2880 in every
    # block, 4 active, vocabulary 201088, untied
    "gpt-oss-20b": Architecture(
        "openai/gpt-oss-20b",
        0,
        2880,
        24,
        64,
        8,
        64,
        0,
        201088,
        False,
        "gpt_oss",
        experts=32,
        experts_per_token=4,
        expert_intermediate=2880,
        moe_layers=24,
    ),
    # mistralai/Ministral-3-3B-Instruct-2512 (text part): 26 layers, hidden 3072, 32 query and 8 KV heads of 128,
    # intermediate 9216, vocabulary 131072, tied
    "ministral-3-3b": Architecture("ministral-3-3b", 0, 3072, 26, 32, 8, 128, 9216, 131072, True, "mistral"),
}


def arch_of(name: str) -> Architecture:
    arch = EXTRA.get(name) or resolve(name)
    return replace(arch, params=arch.computed_params)


def old_trl(record: dict) -> bool:
    version = str(record.get("unsloth_version") or "")
    trl = str(record.get("trl_version") or "")
    return (
        trl.startswith("0.14")
        or "old semantics" in trl
        or (version[:4] == "2025" and version[5:].split(".")[0].isdigit() and int(version[5:].split(".")[0]) < 6)
    )


def record_transformers_major(record: dict) -> int | None:
    """The transformers major version the record printed (other_versions: "transformers 4.56.2"), else None."""
    match = re.search(r"transformers (\d+)\.", str(record.get("other_versions") or ""))
    return int(match.group(1)) if match else None


def plain_trl(record: dict) -> bool:
    """A run through plain TRL + PEFT (the cookbook's and TRL's notebooks), not Unsloth's patched trainer."""
    return record.get("unsloth_version") is None and "unsloth" not in str(record.get("id", ""))


def predicted(record: dict) -> dict:
    """The model's prediction of one record, with what it assumed."""
    arch = arch_of(record["arch"])
    card = card_facts(record["card"])
    gpu = GpuInfo(
        name=card.name,
        total_gib=card.memory_gib or 80.0,
        free_gib=card.memory_gib or 80.0,
        used_gib=0.0,
        compute_capability=card.capability,
        driver=None,
        cuda_driver=None,
        index=0,
        source="what-if",
    )
    gens = record["num_generations"]
    completions = record["completions_per_step"]
    accumulation = record["gradient_accumulation_steps"]
    cap = record["max_completion_length"]
    prompt = record.get("max_prompt_length") or 256
    mean = record.get("mean_completion_length")
    assumed = []
    if mean is None:
        mean = UNKNOWN_MEAN_SHARE * cap
        assumed.append(f"mean length {UNKNOWN_MEAN_SHARE:g} x cap")
    beta = record.get("beta")
    if beta is None:
        beta = OLD_TRL_BETA if old_trl(record) else 0.0
    lora = record["lora_rank"] or 0
    vllm = record["generator"] == "vllm"
    profile = profile_from_dict(
        {
            "model": "tiny",
            "device": "cuda",
            "load_in_4bit": record["weight_bits"] == 4,
            "lora_rank": lora,
            "lora_alpha": max(lora, 1),
            "fast_inference": vllm,
            "num_generations": gens,
            "per_device_train_batch_size": completions // accumulation,
            "gradient_accumulation_steps": accumulation,
            "max_prompt_length": prompt,
            "max_completion_length": cap,
            "max_seq_length": prompt + cap,
            "gradient_checkpointing": "unsloth",
            "beta": beta,
            "gpu_memory_utilization": record.get("gpu_memory_utilization") or 0.5,
            "optim": "adamw_8bit",
        },
        record["id"],
    )
    lengths = CompletionPlan(cap, int(round(mean)), prompt, "the record's own")
    shape = shape_of(profile, arch, gpu, None, lengths)
    if record["weight_bits"] == 8:  # FP8 weights: half the 16-bit reads of a decode step
        shape = replace(shape, weight_bits=8)
    if plain_trl(record):  # one GPU, but plain TRL + PEFT: transformers' own generate and training
        shape = replace(shape, plain=True)
    if shape.experts:  # the record's transformers, not this machine's, decides how its mixture generates
        major = record_transformers_major(record)
        shape = replace(shape, every_expert=every_expert_generates(shape.family, shape.generator, major))
    time = step_time(shape, card.name, card.memory_gib)
    return {
        "predicted_s": time.step_s,
        "generation_s": time.generation_s,
        "training_s": time.training_s,
        "assumed": assumed,
        "limited_by": time.limited_by,
    }


def clean(record: dict) -> bool:
    return not (
        record.get("doubtful")
        or record.get("vision")
        or record.get("reward_runs_code")
        or record.get("mean_completion_length") is None
    )


def error_text(ratios: list[float]) -> str:
    """Median and worst of predicted / measured, as factors off (1.25 = 25 % long, 0.8 = 20 % short)."""
    if not ratios:
        return "-"
    factors = [max(r, 1 / r) for r in ratios]
    worst = ratios[factors.index(max(factors))]
    return (
        f"median {statistics.median(factors):.2f}x off (signed {statistics.median(ratios):.2f}), "
        f"worst {worst:.2f}x, n={len(ratios)}"
    )


def rank_correlation(rows: list[dict]) -> float | None:
    """Spearman's rank correlation of predicted and measured seconds per step (ties ranked by their mean)."""
    if len(rows) < 3:
        return None

    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2.0
            i = j + 1
        return out

    a = ranks([r["predicted_s"] for r in rows])
    b = ranks([r["seconds_per_step"] for r in rows])
    mean_a, mean_b = statistics.fmean(a), statistics.fmean(b)
    cov = sum((x - mean_a) * (y - mean_b) for x, y in zip(a, b))
    spread = (sum((x - mean_a) ** 2 for x in a) * sum((y - mean_b) ** 2 for y in b)) ** 0.5
    return cov / spread if spread else None


def by_phase(rows: list[dict], title: str) -> list[str]:
    """The predictions by phase: what share of each predicted step is training, and the error of the records
    whose prediction generation bounds against those training bounds (generators apart)."""
    lines = [f"by phase, {title}:"]
    shares = [r["training_s"] / r["predicted_s"] for r in rows if r["predicted_s"] > 0]
    lines.append(
        f"  training's share of a predicted step: median {statistics.median(shares):.0%}, most {max(shares):.0%}"
    )
    for phase in ("generation", "training"):
        for generator in ("vllm", "transformers"):
            ratios = [
                r["ratio"]
                for r in rows
                if str(r.get("limited_by", "")).startswith(phase) and r["generator"] == generator
            ]
            if ratios:
                lines.append(f"  bound by {phase}, {generator} generating: {error_text(ratios)}")
    for generator in ("vllm", "transformers"):
        clean_ratios = [r["ratio"] for r in rows if clean(r) and r["generator"] == generator]
        gen = [r["generation_s"] / r["seconds_per_step"] for r in rows if r["generator"] == generator]
        if gen:
            lines.append(
                f"  {generator}: predicted generation alone / measured step: median {statistics.median(gen):.2f} "
                f"(clean records' whole step: {error_text(clean_ratios)})"
            )
    return lines


PAIRS = (  # (a, b, what differs): the same configuration on two cards, or the nearest published pair
    (
        "unsloth-openenv-gpt-oss-20b-2048-t4",
        "unsloth-openenv-gpt-oss-20b-2048-a100-80",
        "same 4-bit run, T4 / A100 80GB",
    ),
    ("unsloth-gpt-oss-20b-t4-a", "unsloth-gpt-oss-20b-bf16-a100-80", "4-bit on a T4 / BF16 on an A100 80GB"),
    ("unsloth-gpt-oss-20b-2048-t4", "unsloth-gpt-oss-20b-2048-bf16-a100-80", "4-bit on a T4 / BF16 on an A100 80GB"),
    (
        "unsloth-llama3.1-8b-t4",
        "unsloth-mistral-7b-rtx4090",
        "one recipe, Llama-8B on a T4 / Mistral-7B on an RTX 4090",
    ),
    (
        "unsloth-llama3.2-3b-adv-t4",
        "unsloth-llama3.2-3b-adv-a100-40",
        "Llama-3B, 16 completions on a T4 / 32 on an A100 40GB",
    ),
    ("cookbook-qwen2.5-vl-3b-a100-c1024", "cookbook-qwen2.5-vl-3b-a100-c256", "same card, cap 1024 / 256"),
    ("unsloth-qwen2.5-vl-7b-t4-142", "unsloth-qwen2.5-vl-7b-t4-60", "same card, mean 272 / 167 tokens"),
)


def kit_lines(path: Path) -> list[str]:
    """A card's measured generation waves and training steps (benchmarks/gpu/<card>.json, written by gpu-check)
    against the prediction the kit printed then and this model's now, at exactly the shapes timed: the longest
    length of each (the first training step of Unsloth's path compiles)."""
    import dataclasses

    from launcher.card.detect import GpuInfo
    from measure.cases import timed_shape
    from profiles.load import load_profile

    data = json.loads(path.read_text(encoding="utf-8"))
    # the CPU rehearsal's table ("cpu"): the default card, as the kit predicted it
    card = card_facts(data["card"], data.get("total_gib")) or DEFAULT
    gpu = GpuInfo(card.name, card.memory_gib, card.memory_gib, 0.0, card.capability, None, None, 0, "what-if")
    lines = [
        f"{path.name}: measured / predicted then -> predicted now, seconds",
        f"  {'architecture':26} {'path':9} {'generation wave':30} training step",
    ]
    base = REPO / "profiles" / "gpu-16gb-gemma3-1b.yaml"
    for probe in data["probes"]:
        timed = probe.get("timed")
        if not timed:
            continue
        profile = load_profile(base, [s for s in probe["settings"] if not s.startswith("name=")])
        arch = arch_of(profile.model)
        planned = timed.get("planned") or {}
        # the longest length timed, then the plan's shape where the kit timed it
        for label, source in ((probe["path"], timed), ("  at plan", planned)):
            cells = []
            for kind in ("generation", "training"):
                if not source.get(kind):
                    cells.append("-")
                    continue
                t = source[kind][-1]
                shape = timed_shape(profile, arch, gpu, t["sequences"], t["prompt_tokens"], t["completion_tokens"])
                shape = dataclasses.replace(shape, plain=probe["path"] != "unsloth")
                now = generation_time(shape, card)[0] if kind == "generation" else training_time(shape, card)
                then = t.get("predicted_s")
                cells.append(f"{t['seconds']:.3f} / {'-' if then is None else f'{then:.3f}'} -> {now:.3f}")
            if source is timed or cells != ["-", "-"]:
                lines.append(f"  {probe['architecture'].split('/')[-1]:26} {label:9} {cells[0]:30} {cells[1]}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--summary", action="store_true", help="leave out the record-by-record lines")
    parser.add_argument("--json", help="write the rows as JSON here")
    parser.add_argument("--before", help="an earlier run's --json rows: their errors by phase beside these")
    parser.add_argument("--kit", help="a card's gpu-check JSON (benchmarks/gpu/*.json): its timed shapes too")
    args = parser.parse_args(argv)
    records = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    rows = []
    for record in records:
        if not record.get("card") or record.get("num_generations") is None:
            rows.append({**record, "skipped": "card unknown" if not record.get("card") else "settings unknown"})
            continue
        rows.append({**record, **predicted(record)})
    scored = [r for r in rows if "predicted_s" in r]
    for r in scored:
        r["ratio"] = r["predicted_s"] / r["seconds_per_step"]
    lines = [
        f"{len(records)} published records, {len(scored)} predicted ({len(records) - len(scored)} skipped: "
        + ", ".join(f"{r['id']} ({r['skipped']})" for r in rows if "skipped" in r)
        + ")"
    ]
    if not args.summary:
        lines.append("")
        lines.append(f"{'record':44} {'card':24} {'gen':12} {'measured':>9} {'predicted':>9} {'ratio':>6}  flags")
        for r in scored:
            flags = [k for k in ("doubtful", "vision", "reward_runs_code") if r.get(k)] + r["assumed"]
            lines.append(
                f"{r['id']:44} {r['card'][:24]:24} {r['generator']:12} {r['seconds_per_step']:9.2f} "
                f"{r['predicted_s']:9.2f} {r['ratio']:6.2f}  {', '.join(flags)}"
            )
    lines.append("")
    for title, subset in (
        ("all predicted", scored),
        (
            "clean (not doubtful, text prompts, shipped-style rewards, mean length logged)",
            [r for r in scored if clean(r)],
        ),
    ):
        rho = rank_correlation(subset)
        rank = f", rank correlation {rho:.2f}" if rho is not None else ""
        lines.append(f"{title}: {error_text([r['ratio'] for r in subset])}{rank}")
        for key in ("card", "generator"):
            groups: dict[str, list[float]] = {}
            for r in subset:
                groups.setdefault(r[key], []).append(r["ratio"])
            for name, ratios in sorted(groups.items()):
                lines.append(f"  {key} {name}: {error_text(ratios)}")
    lines.append("")
    lines += by_phase(scored, "this model")
    if args.before:
        earlier = [r for r in json.loads(Path(args.before).read_text(encoding="utf-8")) if "predicted_s" in r]
        for r in earlier:
            r.setdefault("ratio", r["predicted_s"] / r["seconds_per_step"])
        lines += by_phase(earlier, f"before ({Path(args.before).name})")
    lines.append("")
    lines.append("card-to-card and same-card ratios (a / b): measured, predicted")
    by_id = {r["id"]: r for r in scored}
    for a, b, what in PAIRS:
        if a in by_id and b in by_id:
            measured = by_id[a]["seconds_per_step"] / by_id[b]["seconds_per_step"]
            guess = by_id[a]["predicted_s"] / by_id[b]["predicted_s"]
            lines.append(f"  {what}: measured {measured:.2f}, predicted {guess:.2f}")
    if args.kit:
        lines += ["", *kit_lines(Path(args.kit))]
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
