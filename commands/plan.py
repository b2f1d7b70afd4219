"""`plan`: what would run on this machine (or a card named with --gpu-memory): every rung of the ladder with
its estimate and verdict, the one chosen, and why (`--json` for machines). Instant: no torch."""

from __future__ import annotations

import json
from typing import Literal

from commands import options
from commands.console import escape as _escape
from commands.console import make_console as _console
from contract.errors import EXIT_OK, EXIT_OUT_OF_MEMORY
from launcher.memory.estimate import Estimate
from launcher.plan.candidate import Plan
from launcher.plan.duration import duration_text
from launcher.plan.margins import GPU_MARGIN_TEXT, HOST_MARGIN_TEXT

SUMMARY = "what would run here, or on a card named with --gpu-memory (instant: no torch)"
EXAMPLES = (
    "python train.py plan",
    "python train.py plan --gpu-memory 24 --gpu-name 'NVIDIA L4'",
    "python train.py plan --set model=Qwen/Qwen2.5-3B-Instruct --json",
    "python train.py plan --nodes 3 --gpus-per-node 8 --gpu-memory 80",
)


def add_arguments(parser) -> None:
    options.add_profiles(parser)
    options.add_card(parser)
    options.add_nodes(parser)
    options.add_hours(parser)
    options.add_ledger_choice(parser)
    options.add_json(parser, "the plan")


def run(args) -> int:
    from profiles.rules import tracker_refusal

    plan, profiles = options.plan_of(args)
    refusal = tracker_refusal(profiles, plan.chosen)  # a note, not a refusal: the plan may be for another machine
    if refusal:
        plan.notes.append(f"`train` on this machine would refuse {refusal}")
    if args.profile is not None and profiles[0].readings:  # a recipe: what was left to TRL, what differs
        from profiles.trl_defaults import recipe_note

        plan.notes.append(recipe_note(profiles[0]))
    return print_plan(plan, as_json=args.json)


def run_cell(cand) -> str:
    """A candidate's run in a table cell: steps, predicted hours, epochs of the data."""
    run = cand.run
    if run is None:
        return "-"
    hours = f", {duration_text(run.hours)}" if run.hours is not None else ""
    epochs = f", {run.epochs:.2f} ep" if run.epochs is not None else ""
    return f"{run.steps:,} steps{hours}{epochs}"


def written_line(cand) -> str | None:
    """A derived rung's settings as written beside what was derived from them, for the keys written `auto`."""
    if not cand.written:
        return None
    from launcher.plan.settings import settings_of

    derived = settings_of(cand.profile)
    keys = [k for k, v in cand.written.items() if v == "auto"]
    return "as written: " + ", ".join(f"{k}: auto -> {derived.get(k)}" for k in keys)


def _shape(profile) -> str:
    weights = "4-bit" if profile.load_in_4bit else ("fp32" if profile.device == "cpu" else "16-bit")
    tune = f"LoRA {profile.lora_rank}" if profile.uses_lora else "full FT"
    gen = f"vLLM {profile.gpu_memory_utilization:g}" if profile.fast_inference else "HF generate"
    if profile.uses_vllm_server:
        gen = f"vLLM server on {profile.vllm_server_gpus} GPU(s), TP {profile.vllm_tensor_parallel}"
    text = f"{weights}, {tune}, {gen}"
    if profile.updates_per_generation > 1:
        text += f", a generation serves {profile.updates_per_generation} steps"
    if profile.num_gpus > 1:
        unit = "processes" if profile.device == "cpu" else "GPUs"
        text += f", {profile.num_gpus} {unit} " + (f"ZeRO-{profile.zero_stage}" if profile.zero_stage else "DDP")
    return text


def chosen_nodes(candidate) -> list[str]:
    """One line per node of the chosen profile: what it does and the GiB one of its GPUs is estimated to hold."""
    from launcher.plan.candidate import nodes_json

    lines = []
    for row in nodes_json(candidate):
        parts = []
        if row.get("training_gpus"):
            parts.append(f"trains on {row['training_gpus']} GPU(s), {row.get('training_gib_per_gpu', '?')} GiB each")
        if row.get("server_gpus"):
            parts.append(f"serves vLLM on {row['server_gpus']} GPU(s), {row.get('server_gib_per_gpu', '?')} GiB each")
        lines.append(f"node {row['node']}: {' and '.join(parts)}")
    return lines


def _top_components(est: Estimate, n: int = 3) -> str:
    parts = sorted(((v, k) for k, v in est.components.items() if v > 0), reverse=True)[:n]
    return ", ".join(f"{k} {v:.1f}" for v, k in parts)


