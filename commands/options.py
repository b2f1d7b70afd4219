"""Options several commands share, defined once: the card to plan for, the profiles and their overrides, JSON
output, the output folder; and the plan those options ask for (train, plan and calibrate build it alike)."""

from __future__ import annotations

import argparse
from pathlib import Path

import profiles as _profiles_package

# The shipped ladder: the YAMLs beside the profile schema, wherever the project is installed.
DEFAULT_PROFILES_DIR = Path(_profiles_package.__file__).resolve().parent
# The largest card a plan may assume: far above any GPU made, far below numbers that overflow the estimator.
MAX_GPU_GIB = 4096.0
MAX_GPUS = 4096


def gpu_gib(text: str) -> float:
    """--gpu-memory: a finite, positive number of GiB (nan, inf and 1e308 are refused before planning)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of GiB") from None
    if not (0 < value <= MAX_GPU_GIB):  # also False for nan
        raise argparse.ArgumentTypeError(f"{text}: give the card's memory in GiB, above 0 and at most {MAX_GPU_GIB:g}")
    return value


def _whole_count(option: str, noun: str):
    """The argparse type of `option`: a whole number of `noun` from 1 to MAX_GPUS."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of {noun}") from None
        if not 1 <= value <= MAX_GPUS:
            raise argparse.ArgumentTypeError(f"{option} {text}: must be 1 or more (and at most {MAX_GPUS})")
        return value

    parse.__name__ = f"{noun} count"  # argparse names the type by it in its own errors
    return parse


gpu_count = _whole_count("--gpus", "GPUs")
node_count = _whole_count("--nodes", "nodes")


