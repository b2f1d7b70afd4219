"""`train` (the default command): plan for this machine's GPU (or CPU), then train the chosen profile in a
child process per attempt, shrinking or falling back on out-of-memory, resuming from the last checkpoint.
`--profile FILE` trains one profile instead of the ladder; `--resume` continues the latest run. On several
machines every training machine runs the same command: machine 0 plans and decides, the others follow it
(docs/scale-out.md)."""

from __future__ import annotations

from pathlib import Path

from commands import options

SUMMARY = "plan for this machine and train, falling back on OOM (the default command)"
EXAMPLES = (
    "python train.py train",
    "python train.py train --profile profiles/gpu-16gb-gemma3-1b.yaml --set max_steps=50",
    "python train.py train --resume",
    "python train.py train --resume outputs/latest",
)


def add_arguments(parser) -> None:
    options.add_profiles(parser)
    options.add_output_dir(parser)
    options.add_hours(parser)
    run = parser.add_argument_group("the run")
    run.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=False,
        metavar="RUN",
        help="continue a run from its last checkpoint: alone, the latest run in --output-dir; or "
        "RUN, a run folder (outputs/latest, outputs/run-...)",
    )
    run.add_argument(
        "--fresh-attempt",
        action="store_true",
        help="with --resume: start the run's next attempt over at step 1 (e.g. after --set "
        "lora_rank=N, which its checkpoint cannot take); the checkpoints are kept",
    )
    options.add_card(parser)
    options.add_ledger_choice(parser)


def run(args) -> int:
    from contract.errors import UsageError
    from launcher.run.folder import check_output_dir

    if args.resume and args.profile:
        raise UsageError(
            "--resume continues the latest run with its own profiles, and --profile names another; "
            "give one of them (fix: `train --resume`, or `train --profile FILE` for a new run)"
        )
    if args.fresh_attempt and not args.resume:
        raise UsageError("--fresh-attempt only applies to --resume (a new run starts at step 1 anyway)")
    if isinstance(args.resume, str):  # --resume RUN: that run, which becomes the output folder's latest
        from launcher.run.folder import point_latest, run_folder_of

        run_dir = run_folder_of(Path(args.resume))
        args.output_dir, args.resume = str(run_dir.parent), True
        problem = point_latest(run_dir.parent, run_dir)
        if problem:
            raise UsageError(f"--resume: {problem}")
    check_output_dir(Path(args.output_dir), must_exist=args.resume)
    from launcher.card.topology import topology

    if topology().machine_rank > 0:  # machine 0 plans and decides for every machine; this one follows
        from launcher.run.follow import follow_run

        return follow_run(Path(args.output_dir))
    plan, profiles = options.plan_of(args)
    for profile in profiles:
        if profile.readings:  # a TRL / open-r1 configuration: say so once, and where the details are
            source = profile.source.removesuffix(" with --set")
            print(
                f"note: {source} is read as a TRL / open-r1 configuration ({len(profile.readings)} of its "
                f"keys in their names; `python train.py profiles check {source}` says how each was "
                "read)",
                flush=True,
            )
    from launcher.run.inputs import check_run_inputs

    check_run_inputs(profiles, plan, gpu_memory=args.gpu_memory, resume=args.resume)
    from launcher.run.supervise import supervise

    return supervise(
        plan,
        output_dir=Path(args.output_dir),
        overrides=args.overrides,
        resume=args.resume,
        fresh_attempt=args.fresh_attempt,
        hours=args.hours,
    )
