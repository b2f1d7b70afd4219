#!/usr/bin/env python3
"""The bookkeeping of the product call (scripts/gpu-product.sh, docs/gpu.md): it writes the profiles the call's
commands train and reads back what they wrote. Nothing here trains, plans or stands between a user and
train.py: the shell script runs the real commands.

    python3 scripts/gpu_product.py prepare WORK [--cpu]   # the ladders and profiles; prints their facts as JSON
    python3 scripts/gpu_product.py notebook WORK PLAN [--cpu]  # WORK/notebook.yaml over the rung PLAN chose
    python3 scripts/gpu_product.py models SEED...         # the tiny model of each seed, built (or found) now
    python3 scripts/gpu_product.py summarize OUT WORK     # OUT/summary.json and OUT/summary.md from WORK

`prepare` writes, under WORK:
  - ladder/: the CPU demo's task as a GPU rung for the tiny model (its intents written, the levers `auto`, so
    that the planner derives them for the card), beside the CPU demo's own rung (what a machine without a card
    trains: the rehearsal);
  - notebook.yaml: the same rung with the settings of Unsloth's Qwen2.5 (3B) GRPO notebook (1 prompt a step of
    8 generations, learning rate 5e-6, a 200-token cap, 250 steps), every key written;
  - oom-ladder/: on a card, a rung of a catalogue architecture (built with random weights from its facts)
    whose micro-batch the estimator puts at OOM_OVER x the card, and a small rung of the same model to fall
    back to; on the CPU two tiny rungs, the first to be injected an out-of-memory (GRPO_INJECT_OOM).
`summarize` reads the run folders, the plans and the ledger into the figures the closing note asks for.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CPU_DEMO = REPO / "profiles" / "cpu-tiny-8gen.yaml"
PRODUCT_RUNG = "gpu-tiny-demo"
NOTEBOOK = "notebook-tiny"
# Unsloth's Qwen2.5 (3B) GRPO notebook (github.com/unslothai/notebooks nb/Qwen2.5_(3B)-GRPO.ipynb; its run is in
# benchmarks/published_step_times.yaml): 1 prompt a step (per_device_train_batch_size 1 in TRL 0.14's prompts),
# 8 generations, learning rate 5e-6, completions capped at 200 tokens, 250 steps. Only these move; the rest is
# the planner's rung as written, so that the comparison is of the settings a user copies.
NOTEBOOK_SETTINGS = {
    "num_generations": 8,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "learning_rate": 5.0e-6,
    "max_completion_length": 200,
    "max_steps": 250,
}
# The architecture whose random weights overflow the card: small weights (built in seconds), a large vocabulary
# (the logits), so that the micro-batch rather than the load runs out.
OOM_MODEL = "unsloth/Qwen2.5-0.5B-Instruct"
OOM_OVER = 1.25  # the big rung's estimate over the card's memory: a real OOM even if the estimate is 20% high
OOM_COMPLETION = 256
OOM_SMALL_BATCH = 16
CPU_SIZES = {"max_steps": 3, "eval_samples": 8, "train_samples": 64}


def _yaml(data: dict) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False)


def _demo() -> dict:
    import yaml

    return yaml.safe_load(CPU_DEMO.read_text(encoding="utf-8"))


def product_rung(demo: dict) -> dict:
    """The CPU demo's intents (model, task, rewards, LoRA, generations, learning rate, evaluation) on a card; the
    levers `auto` for the plan to derive; no vLLM (the measuring machine has none: fast_inference written false)."""
    rung = {k: v for k, v in demo.items() if k not in ("name", "description", "ladder")}
    rung.update(
        name=PRODUCT_RUNG,
        description="the CPU demo's task on a GPU: the tiny offline model, the levers derived for the card",
        ladder=100,
        device="cuda",
        fast_inference=False,
        max_seq_length="auto",
        max_completion_length="auto",
        expected_completion_length="auto",
        per_device_train_batch_size="auto",
        gradient_accumulation_steps="auto",
        gradient_checkpointing="auto",
        max_steps="auto",
    )
    return rung


def notebook_rung(base: dict, cpu: bool) -> dict:
    """The notebook's settings over `base` (a rung with every key written), its sequence long enough for the cap."""
    rung = dict(base, name=NOTEBOOK, description="Unsloth's GRPO notebook settings, scaled to the tiny model")
    rung.update(NOTEBOOK_SETTINGS)
    rung["max_seq_length"] = int(rung["max_prompt_length"]) + NOTEBOOK_SETTINGS["max_completion_length"]
    if cpu:
        rung.update(max_steps=CPU_SIZES["max_steps"])
    return rung