def _speed_line(cand) -> str:
    t = cand.speed
    measured = " (measured on this machine)" if t.measured_s is not None else ""
    card = "" if t.card_known else f"; {t.notes[0]}" if t.notes else ""
    from launcher.plan.candidate import AS_WRITTEN
    from launcher.plan.levers import objective
    from launcher.plan.value import critical_batch, reuse_value
    from launcher.plan.wording import limit_text

    limit = (
        "prompts per step as the profile writes them"
        if cand.limited_by == AS_WRITTEN
        else f"prompts per step limited by {limit_text(cand.limited_by)}"
    )
    return (
        f"predicted: {t.step_s:.1f} s per step{measured} (generation {t.generation_s:.1f}, training "
        f"{t.training_s:.1f}), {t.prompts} prompts a step, {t.prompts_per_hour:.0f} prompts per hour, "
        f"{objective(cand.profile, t):.1f} learning per hour ({t.updates_per_hour:.0f} updates x "
        f"{t.prompts}/({t.prompts} + {critical_batch(cand.profile.device).prompts:g})"
        + (
            f" x {reuse_value(cand.profile.updates_per_generation):g} for updates on an older policy's completions"
            if cand.profile.updates_per_generation > 1
            else ""
        )
        + f"); {limit}; the step bound by "
        f"{t.limited_by}{card}"
    )


def _turns_line(profile) -> str | None:
    """The turns a profile with tools is planned for, in one line."""
    from launcher.plan.turns import turn_plan_of

    turns = turn_plan_of(profile)
    if turns is None:
        return None
    need = profile.max_completion_length - turns.extra_tokens
    room = (
        f"; {need} tokens of max_completion_length {profile.max_completion_length} left for the answer"
        if need > 0
        else f"; max_completion_length {profile.max_completion_length} holds fewer turns: TRL drops replies past it"
    )
    return f"turns: planned for {turns.model_turns} model turns, {turns.basis}{room}"


def _limit_text(cand) -> str:
    """What stopped a candidate's prompts per step, and what bounds its step."""
    if cand.speed is None:
        return "-"
    return f"{cand.limited_by}; step: {cand.speed.limited_by}"


def print_plan(plan: Plan, as_json: bool = False, now=None) -> int:
    """The plan as a table (or one JSON object); 0 when a profile fits, 3 when none does. `now`: the clock the
    finishing time is counted from (datetime.now() unless given)."""
    code = EXIT_OK if plan.chosen is not None else EXIT_OUT_OF_MEMORY
    if as_json:
        print(json.dumps(plan.to_json(), indent=2))
        return code
    from rich.table import Table

    console = _console()
    console.print(plan.machine.message, markup=False, highlight=False)
    for note in plan.notes:
        console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)  # one line, for grep too
    gpu = plan.machine.primary
    where = "GPU" if gpu else "RAM"
    table = Table(title=f"Ladder (lower rung = tried first); {where} margin {plan.margin_gib:.2f} GiB")
    columns: tuple[tuple[str, Literal["left", "right"]], ...] = (
        ("rung", "right"),
        ("profile", "left"),
        ("model", "left"),
        ("set-up", "left"),
        ("batch x acc / gens / completion", "left"),
        ("estimate GiB", "right"),
        ("largest parts (GiB)", "left"),
        ("s/step", "right"),
        ("prompts/h", "right"),
        ("run", "right"),
        ("limited by", "left"),
        ("verdict", "left"),
    )
    for column, justify in columns:
        table.add_column(column, justify=justify, overflow="fold")
    for cand in plan.candidates:
        p = cand.profile
        is_chosen = plan.chosen is not None and p is plan.chosen
        verdict = (
            ("[bold green]CHOSEN[/] " if is_chosen else "")
            + ("[green]" if cand.fits else "[red]")
            + _escape(cand.reason)
            + "[/]"
        )
        table.add_row(
            str(p.ladder),
            p.name,
            p.model.removeprefix("unsloth/"),
            _shape(p),
            f"{p.per_device_train_batch_size} x {p.gradient_accumulation_steps} / {p.num_generations} / "
            f"{p.max_completion_length}",
            f"{cand.estimate.total_gib:.2f}" if cand.estimate else "-",
            _top_components(cand.estimate) if cand.estimate else "-",
            f"{cand.speed.step_s:.1f}" if cand.speed else "-",
            f"{cand.speed.prompts_per_hour:.0f}" if cand.speed else "-",
            run_cell(cand),
            _limit_text(cand),
            verdict,
        )
    console.print(table)
    console.print(GPU_MARGIN_TEXT if gpu else HOST_MARGIN_TEXT, markup=False, highlight=False)
    if plan.chosen is not None:
        console.print(f"chosen: {plan.chosen.name} ({plan.chosen.source})", markup=False, highlight=False)
        chosen = next(c for c in plan.candidates if c.profile is plan.chosen)
        if chosen.speed is not None:
            console.print(_speed_line(chosen), markup=False, highlight=False, soft_wrap=True)
        turns = _turns_line(plan.chosen)
        if turns:
            console.print(turns, markup=False, highlight=False, soft_wrap=True)
        if chosen.run is not None:
            from datetime import datetime

            console.print(
                f"run: {chosen.run.text(now or datetime.now())}", markup=False, highlight=False, soft_wrap=True
            )
        line = written_line(chosen)
        if line:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        if chosen.layout is not None and (chosen.layout.training_nodes > 1 or chosen.layout.server_node):
            for row in chosen_nodes(chosen):
                console.print(f"  {row}", markup=False, highlight=False, soft_wrap=True)
    else:
        console.print(
            "nothing fits: no profile of the ladder fits this machine (exit 3); "
            "try --gpu-memory to see what a larger card would run, or write a smaller profile",
            markup=False,
            highlight=False,
        )
    return code
