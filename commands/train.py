"""`train` (the default command): plan for this machine's GPU (or CPU), then train the chosen profile in a
child process per attempt, shrinking or falling back on out-of-memory, resuming from the last checkpoint.
`--profile FILE` trains one profile instead of the ladder; `--resume` continues the latest run (beside
`--profile FILE`, as the job script resubmits it, that file must name the run's profile). On several
machines every training machine runs the same command: machine 0 plans and decides, the others follow it
(docs/scale-out.md)."""

from __future__ import annotations

from pathlib import Path

from commands import options
from contract.shell import quoted

SUMMARY = "plan for this machine and train, falling back on OOM (the default command)"
EXAMPLES = (
    "python train.py train",
    "python train.py train --profile profiles/gpu-16gb-gemma3-1b.yaml --set max_steps=50",
    "python train.py train --resume",
    "python train.py train --resume outputs/latest",
    "python train.py train --resume outputs/latest --set max_steps=400",
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
        "RUN, a run folder (outputs/latest, outputs/run-...); a finished run trains on with --set max_steps=N "
        "above the steps it trained",
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
    from launcher.run.request import RunRequest, check_fresh_attempt, machine_command

    check_fresh_attempt(args.fresh_attempt, args.resume)
    resume_dir = None
    if isinstance(args.resume, str):  # --resume RUN: that run, which becomes the output folder's latest
        from launcher.run.folder import run_folder_of

        resume_dir = run_folder_of(Path(args.resume))
        if args.output_dir is not None and Path(args.output_dir).absolute() != resume_dir.parent.absolute():
            raise UsageError(
                f"--resume {args.resume} continues a run of {resume_dir.parent}, and --output-dir names "
                f"{args.output_dir}: a run stays in its folder (fix: drop --output-dir, or give "
                f"--output-dir {quoted(resume_dir.parent)})"
            )
        args.output_dir, args.resume = str(resume_dir.parent), True
    output_dir = Path(options.output_dir_of(args))
    check_output_dir(output_dir, must_exist=args.resume)
    from launcher.card.topology import topology

    plan, profiles = options.plan_of(args)  # on a follower too: its own command line is checked (exit 2)
    named = profiles[0].name if args.profile is not None else None
    if topology().machine_rank > 0:  # machine 0 plans and decides for every machine; this one follows
        from launcher.run.follow import follow_run

        return follow_run(output_dir, command=machine_command(args.overrides, named))
    if args.profile is not None and not plan.machine.gpus and profiles[0].device != "cpu":
        # bad input, not "nothing fits": no card of any size is here to train it on
        raise UsageError(
            f"--profile {args.profile}: '{profiles[0].name}' trains on a GPU (device: {profiles[0].device}), and "
            f"this machine has none ({plan.machine.message}) (fix: a cpu profile, e.g. --profile "
            f"profiles/cpu-tiny-8gen.yaml, or `python train.py plan --profile {quoted(args.profile)} "
            "--gpu-memory GIB` to see it on a card)"
        )
    for profile in profiles:
        if profile.readings:  # a TRL / open-r1 configuration: say so once, and where the details are
            from profiles.trl_defaults import recipe_note

            print(f"note: {recipe_note(profile)}", flush=True)
    from launcher.run.inputs import check_run_inputs

    check_run_inputs(
        profiles, plan, gpu_memory=args.gpu_memory, resume=args.resume, gpu_name=getattr(args, "gpu_name", None)
    )
    from launcher.run.supervise import supervise
    from launcher.run.supervisor import written_keys

    request = RunRequest(
        output_dir,
        overrides=tuple(args.overrides or ()),
        resume=args.resume,
        resume_dir=resume_dir,
        fresh_attempt=args.fresh_attempt,
        # with --resume, the job script's --profile FILE names the run's profile: checked against the run
        named_profile=named,
        hours=args.hours,
        # `--profile FILE` runs the file as written: its keys are pinned as --set ones are
        pinned=written_keys(args.profile) if args.profile is not None else frozenset(),
    )
    return supervise(plan, request)