def _written(settings: dict, rung: dict) -> dict:
    """The rung with the keys it wrote `auto` given the values the plan derived (plan --json `settings`)."""
    out = dict(rung)
    for key, value in rung.items():
        if value == "auto" and key in settings:
            out[key] = settings[key]
    return out


def oom_rungs(gpu) -> tuple[list[dict], float]:
    """On a card: the big rung (random weights of OOM_MODEL, its micro-batch estimated OOM_OVER x the card's
    memory, no checkpointing) and the small one; and the what-if memory (GiB) the plan must be told for the big
    rung to be judged to fit (`train --gpu-memory`)."""
    from launcher.memory.estimate import estimate
    from launcher.plan.margins import ESTIMATE_MAX_USE, card_for
    from profiles.schema import profile_from_dict

    common = {
        "model": OOM_MODEL,
        "device": "cuda",
        "load_in_4bit": False,
        "fast_inference": False,
        "max_prompt_length": 128,
        "max_completion_length": OOM_COMPLETION,
        "max_seq_length": 128 + OOM_COMPLETION,
        "lora_rank": 16,
        "lora_alpha": 16,
        "num_generations": 8,
        "gradient_accumulation_steps": 1,
        "optim": "adamw_torch",
        "gradient_checkpointing": "false",
        "learning_rate": 5.0e-6,
        "max_steps": 1000,
        "save_steps": 1,
        "dataset": "arithmetic",
        "train_samples": 512,
        "eval_samples": 0,
        "length_probe": 0,
    }

    def estimated(batch: int) -> float:
        profile = profile_from_dict({**common, "name": "oom-big", "per_device_train_batch_size": batch}, "oom-big")
        return float(estimate(profile, gpu=gpu).total_gib)

    target = OOM_OVER * float(gpu.total_gib)
    batch = 8
    while batch <= 1 << 16 and estimated(batch) < target:
        batch *= 2
    low, high = batch // 2, batch  # the least multiple of 8 over the target, between the last two doublings
    while high - low > 8:
        middle = (low + high) // 16 * 8
        if estimated(middle) >= target:
            high = middle
        else:
            low = middle
    big = {"name": "oom-big", "ladder": 1, **common, "per_device_train_batch_size": high}
    total = estimated(high)
    small = {"name": "oom-small", "ladder": 2, **common, "per_device_train_batch_size": OOM_SMALL_BATCH}
    # the plan keeps a margin of the (what-if) card and headroom for the estimate: a card that holds both
    what_if = math.ceil(card_for(total / ESTIMATE_MAX_USE) + 1)
    return [big, small], float(what_if)


def cpu_oom_rungs(demo: dict) -> list[dict]:
    """Two tiny rungs on the CPU: the first is injected an out-of-memory in its first training step (the host has
    no CUDA allocator to exhaust), the second (estimated below it) is fallen back to; each steps until stopped."""
    common = {k: v for k, v in demo.items() if k not in ("name", "description", "ladder")}
    common.update(max_steps=1000, save_steps=1, eval_samples=0, train_samples=64, length_probe=0)
    big = {**common, "name": "oom-big", "ladder": 1, "num_generations": 4, "per_device_train_batch_size": 8}
    small = {
        **common,
        "name": "oom-small",
        "ladder": 2,
        "num_generations": 2,
        "per_device_train_batch_size": 2,
        "max_completion_length": 32,
    }
    return [big, small]


