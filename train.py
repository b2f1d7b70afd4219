#!/usr/bin/env python3
"""grpo-train: GRPO fine-tuning that fits itself to your GPU.

    python train.py --auto              plan for this machine's GPU (or CPU), then train, surviving OOM
    python train.py --auto --dry-run    show the plan only (add --json for machines)
    python train.py --profile profiles/NAME.yaml [--set KEY=VALUE ...]

Planning imports no torch: it is instant on any machine. Training runs in a child process per attempt.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_PROFILES_DIR = HERE / "profiles"


# The largest card a plan may assume: far above any GPU made, far below numbers that overflow the estimator.
MAX_GPU_GIB = 4096.0


def gpu_gib(text: str) -> float:
    """--gpu-memory: a finite, positive number of GiB (nan, inf and 1e308 are refused before planning)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of GiB") from None
    if not (0 < value <= MAX_GPU_GIB):  # also False for nan
        raise argparse.ArgumentTypeError(f"{text}: give the card's memory in GiB, above 0 and at most "
                                         f"{MAX_GPU_GIB:g}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command line; long but flat (one statement per flag), its epilog generated from the profile schema
    and the reward registry."""
    from launcher.profile.help import schema_help
    from rewards import describe as describe_rewards

    rewards_help = "\n".join(f"    {name}: {text}" for name, text in describe_rewards().items())
    epilog = (
        "profile keys (in a profile YAML, or on the command line as --set KEY=VALUE):\n"
        f"{schema_help()}\n\n"
        "rewards (the `rewards` key maps these names to weights):\n"
        f"{rewards_help}\n\n"
        "exit status: 0 done; 2 bad input (profile, flag, data path); 3 nothing fits or every attempt ran\n"
        "out of memory; 130 interrupted; 1 any other failure.\n\n"
        "examples:\n"
        "  python train.py --auto --dry-run                   what would run on this machine\n"
        "  python train.py --auto --dry-run --gpu-memory 24   what would run on a 24 GiB card\n"
        "  python train.py --fit-table                        the profile each common card gets\n"
        "  python train.py --profile profiles/gpu-16gb-gemma3-1b.yaml --set max_steps=50\n"
        "  python train.py --explain-oom error.txt            read a CUDA OOM and say what to change\n"
        "  python train.py --sample outputs/run-...           answers of the trained model, with their rewards\n"
    )
    parser = argparse.ArgumentParser(
        prog="train.py",
        description="GRPO fine-tuning (Unsloth + vLLM + TRL) that picks the profile your GPU can hold "
                    "and falls back instead of crashing on CUDA out-of-memory.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    what = parser.add_argument_group("what to run")
    what.add_argument("--auto", action="store_true",
                      help="read the GPU, pick the most ambitious profile that fits, train, fall back on OOM")
    what.add_argument("--profile", metavar="FILE", help="train this profile YAML (with one shrink on OOM)")
    what.add_argument("--profiles-dir", metavar="DIR", default=str(DEFAULT_PROFILES_DIR),
                      help="folder of profile YAMLs that forms the ladder (default: profiles/ beside train.py)")
    what.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
                      help="override a profile key, validated like the YAML (repeatable)")
    what.add_argument("--output-dir", metavar="DIR", default="outputs",
                      help="where run folders are written (default: %(default)s)")
    what.add_argument("--resume", action="store_true",
                      help="continue the latest run in --output-dir from its last checkpoint")
    what.add_argument("--fresh-attempt", action="store_true",
                      help="with --resume: start the run's next attempt over at step 1 (e.g. after --set "
                           "lora_rank=N, which its checkpoint cannot take); the checkpoints are kept")

    plan = parser.add_argument_group("planning")
    plan.add_argument("--dry-run", action="store_true",
                      help="print the plan and stop (instant, no torch); alone it plans the ladder like --auto")
    plan.add_argument("--json", action="store_true",
                      help="with --dry-run, --fit-table or --ledger: one JSON object on stdout")
    plan.add_argument("--gpu-memory", metavar="GIB", type=gpu_gib,
                      help="plan for a card with this much memory instead of the one found")
    plan.add_argument("--gpu-name", metavar="NAME", help="with --gpu-memory: the card's name in the plan")
    plan.add_argument("--gpus", metavar="N", type=int,
                      help="plan for N GPUs (with --gpu-memory: N such cards; else the first N found): "
                           "a multi-GPU profile is chosen only when its GPUs are there")
    plan.add_argument("--fit", action="store_true",
                      help="with --set model=ORG/NAME: print the most ambitious profile of that model that fits the "
                           "card (YAML that loads with --profile) and what was given up, then stop")
    plan.add_argument("--fit-table", action="store_true",
                      help="print which profile the ladder gives common cards, then stop")
    plan.add_argument("--ignore-ledger", action="store_true",
                      help="plan from the estimator alone, not from what this machine measured before")
    plan.add_argument("--ledger", action="store_true",
                      help="print what this machine measured per shape against the estimate, and each record's "
                           "effect on its plans, then stop")
    plan.add_argument("--forget", metavar="PROFILE|FINGERPRINT|all",
                      help="remove these records from the ledger (a profile name, a fingerprint shown by --ledger "
                           "--json, or all), then stop")
    plan.add_argument("--calibrate", action="store_true",
                      help="measure the ladder here: the worst-case probe alone for every rung that fits and "
                           "the first above them, each in its own process; the next --auto plans from it")
    plan.add_argument("--random-weights", action="store_true",
                      help="with --calibrate: probe each rung's architecture with random weights built from the "
                           "catalogue's facts (nothing downloaded); the ledger marks these measurements")
    plan.add_argument("--explain-oom", metavar="FILE",
                      help="read a CUDA OOM error (file, or - for stdin) and explain what to change")

    use = parser.add_argument_group("using the result")
    use.add_argument("--sample", metavar="RUN_DIR_OR_ADAPTER",
                     help="load a trained adapter (a run folder: its last finished attempt) and print answers "
                          "with their reward scores")
    use.add_argument("--prompt", metavar="TEXT", help="with --sample: answer this question")
    use.add_argument("--from-test", metavar="N", type=int, default=None,
                     help="with --sample: answer the first N test questions (default 3)")

    # Used by the supervisor to run one attempt in this process; not for people.
    parser.add_argument("--attempt-dir", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--resume-from", metavar="CHECKPOINT", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    from contract.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, UsageError

    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        check_flags(args)
        return run(args, parser)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:  # Ctrl-C before the run's own handlers are in place: nothing to save yet
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def check_flags(args: argparse.Namespace) -> None:
    """Refuse flags that contradict each other, and an --output-dir that cannot hold a run, before anything
    starts (exit 2): a silent choice between two modes runs what the user did not ask for."""
    from contract.errors import UsageError

    if args.attempt_dir:
        return  # the supervisor's own command for one attempt
    modes = {"--auto": args.auto, "--profile": args.profile, "--resume": args.resume,
             "--fit-table": args.fit_table, "--explain-oom": args.explain_oom, "--dry-run": args.dry_run,
             "--calibrate": args.calibrate}
    conflicts = [("--auto", "--profile"), ("--resume", "--profile"), ("--explain-oom", "--auto"),
                 ("--explain-oom", "--profile"), ("--explain-oom", "--resume"), ("--explain-oom", "--fit-table"),
                 ("--explain-oom", "--dry-run"), ("--fit-table", "--auto"), ("--fit-table", "--profile"),
                 ("--fit-table", "--resume"), ("--calibrate", "--resume"), ("--calibrate", "--fit-table")]
    for first, second in conflicts:
        if modes[first] and modes[second]:
            raise UsageError(f"{first} and {second} ask for two different things; give one of them")
    if args.fit and (args.auto or args.profile or args.resume or args.fit_table or args.explain_oom):
        raise UsageError("--fit prints a profile and stops; give it alone, with --set model=ORG/NAME")
    if args.forget is not None:
        others = [flag for flag, given in modes.items() if given] + (["--ledger"] if args.ledger else []) \
            + (["--fit"] if args.fit else [])
        if others:
            raise UsageError(f"--forget removes ledger records and stops; {others[0]} asks for something else "
                             "(fix: run --forget alone first)")
    if args.random_weights and not args.calibrate:
        raise UsageError("--random-weights only applies to --calibrate (a training run needs the real weights)")
    if args.fresh_attempt and not args.resume:
        raise UsageError("--fresh-attempt only applies to --resume (a new run starts at step 1 anyway)")
    if not (args.dry_run or args.fit_table or args.explain_oom or args.fit):
        from launcher.run.folder import check_output_dir

        check_output_dir(Path(args.output_dir), must_exist=args.resume)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    code = run_single_purpose(args)
    if code is not None:
        return code
    from contract.errors import UsageError

    if not (args.auto or args.profile or args.resume or args.dry_run or args.calibrate):
        parser.print_usage(sys.stderr)
        raise UsageError("choose --auto (fit the ladder to this machine) or --profile FILE")
    # `--dry-run` and `--resume` alone mean the ladder (so `docker run grpo-train --dry-run` plans).
    return plan_and_train(args)


def run_single_purpose(args: argparse.Namespace) -> int | None:
    """The modes that neither plan nor train (explain an OOM, sample, the ledger, the fit table) and the
    supervisor's one-attempt command; None when args ask for none of them."""
    from contract.errors import EXIT_INTERRUPTED, UsageError
    from launcher.profile.load import load_profile, load_profiles

    if args.explain_oom:
        from launcher.oom.explain import explain_file
        return explain_file(args.explain_oom)
    if args.gpu_name and args.gpu_memory is None:
        raise UsageError("--gpu-name needs --gpu-memory GIB (the card's memory)")
    if args.json and not (args.dry_run or args.fit_table or args.fit or args.ledger):
        raise UsageError("--json only applies to --dry-run, --fit, --fit-table and --ledger")
    if args.sample:
        from trainer.sample import sample_main
        return sample_main(args.sample, prompt=args.prompt, from_test=args.from_test, overrides=args.overrides)
    if args.prompt is not None or args.from_test is not None:
        raise UsageError("--prompt and --from-test go with --sample RUN_DIR_OR_ADAPTER")
    if args.attempt_dir:  # one attempt, in this process: what the supervisor runs in a child
        if not args.profile:
            raise UsageError("--attempt-dir needs --profile FILE")
        from trainer.run import run_attempt
        from trainer.signals import exit_on_signal

        code = run_attempt(load_profile(args.profile, args.overrides), Path(args.attempt_dir),
                           resume_from=args.resume_from)
        exit_on_signal(EXIT_INTERRUPTED)  # the outcome is written: nothing left to save
        return code
    if args.forget is not None:
        from launcher.memory.ledger import forget_main
        return forget_main(args.forget)
    if args.ledger:
        from launcher.card.detect import probe
        from launcher.memory.ledger import print_ledger
        return print_ledger(probe(), as_json=args.json)
    if args.fit:
        return fit_main(args)
    if args.fit_table:
        from launcher.plan.view import print_fit_table
        return print_fit_table(load_profiles(args.profiles_dir, args.overrides), as_json=args.json)
    return None


def plan_and_train(args: argparse.Namespace) -> int:
    """Plan for this machine (from the ledger unless told not to); print it, calibrate, or supervise the run."""
    from launcher.card.detect import probe
    from launcher.plan.choose import make_plan
    from launcher.plan.view import print_plan
    from launcher.profile.load import load_profile, load_profiles, parse_overrides

    gpu = probe(what_if_gib=args.gpu_memory, what_if_name=args.gpu_name, what_if_count=args.gpus)
    if args.profile:
        profiles = [load_profile(args.profile, args.overrides)]
    else:  # a --set is checked against the profiles that can run on this machine
        profiles = load_profiles(args.profiles_dir, args.overrides, device="cuda" if gpu.gpus else "cpu")
    measurements = None
    if not args.ignore_ledger:
        from launcher.memory.ledger import read as read_ledger
        measurements = read_ledger()
    fit_notes = []
    if gpu.gpus and not args.profile and "model" in parse_overrides(args.overrides):
        # a model of the user's: derive its configurations from the rungs' intents instead of borrowing theirs
        from launcher.plan.derive import derive_ladder
        profiles, fit_notes = derive_ladder(profiles, parse_overrides(args.overrides)["model"], gpu,
                                            pinned=set(parse_overrides(args.overrides)) - {"model"},
                                            measurements=measurements)
    # a profile the user named is never refused by the ledger, only warned about
    plan = make_plan(profiles, gpu, measurements=measurements, ledger_refuses=not args.profile)
    plan.notes.extend(fit_notes)
    if args.calibrate:
        from launcher.memory.calibrate import calibrate, print_calibration_plan
        if args.dry_run:
            return print_calibration_plan(plan, as_json=args.json)
        return calibrate(plan, output_dir=Path(args.output_dir), random_weights=args.random_weights)
    if args.dry_run:
        return print_plan(plan, as_json=args.json)

    from launcher.run.inputs import check_run_inputs
    check_run_inputs(profiles, plan, gpu_memory=args.gpu_memory, resume=args.resume)
    from launcher.run.supervise import supervise
    return supervise(plan, output_dir=Path(args.output_dir), overrides=args.overrides, resume=args.resume,
                     fresh_attempt=args.fresh_attempt)


def fit_main(args: argparse.Namespace) -> int:
    """--fit: the most ambitious profile of the --set model that fits the card (found, or --gpu-memory)."""
    from contract.errors import UsageError
    from launcher.card.detect import probe
    from launcher.plan.fit_view import print_fit
    from launcher.profile.load import load_profiles, parse_overrides

    overrides = parse_overrides(args.overrides)
    if "model" not in overrides:
        raise UsageError("--fit needs the model to fit (fix: --set model=ORG/NAME, a local folder or a "
                         "catalogue name)")
    machine = probe(what_if_gib=args.gpu_memory, what_if_name=args.gpu_name, what_if_count=args.gpus)
    measurements = None
    if not args.ignore_ledger:
        from launcher.memory.ledger import read as read_ledger
        measurements = read_ledger()
    # the rungs with the model only: the other keys set are pinned into each rung's intent by the solver
    rungs = load_profiles(args.profiles_dir, [f"model={overrides['model']}"], device="cuda")
    pinned = {key: value for key, value in overrides.items() if key != "model"}
    return print_fit(rungs, overrides["model"], machine, pinned=pinned, measurements=measurements,
                     as_json=args.json)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # during the first imports, before main's own handling
        sys.exit(130)
