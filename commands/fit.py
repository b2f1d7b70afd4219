"""`fit MODEL`: the profile of any model that learns most per hour on the card
(found, or --gpu-memory), printed as YAML that loads as it is, led by comment lines saying what it needs, its
predicted seconds per step and prompts per hour and what limits them, what was given up against the ambition
(GiB per lever) and what card the full ambition needs; or one JSON object with --json. Every --set value is
checked as the profile's YAML would be, and a pinned key is never moved: a profile printed here loads back with
exactly the figures it printed."""

from __future__ import annotations

import json
import sys

from commands import options
from contract.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_OUT_OF_MEMORY
from launcher.plan.derive import fit_for_machine
from launcher.plan.levers import OBJECTIVE, STANDBY_FAILURES, objective
from launcher.plan.outcome import Fit
from launcher.plan.settings import settings_of
from launcher.plan.wording import fit_reason, limit_text, pin_problem

SUMMARY = "the profile of any model that learns most per hour on the card, as loadable YAML"
EXAMPLES = (
    "python train.py fit Qwen/Qwen2.5-7B-Instruct --gpu-memory 24",
    "python train.py fit microsoft/phi-4 --gpu-memory 15 --gpu-name 'Tesla T4' --set lora_rank=32",
)


def add_arguments(parser) -> None:
    parser.add_argument("model", metavar="MODEL", help="a hub id ORG/NAME, a local folder or a catalogue name")
    group = parser.add_argument_group("profiles")
    group.add_argument(
        "--profiles-dir",
        metavar="DIR",
        default=str(options.DEFAULT_PROFILES_DIR),
        help="the ladder whose rungs give the ambitions (default: the shipped profiles/)",
    )
    options.add_set(group)
    options.add_card(parser)
    options.add_ledger_choice(parser)
    options.add_json(parser, "the fit")


def run(args) -> int:
    from contract.errors import UsageError
    from profiles.load import load_profiles, parse_overrides
    from profiles.schema import check_value

    overrides = parse_overrides(args.overrides)
    if "model" in overrides and overrides["model"] != args.model:
        raise UsageError(f"fit {args.model} --set model={overrides['model']}: two models; give the model once")
    # each pinned value as the profile's YAML would read it (its type and range), before anything is planned
    pinned = {key: check_value(key, value) for key, value in overrides.items() if key != "model"}
    machine = options.machine_of(args)
    # the rungs with the model only: the other keys set are pinned into each rung's intent by the solver
    rungs = load_profiles(args.profiles_dir, [f"model={args.model}"], device="cuda")
    return print_fit(
        rungs, args.model, machine, pinned=pinned, measurements=options.measurements_of(args), as_json=args.json
    )


def speed_lines(result: Fit) -> list[str]:
    t = result.speed
    if t is None:
        return []
    measured = " (measured on this machine)" if t.measured_s is not None else ""
    lines = [
        f"# predicted: {t.step_s:.1f} s per step{measured} (generation {t.generation_s:.1f}, training "
        f"{t.training_s:.1f}, other {t.sync_s + t.fixed_s:.1f}), {t.prompts_per_hour:.0f} prompts per hour, "
        f"{objective(result.profile, t):.1f} learning per hour ({OBJECTIVE}: the objective)",
        f"# prompts per step limited by {limit_text(result.limited_by)}; the step bound by {t.limited_by}",
    ]
    lines += [f"# note: {note}" for note in t.notes]
    return lines