def prepare(work: Path, cpu: bool) -> dict:
    from launcher.card.detect import detect_machine

    work.mkdir(parents=True, exist_ok=True)
    machine = detect_machine()
    gpu = None if cpu else machine.primary
    demo = _demo()
    ladder = work / "ladder"
    shutil.rmtree(ladder, ignore_errors=True)
    ladder.mkdir()
    rung = product_rung(demo)
    (ladder / f"{PRODUCT_RUNG}.yaml").write_text(_yaml(rung), encoding="utf-8")
    cpu_rung = dict(demo, **(CPU_SIZES if cpu else {}))
    (ladder / f"{demo['name']}.yaml").write_text(_yaml(cpu_rung), encoding="utf-8")
    facts: dict = {
        "device": "cpu" if gpu is None else "cuda",
        "card": None
        if gpu is None
        else {"name": gpu.name, "total_gib": round(float(gpu.total_gib), 2), "driver": gpu.driver},
        "machine": machine.message,
        "ladder": str(ladder),
        "product_rung": PRODUCT_RUNG if gpu is not None else demo["name"],
    }
    oom = work / "oom-ladder"
    shutil.rmtree(oom, ignore_errors=True)
    oom.mkdir()
    if gpu is None:
        rungs, what_if = cpu_oom_rungs(demo), None
        facts["inject"] = "oom-big@1"
    else:
        rungs, what_if = oom_rungs(gpu)
        facts["inject"] = None
    for each in rungs:
        (oom / f"{each['name']}.yaml").write_text(_yaml(each), encoding="utf-8")
    facts.update(
        oom_ladder=str(oom),
        oom_what_if_gib=what_if,
        oom_rungs={
            r["name"]: {k: r[k] for k in ("model", "per_device_train_batch_size", "num_generations")} for r in rungs
        },
    )
    (work / "prepare.json").write_text(json.dumps(facts, indent=2), encoding="utf-8")
    return facts


def write_notebook(work: Path, plan_file: Path, cpu: bool) -> Path:
    """notebook.yaml: the notebook's settings over the rung the plan chose for the tiny model (its derived values
    written in), so that it runs as written (`train --profile`) beside the planner's choice."""
    import yaml

    plan = json.loads(plan_file.read_text(encoding="utf-8"))
    chosen = next(c for c in plan["candidates"] if c["profile"] == plan["chosen"])
    path = Path(chosen["path"].split(" with --set")[0])
    rung = yaml.safe_load(path.read_text(encoding="utf-8"))
    base = _written(chosen["settings"], rung)
    notebook = notebook_rung(base, cpu or chosen["settings"].get("device") == "cpu")
    target = work / "notebook.yaml"
    target.write_text(_yaml(notebook), encoding="utf-8")
    return target


# ---------------------------------------------------------------------------------------------------- reading


def _json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _run_folder(output_dir: Path) -> Path | None:
    runs = sorted(p for p in output_dir.glob("run-*") if p.is_dir())
    return runs[-1] if runs else None


def plan_facts(plan: dict | None) -> dict | None:
    """The card the plan read and its choice: profile, estimate, predicted step time and run."""
    if not isinstance(plan, dict):
        return None
    chosen = next((c for c in plan.get("candidates", []) if c.get("profile") == plan.get("chosen")), None)
    out = {"gpu": plan.get("gpu"), "chosen": plan.get("chosen")}
    if chosen:
        speed, run = chosen.get("speed") or {}, chosen.get("run") or {}
        out.update(
            estimate_gib=(chosen.get("estimate") or {}).get("total_gib"),
            measured=chosen.get("measured"),
            predicted_step_s=speed.get("step_s"),
            predicted_run_s=round(run["hours"] * 3600, 1) if isinstance(run.get("hours"), (int, float)) else None,
            steps=run.get("steps"),
            settings=chosen.get("settings"),
        )
    return out


def _attempt_row(record: dict) -> dict:
    keys = ("attempt", "profile", "status", "steps", "started", "duration_s", "resumed_from", "checkpoint")
    keys += ("shrink", "decided", "stopped_by", "estimate_gib", "peak_gib", "step_s", "predicted_step_s")
    row: dict = {k: record.get(k) for k in keys}
    row["injected"] = (record.get("env") or {}).get("GRPO_INJECT_OOM")
    oom = record.get("oom") or {}
    if oom:
        keep = ("kind", "site", "asked_gib", "free_gib", "total_gib", "in_use_gib", "shortfall_gib", "in_probe")
        row["oom"] = {**{k: oom.get(k) for k in keep if k in oom}, "message": oom.get("message")}
    return row


