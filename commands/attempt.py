"""The supervisor's per-attempt command (hidden from help): one attempt of a profile in this process, in
the attempt folder the supervisor made. It resolves the model to load (the project's offline models are
built here, not in the trainer) and the estimate the attempt is judged by, then hands both to the trainer."""

from __future__ import annotations

from pathlib import Path

SUMMARY = "one attempt in this process (the supervisor's command; not for people)"
HIDDEN = True


def add_arguments(parser) -> None:
    parser.add_argument("--profile", metavar="FILE", required=True)
    parser.add_argument("--attempt-dir", metavar="DIR", required=True)
    parser.add_argument("--resume-from", metavar="CHECKPOINT")
    from commands.options import add_set

    add_set(parser)


def run(args) -> int:
    return run_one_attempt(args.profile, args.overrides, args.attempt_dir, args.resume_from)


def attempt_estimate(profile) -> float | None:
    """The memory estimate this attempt is judged by: the supervisor's (it knew the card), else, for an
    attempt started by hand, the estimator's from the profile alone."""
    from contract.attempt import estimate_from_env

    given = estimate_from_env()
    if given is not None:
        return given
    from launcher.memory.estimate import estimate

    try:
        return round(float(estimate(profile).total_gib), 4)
    except Exception as exc:  # an estimate is a comparison figure, never a reason to stop training
        print(f"note: no memory estimate for '{profile.name}' ({type(exc).__name__}: {exc})", flush=True)
        return None


def model_to_load(profile) -> tuple[str, dict | None]:
    """(path for from_pretrained, the project's build record or None) for the profile's model."""
    from tiny_model.source import resolve_model

    source = resolve_model(profile)
    return source.path, source.built


def with_run_length(profile):
    """The profile with max_steps resolved: the supervisor writes the plan's steps into every attempt's
    profile; one started by hand with max_steps auto takes the run length the plan would give it without a
    predicted step (num_train_epochs, else one epoch of the training split, else the stated default)."""
    if profile.max_steps:
        return profile
    from launcher.plan.duration import run_length
    from tasks.size import train_rows

    rows, basis = train_rows(
        profile.dataset, profile.train_samples, config=profile.dataset_config or None, split=profile.train_split
    )
    prompts = profile.completions_per_step // profile.num_generations
    run = run_length(profile, None, prompts, rows=rows, rows_basis=basis)
    return profile.model_copy(update={"max_steps": run.steps})


def run_one_attempt(profile_file: str, overrides: list[str], attempt_dir: str, resume_from: str | None) -> int:
    from contract.errors import EXIT_INTERRUPTED
    from profiles.load import load_profile
    from trainer.run import end_within_grace, restart_point, run_attempt
    from trainer.signals import exit_on_signal

    profile = with_run_length(load_profile(profile_file, overrides))
    code, resume_from = restart_point(Path(attempt_dir), resume_from)
    if code is not None:  # a restart inside a multi-node attempt whose failure stands
        return code
    code = run_attempt(
        profile,
        Path(attempt_dir),
        resume_from=resume_from,
        resolve_model=model_to_load,
        estimate_gib=attempt_estimate(profile),
    )
    exit_on_signal(EXIT_INTERRUPTED)  # the outcome is written: nothing left to save
    end_within_grace(code)  # nor anything to wait for: a thread left running must not hold the exit
    return code
