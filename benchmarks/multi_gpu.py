"""What `plan --set model=M --gpus N --gpu-memory G --gpu-name CARD` chooses on one to eight GPUs: which generator
(vLLM colocated in every training process, a vLLM server on GPUs of its own, or transformers), how many GPUs it
uses, and what it predicts (estimate and step-time model only, no ledger).

    python benchmarks/multi_gpu.py [--out benchmarks/multi_gpu.md] [--json FILE]

For each model, card and GPU count: the chosen configuration, its generator, the GPUs it occupies, its
predicted seconds per step, prompts per step and learning per hour (the planner's objective), and, where the
plan generates with transformers, whether vLLM fits at all (the same search with fast_inference pinned true).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from contract.errors import ProfileError, UsageError  # noqa: E402
from launcher.card.detect import detect_machine  # noqa: E402
from launcher.plan.derive import fit_for_machine  # noqa: E402
from profiles.load import load_profiles  # noqa: E402

CARDS = ((24.0, "NVIDIA GeForce RTX 4090"), (79.6, "NVIDIA H100 80GB HBM3"))
MODELS = (
    "Qwen/Qwen2.5-0.5B-Instruct",
    "Qwen/Qwen2.5-1.5B-Instruct",
    "Qwen/Qwen2.5-3B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct",
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen2.5-14B-Instruct",
)
COUNTS = (1, 2, 4, 8)


def generator_of(p) -> str:
    if not p.fast_inference:
        return "transformers"
    if p.uses_vllm_server:
        return f"vLLM server ({p.vllm_server_gpus} GPU, TP {p.vllm_tensor_parallel})"
    return "vLLM colocated"


def learning(fit) -> float | None:
    from launcher.plan.levers import objective

    return objective(fit.profile, fit.speed) if fit.speed is not None else None


def row(model: str, gib: float, name: str, count: int, rungs) -> dict:
    machine = detect_machine(what_if_gib=gib, what_if_name=name, what_if_count=count)
    started = time.process_time()
    try:
        best = fit_for_machine(rungs, model, machine)
    except (ProfileError, UsageError) as exc:
        return {"model": model, "card": name, "gpus": count, "why": str(exc)}
    seconds = time.process_time() - started
    out = {"model": model, "card": name, "card_gib": gib, "gpus": count, "plan_seconds": round(seconds, 3)}
    if best.profile is None:
        from launcher.plan.wording import nothing_fits

        return {**out, "why": nothing_fits(best.shortfall)}
    p = best.profile
    out.update(
        {
            "profile": p.name,
            "generator": generator_of(p),
            "vllm": p.fast_inference,
            "gpus_used": p.gpus_needed,
            "prompts": p.completions_per_step // p.num_generations,
            "step_s": round(best.speed.step_s, 2),
            "prompts_per_hour": round(best.speed.prompts_per_hour),
            "objective": round(learning(best) or 0.0, 1),
        }
    )
    if not p.fast_inference:  # is there any configuration with vLLM at all?
        try:
            forced = fit_for_machine(rungs, model, machine, pinned={"fast_inference": True})
            out["vllm_fits_somewhere"] = forced.profile is not None
        except (ProfileError, UsageError):
            out["vllm_fits_somewhere"] = False
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "multi_gpu.md"))
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args()
    rows = []
    for model in MODELS:
        rungs = load_profiles(REPO / "profiles", [f"model={model}"], device="cuda")
        for gib, name in CARDS:
            for count in COUNTS:
                rows.append(row(model, gib, name, count, rungs))
    gave_up = [r for r in rows if r.get("vllm") is False]
    needless = [r for r in gave_up if r.get("vllm_fits_somewhere")]
    lines = [
        "# Several GPUs: what the plan chooses on 1, 2, 4 and 8 GPUs",
        "",
        "Written by `python benchmarks/multi_gpu.py` (estimate and step-time model only, no ledger). Each cell: the "
        "generator, GPUs used of those planned, prompts per step, predicted seconds per step and the objective "
        "(learning per hour, launcher/plan/value.py).",
        "",
        f"Plans that generate with transformers: {len(gave_up)} of {len(rows)}; of those, where vLLM would fit: "
        f"{len(needless)}.",
        "",
        "| model | card | " + " | ".join(f"{n} GPU" + ("s" if n > 1 else "") for n in COUNTS) + " |",
        "|---|---|" + "---|" * len(COUNTS),
    ]
    for model in MODELS:
        for _gib, name in CARDS:
            cells = []
            for count in COUNTS:
                r = next(x for x in rows if x["model"] == model and x["card"] == name and x["gpus"] == count)
                if "profile" not in r:
                    cells.append("nothing fits")
                    continue
                cells.append(
                    f"{r['generator']}, {r['gpus_used']}/{count} GPUs, {r['prompts']} prompts, {r['step_s']:.0f} s, "
                    f"{r['objective']:g}/h"
                )
            short = name.replace("NVIDIA ", "").replace("GeForce ", "")
            lines.append(f"| {model.split('/')[-1]} | {short} | " + " | ".join(cells) + " |")
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