def run_facts(output_dir: Path, wall_s: float | None = None) -> dict | None:
    """A run folder's attempts (attempts.jsonl), its final attempt's accuracy before and after, its time per step
    against the plan's prediction, and its predicted run time against the wall time it took."""
    from launcher.run.attempts import read_attempts

    run = _run_folder(output_dir)
    if run is None:
        return None
    records = read_attempts(run)
    out: dict = {"run": run.name, "attempts": [_attempt_row(r) for r in records]}
    plan = plan_facts(_json(run / "plan.json"))
    out["plan"] = plan
    last = next((r for r in reversed(records) if r.get("status") == "ok"), records[-1] if records else None)
    if last is not None:
        summary = _json(run / str(last.get("attempt_dir")) / "summary.json") or {}
        accuracy = summary.get("accuracy") or {}
        speed = summary.get("speed") or {}
        out.update(
            accuracy_before=accuracy.get("before"),
            accuracy_after=accuracy.get("after"),
            eval_samples=accuracy.get("samples"),
            steps=summary.get("steps"),
            train_s=summary.get("train_seconds"),
            wall_s_attempt=summary.get("wall_seconds"),
            step_s=speed.get("step_s"),
            predicted_step_s=speed.get("predicted_step_s") or (plan or {}).get("predicted_step_s"),
            stopped_by=summary.get("stopped_by"),
            backend=summary.get("backend"),
            generation=summary.get("generation"),
            peak_gib=(summary.get("memory") or {}).get("peak_gib"),
            memory_measure=(summary.get("memory") or {}).get("measure"),
        )
        if isinstance(out["step_s"], (int, float)) and isinstance(out["predicted_step_s"], (int, float)):
            out["step_over_predicted"] = round(out["step_s"] / out["predicted_step_s"], 3)
    if wall_s is not None:
        out["wall_s"] = wall_s
        predicted = (plan or {}).get("predicted_run_s")
        if isinstance(predicted, (int, float)) and predicted > 0:
            out["finish_over_eta"] = round(wall_s / predicted, 3)
    return out


def gain_per_minute(run: dict | None, minutes: float) -> float | None:
    if not run or not isinstance(run.get("accuracy_before"), (int, float)):
        return None
    if not isinstance(run.get("accuracy_after"), (int, float)) or minutes <= 0:
        return None
    return round((run["accuracy_after"] - run["accuracy_before"]) / minutes, 5)


def _walls(work: Path) -> dict:
    """{phase: seconds} the shell script measured (WORK/walls.txt: `phase seconds` lines)."""
    out = {}
    for line in (work / "walls.txt").read_text(encoding="utf-8").splitlines() if (work / "walls.txt").is_file() else []:
        parts = line.split()
        if len(parts) == 2 and re.fullmatch(r"\d+(\.\d+)?", parts[1]):
            out[parts[0]] = float(parts[1])
    return out


def comparison(work: Path, walls: dict, arm_s: float) -> dict:
    """Held-out accuracy gained per minute of the same wall time: the planner's choice against the notebook's
    settings, per seed; the ratio of the summed gains (each arm had the same minutes at every seed)."""
    seeds: list[dict] = []
    for folder in sorted((work / "runs").glob("planner-*")):
        seed = folder.name.removeprefix("planner-")
        planner = run_facts(folder, walls.get(f"planner-{seed}"))
        notebook = run_facts(work / "runs" / f"notebook-{seed}", walls.get(f"notebook-{seed}"))
        row = {
            "seed": seed,
            "budget_minutes_each": round(arm_s / 60.0, 3),
            "planner": _arm(planner, arm_s),
            "notebook": _arm(notebook, arm_s),
        }
        seeds.append(row)
    both = [r for r in seeds if r["planner"]["gain_per_min"] is not None and r["notebook"]["gain_per_min"] is not None]
    ratio = None
    if both:
        mine = sum(r["planner"]["gain_per_min"] for r in both)
        theirs = sum(r["notebook"]["gain_per_min"] for r in both)
        ratio = round(mine / theirs, 3) if theirs > 0 else None
        if theirs <= 0:
            ratio_note = f"the notebook's settings gained {theirs:+.4f} a minute: no ratio (the planner's {mine:+.4f})"
        else:
            ratio_note = f"over {len(both)} seed(s)"
    else:
        ratio_note = "no seed ran both arms"
    return {"seeds": seeds, "ratio": ratio, "ratio_note": ratio_note, "notebook_settings": NOTEBOOK_SETTINGS}