def add_card(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the card")
    group.add_argument(
        "--gpu-memory",
        metavar="GIB",
        type=gpu_gib,
        help="plan for a card with this much memory instead of the one found",
    )
    group.add_argument(
        "--gpu-name",
        metavar="NAME",
        help="the card's name as NVML reports it or as you write it (e.g. 'Tesla T4', rtx4090): its compute "
        "capability, speed and (without --gpu-memory) memory come from the card table",
    )
    group.add_argument(
        "--gpus",
        metavar="N",
        type=gpu_count,
        help="plan for N GPUs (with --gpu-memory: N such cards; else the first N found)",
    )


def add_nodes(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("several nodes")
    group.add_argument(
        "--nodes",
        metavar="N",
        type=node_count,
        help="plan for N nodes like the card(s) above: the training nodes, and a vLLM server on "
        "the last node of its own for server-mode profiles; says which node does what",
    )
    group.add_argument(
        "--gpus-per-node",
        metavar="G",
        type=gpu_count,
        help="GPUs on each node (the same as --gpus; with --gpu-memory: G such cards)",
    )


def profile_file(text: str) -> str:
    """--profile: a path, never empty (an unset shell variable would otherwise plan the whole ladder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "empty: give a profile YAML (e.g. --profile profiles/cpu-tiny-8gen.yaml), or leave --profile out "
            "for the ladder"
        )
    return text


def folder_path(text: str) -> str:
    """A folder option (--profiles-dir, --output-dir): never empty, which would quietly mean this folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty: give a folder's path (`.` for this one)")
    return text


def add_profiles(parser: argparse.ArgumentParser, one_profile: bool = True) -> None:
    group = parser.add_argument_group("profiles")
    if one_profile:
        group.add_argument(
            "--profile",
            metavar="FILE",
            type=profile_file,
            help="this profile YAML instead of the ladder (with one shrink on OOM)",
        )
    group.add_argument(
        "--profiles-dir",
        metavar="DIR",
        type=folder_path,
        default=str(DEFAULT_PROFILES_DIR),
        help="folder of profile YAMLs that forms the ladder (default: the shipped profiles/)",
    )
    add_set(group)


def add_set(parser) -> None:
    parser.add_argument(
        "--set",
        dest="overrides",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="override a profile key, validated like the YAML (repeatable; `python train.py profiles keys` lists them)",
    )


def add_json(parser: argparse.ArgumentParser, what: str = "the result") -> None:
    parser.add_argument("--json", action="store_true", help=f"print {what} as one JSON object on stdout")


def add_ledger_choice(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ignore-ledger",
        action="store_true",
        help="plan from the estimator alone, not from what this machine measured before",
    )


DEFAULT_OUTPUT_DIR = "outputs"


def budget_hours(text: str) -> float:
    """--hours: a finite, positive number of hours, at most a year."""
    from launcher.plan.duration import MAX_HOURS

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of hours") from None
    if not (0 < value <= MAX_HOURS):  # also False for nan
        raise argparse.ArgumentTypeError(
            f"--hours {text}: give the run's budget in hours, above 0 and at most {MAX_HOURS:g}"
        )
    return value


def add_hours(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--hours",
        metavar="H",
        type=budget_hours,
        help="a wall-clock budget: the run takes the steps the predicted step time fits into H hours (max_steps "
        "and num_train_epochs, when set, win) and stops at H with a checkpoint, the adapter and the report",
    )


def add_output_dir(parser: argparse.ArgumentParser) -> None:
    # no argparse default: a command can tell a folder the user named from the default (output_dir_of)
    parser.add_argument(
        "--output-dir",
        metavar="DIR",
        type=folder_path,
        help=f"where run folders are written (default: {DEFAULT_OUTPUT_DIR})",
    )


def output_dir_of(args) -> str:
    return args.output_dir or DEFAULT_OUTPUT_DIR


def machine_of(args):
    """The machine the options name: this one, or a what-if card (--gpu-memory, --gpu-name, --gpus)."""
    from contract.errors import UsageError
    from launcher.card.detect import detect_machine

    name, memory, from_table = getattr(args, "gpu_name", None), getattr(args, "gpu_memory", None), None
    if name is not None and not name.strip():
        raise UsageError("--gpu-name is empty (fix: the card's name, e.g. --gpu-name 'RTX 4090', or leave it out)")
    if name is not None and memory is None:
        from launcher.card.facts import card_facts, normalized

        card = card_facts(name)
        if card is None and "mig" in normalized(name).split():
            raise UsageError(
                f"--gpu-name {name!r}: no MIG slice of a card in the card table, so its memory is not known (fix: "
                "the card and the slice's profile as `nvidia-smi -L` shows them, e.g. --gpu-name 'NVIDIA H100 80GB "
                "HBM3 MIG 1g.10gb', or add --gpu-memory GIB, the slice's memory)"
            )
        if card is None or card.memory_gib is None:
            raise UsageError(
                f"--gpu-name {name!r}: not in the card table, so its memory is not known (fix: add --gpu-memory "
                "GIB, the card's memory)"
            )
        memory, from_table = card.memory_gib, card
    count, per_node = getattr(args, "gpus", None), getattr(args, "gpus_per_node", None)
    if count is not None and per_node is not None and count != per_node:
        raise UsageError(f"--gpus {count} and --gpus-per-node {per_node} disagree (fix: give one of them)")
    machine = detect_machine(what_if_gib=memory, what_if_name=name, what_if_count=per_node or count)
    if from_table is not None:
        whose = "its MIG profile's" if from_table.sources[0] == "mig" else "its memory in the card table"
        machine.notes.append(f"{from_table.name}: {memory:g} GiB, {whose} (--gpu-memory to say otherwise)")
    return machine


def measurements_of(args):
    """The ledger's records, unless --ignore-ledger."""
    if getattr(args, "ignore_ledger", False):
        return None
    from launcher.memory.ledger.store import read as read_ledger

    return read_ledger()


def plan_request_of(args):
    """The plan the options ask for: the ladder (or --profile FILE) on the machine they name, from the ledger
    unless told not to; a --set model=X of the user's gets configurations derived for it."""
    from contract.errors import UsageError
    from launcher.card.topology import topology
    from launcher.plan.ladder import ladder_rungs
    from launcher.plan.request import PlanRequest
    from profiles.load import load_profile, load_profiles, set_keys

    topology()  # GRPO_* and SLURM's variables are checked on any machine, with or without a GPU
    machine = machine_of(args)
    nodes = getattr(args, "nodes", None)
    if nodes is not None and not machine.gpus:
        raise UsageError(
            f"--nodes {nodes} plans GPU nodes, and this machine has no GPU to take them after ({machine.message}) "
            "(fix: add --gpu-memory GIB, the memory of one of the nodes' cards)"
        )
    named = getattr(args, "profile", None) is not None
    overrides = set_keys(args.overrides)  # checked with each profile as it loads
    left_out: list[str] = []
    if named:
        profiles = [load_profile(args.profile, args.overrides)]
    else:  # a --set is checked against the profiles that can run on this machine
        device = "cuda" if machine.gpus else "cpu"
        profiles = load_profiles(args.profiles_dir, args.overrides, device=device, refused=left_out)
        if not {"tools", "environment"} & set(overrides):
            profiles = ladder_rungs(profiles)  # (with --set tools=..., the user gives the ladder tools)
    return PlanRequest(
        profiles,
        machine,
        model=overrides["model"] if "model" in overrides and not named else None,
        pinned=set(overrides) - {"model"},
        named=named,
        nodes=nodes,
        hours=getattr(args, "hours", None),
        measurements=measurements_of(args),
        left_out=left_out,
    )


def plan_of(args):
    """(plan, the profiles planned) for the options (plan_request_of)."""
    from launcher.plan.choose import make_plan

    plan = make_plan(plan_request_of(args))
    return plan, plan.ladder