def run_of(result: Fit):
    """The run the fitted profile would make by default (launcher.plan.duration), or None."""
    if result.profile is None:
        return None
    from launcher.plan.duration import run_length
    from tasks.size import train_rows

    p = result.profile
    rows, basis = train_rows(p.dataset, p.train_samples, config=p.dataset_config or None, split=p.train_split)
    step_s = result.speed.step_s if result.speed is not None else None
    return run_length(p, step_s, p.completions_per_step // p.num_generations, rows=rows, rows_basis=basis)


def fit_text(result: Fit, card: str) -> str:
    """The profile YAML with a header of comments (YAML ignores them: the whole text loads with --profile)."""
    p = result.profile
    assert p is not None, "asked only of a fit that found a profile"
    amb = result.ambition
    prompts = p.completions_per_step // p.num_generations
    lines = [
        f"# {p.name}: derived by `train.py fit` for {card}",
        f"# {fit_reason(result)}",
        f"# {p.num_generations} generations x {prompts} prompt(s) per step of up to {p.max_completion_length} "
        f"tokens (expected {p.expected_completion_length or '-'})"
        + (f" over {p.num_gpus} training GPUs" if p.num_gpus > 1 else ""),
        *speed_lines(result),
        f"# run (max_steps auto): {run_of(result).text()}",
        f"# completion cap: {amb.basis}",
        *(
            [f"# note: vllm_standby pinned with 4-bit weights: {STANDBY_FAILURES}"]
            if p.vllm_standby and p.load_in_4bit
            else []
        ),
        f"# ambition: {amb.text()}",
    ]
    if result.given_up:
        lines.append(
            "# given up against the ambition (each saving counted after the ones above it):"
            if any(not g.gain for g in result.given_up)
            else "# changed from the ambition, memory forcing none of it:"
        )
        width = max(len(g.lever) for g in result.given_up)
        for g in result.given_up:
            lines.append(
                f"#   {g.lever.replace('_', ' '):<{width}}  {g.before:>9} -> {g.after:<9} saves {g.saves_gib:6.2f} GiB"
                + (f" (taken for {g.gain:.2f}x the learning per hour; 16-bit fits too)" if g.gain else "")
            )
    else:
        lines.append("# nothing given up: the full ambition fits")
    lines.append(
        f"# the ambition at one prompt a step needs {result.ambition_need_gib:.2f} GiB: a card of "
        f"{result.card_for_ambition_gib:.1f} GiB or more"
    )
    return "\n".join(lines) + "\n" + p.to_yaml()


def fit_json(result: Fit, card: str) -> dict:
    p = result.profile
    speed = None
    if result.speed is not None:
        speed = result.speed.to_json(result.limited_by)
        speed["bound_by"] = result.speed.limited_by
    return {
        "card": card,
        "usable_gib": round(result.usable_gib, 3),
        "profile": p.to_dict() if p is not None else None,
        "settings": settings_of(p) if p is not None else None,
        "need_gib": None if result.need_gib is None else round(result.need_gib, 3),
        "objective": OBJECTIVE,
        "prompts_per_hour": round(result.speed.prompts_per_hour, 1) if p and result.speed else None,
        "learning_per_hour": round(objective(p, result.speed), 2) if p else None,
        "speed": speed,
        "run": run_of(result).to_json() if p is not None else None,
        "ambition": {
            "source": result.ambition.source,
            "text": result.ambition.text(),
            "completion_basis": result.ambition.basis,
            "need_gib": round(result.ambition_need_gib, 3),
            "card_gib": round(result.card_for_ambition_gib, 1),
        },
        "given_up": [g.to_json() for g in result.given_up],
        "reason": fit_reason(result),
        "pin_problem": pin_problem(result),
    }


def print_fit(rungs, model: str, machine, *, pinned=(), measurements=None, as_json: bool = False) -> int:
    """Solve for `model` on the machine's card from every rung's intent and print the answer: 0 when it fits,
    2 when the pinned keys are why nothing fits (the same search without them finds one), 3 when nothing
    fits at all."""
    gpu = machine.primary
    best = fit_for_machine(rungs, model, machine, pinned=pinned, measurements=measurements)
    card = (
        f"{gpu.name} ({gpu.total_gib:g} GiB)"
        if len(machine.gpus) == 1
        else f"{len(machine.gpus)} x {gpu.name} ({gpu.total_gib:g} GiB each)"
    )
    if best.profile is not None:
        code = EXIT_OK
    else:
        code = EXIT_BAD_INPUT if pin_problem(best) else EXIT_OUT_OF_MEMORY
    if as_json:
        print(json.dumps(fit_json(best, card), indent=2))
    elif best.profile is not None:
        sys.stdout.write(fit_text(best, card))
    else:
        print(f"{model} on {card}: {fit_reason(best)}", file=sys.stderr)
        pins = pin_problem(best)
        if pins:
            print(f"error: {pins} (fix: change or drop those --set values)", file=sys.stderr)
        print(
            f"the ambition ({best.ambition.text()}) needs {best.ambition_need_gib:.2f} GiB at one prompt a step: a "
            f"card of {best.card_for_ambition_gib:.1f} GiB or more",
            file=sys.stderr,
        )
    return code