def _arm(run: dict | None, arm_s: float) -> dict:
    """One arm's figures; its gain a minute of the wall time its `train` took (the budget where unmeasured)."""
    if run is None:
        return {"ran": False, "gain_per_min": None}
    keys = ("accuracy_before", "accuracy_after", "steps", "step_s", "stopped_by", "wall_s", "train_s", "eval_samples")
    seconds = run.get("wall_s") or arm_s
    out = {"ran": True, **{k: run.get(k) for k in keys}, "gain_per_min": gain_per_minute(run, seconds / 60.0)}
    settings = (run.get("plan") or {}).get("settings") or {}
    out["settings"] = {
        k: settings.get(k)
        for k in (
            "num_generations",
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
            "max_completion_length",
        )
    }
    return out


def oom_facts(work: Path, walls: dict) -> dict | None:
    """The OOM run: its attempts as attempts.jsonl records them (the OOM, the fallback, the stop and the resume),
    the saved error text and what explain-oom made of it."""
    run = run_facts(work / "runs" / "oom", walls.get("oom"))
    if run is None:
        return None
    attempts = run["attempts"]
    statuses = [a["status"] for a in attempts]
    first_oom = next((i for i, s in enumerate(statuses) if s == "oom"), None)
    run["oom_read"] = first_oom is not None
    run["fell_back"] = first_oom is not None and len(attempts) > first_oom + 1
    run["resumed"] = any(a.get("resumed_from") for a in attempts[1:])
    run["finished"] = bool(statuses) and statuses[-1] == "ok"
    run["oom_text"], run["explain_oom"] = _tail(work / "oom-error.txt"), _tail(work / "explain-oom.txt")
    run["what_if_gib"] = (_json(work / "prepare.json") or {}).get("oom_what_if_gib")
    return run


def summarize(out: Path, work: Path) -> dict:
    from contract.safe_write import write_atomic
    from launcher.memory.ledger import store as ledger_store

    walls = _walls(work)
    prepared = _json(work / "prepare.json") or {}
    arm_s = walls.get("arm_s", 0.0)
    first = f"planner-{int(walls.get('first_seed', 3407))}"
    product = run_facts(work / "runs" / first, walls.get(first))
    after = plan_facts(_json(work / "plan-after.json"))
    summary = {
        "device": prepared.get("device"),
        "card": prepared.get("card"),
        "call_s": walls.get("call_s"),
        "phases_s": {k: v for k, v in walls.items() if k not in ("call_s", "arm_s", "first_seed")},
        "left_out": _left_out(work),
        "plan": plan_facts(_json(out / "plan.json")),
        "plan_tiny": plan_facts(_json(work / "plan-tiny.json")),
        "train": product,
        "comparison": comparison(work, walls, arm_s) if arm_s else None,
        "oom": oom_facts(work, walls),
        "plan_after": after,
        "ledger_entries": len(ledger_store.read(work / "ledger.jsonl")),
    }
    write_atomic(out / "summary.json", json.dumps(summary, indent=2, default=str))
    write_atomic(out / "summary.md", markdown(summary))
    return summary


def _tail(path: Path) -> str | None:
    """The end of a saved text (the whole of a short one), None where the call saved none."""
    return path.read_text(encoding="utf-8", errors="replace")[-4000:] if path.is_file() else None


def _left_out(work: Path) -> list[str]:
    path = work / "left-out.txt"
    return path.read_text(encoding="utf-8").splitlines() if path.is_file() else []


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown(s: dict) -> str:
    lines = ["# The product call", ""]
    card = s.get("card") or {}
    lines.append(
        f"Device: {s.get('device')}; card: {card.get('name', '-')} ({_fmt(card.get('total_gib'), 1)} GiB, "
        f"driver {card.get('driver', '-')}); call {_fmt(s.get('call_s'), 0)} s."
    )
    plan = s.get("plan") or {}
    lines += [
        "",
        "## The plan on this machine (`plan --json`)",
        "",
        f"Chosen: {plan.get('chosen')}; estimate {_fmt(plan.get('estimate_gib'), 2)} GiB; "
        f"predicted {_fmt(plan.get('predicted_step_s'), 2)} s a step.",
    ]
    tiny = s.get("plan_tiny") or {}
    lines.append(f"For the tiny model: {tiny.get('chosen')}, {json.dumps(tiny.get('settings'))}")
    train = s.get("train") or {}
    lines += [
        "",
        "## train (the planner's choice for the tiny model)",
        "",
        "| accuracy before | after | steps | s/step | predicted | ratio | ETA s | wall s | finish/ETA | stopped by |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| {_fmt(train.get('accuracy_before'))} | {_fmt(train.get('accuracy_after'))} | {_fmt(train.get('steps'))} "
        f"| {_fmt(train.get('step_s'))} | {_fmt(train.get('predicted_step_s'))} | "
        f"{_fmt(train.get('step_over_predicted'))} | {_fmt((train.get('plan') or {}).get('predicted_run_s'), 0)} "
        f"| {_fmt(train.get('wall_s'), 0)} | {_fmt(train.get('finish_over_eta'))} | {_fmt(train.get('stopped_by'))} |",
    ]
    comparison = s.get("comparison") or {}
    lines += [
        "",
        "## Learning per minute: the planner against the notebook's settings",
        "",
        "| seed | arm | before | after | steps | gain a minute |",
        "|---|---|---|---|---|---|",
    ]
    for row in comparison.get("seeds", []):
        for arm in ("planner", "notebook"):
            a = row[arm]
            lines.append(
                f"| {row['seed']} | {arm} | {_fmt(a.get('accuracy_before'))} | {_fmt(a.get('accuracy_after'))} "
                f"| {_fmt(a.get('steps'))} | {_fmt(a.get('gain_per_min'), 4)} |"
            )
    lines.append(f"\nRatio (planner / notebook): {_fmt(comparison.get('ratio'))} ({comparison.get('ratio_note')})")
    oom = s.get("oom") or {}
    lines += [
        "",
        "## The out-of-memory, the fallback and the resume (attempts.jsonl)",
        "",
        "| # | profile | status | steps | resumed from | site | asked GiB | free GiB | decided |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for a in oom.get("attempts", []):
        o = a.get("oom") or {}
        lines.append(
            f"| {a.get('attempt')} | {a.get('profile')} | {a.get('status')} | {_fmt(a.get('steps'))} | "
            f"{_fmt(a.get('resumed_from'))} | {_fmt(o.get('site'))} | {_fmt(o.get('asked_gib'), 2)} | "
            f"{_fmt(o.get('free_gib'), 2)} | {_fmt(a.get('decided'))} |"
        )
    if oom.get("oom_text"):
        lines += ["", "The error as saved:", "", "```", oom["oom_text"].strip()[-1500:], "```"]
    after = s.get("plan_after") or {}
    lines += [
        "",
        "## The next plan",
        "",
        f"Chosen: {after.get('chosen')}; measured: {json.dumps(after.get('measured'))}",
    ]
    if s.get("left_out"):
        lines += ["", "## Left out", ""] + [f"- {line}" for line in s["left_out"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("work", type=Path)
    p.add_argument("--cpu", action="store_true")
    n = sub.add_parser("notebook")
    n.add_argument("work", type=Path)
    n.add_argument("plan", type=Path)
    n.add_argument("--cpu", action="store_true")
    m = sub.add_parser("models")
    m.add_argument("seeds", nargs="+", type=int)
    s = sub.add_parser("summarize")
    s.add_argument("out", type=Path)
    s.add_argument("work", type=Path)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        print(json.dumps(prepare(args.work, args.cpu), indent=2))
    elif args.command == "models":
        from tiny_model.build import ensure_tiny

        for seed in args.seeds:  # built before the arms, so that neither pays for it inside its minutes
            print(ensure_tiny("arithmetic", seed=seed))
    elif args.command == "notebook":
        print(write_notebook(args.work, args.plan, args.cpu))
    else:
        summarize(args.out, args.work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
