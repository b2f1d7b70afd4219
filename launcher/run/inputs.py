"""WHAT a run needs beyond valid profiles, checked before its folder exists (exit 2 on bad input): a GPU
behind --gpu-memory, the profile names in GRPO_INJECT_OOM, the tracker packages `report_to` names, and the
chosen profile's training data, read here so that bad rows are refused before any model loads."""

from __future__ import annotations

import os
import sys

from contract.attempt import parse_inject
from contract.environment import ENV_INJECT_OOM
from contract.errors import UsageError
from contract.shell import quoted


def check_inject(profiles: list, environ=None) -> None:
    """GRPO_INJECT_OOM must be well formed and name only profiles of this run."""
    raw = (os.environ if environ is None else environ).get(ENV_INJECT_OOM, "")
    try:
        targets = parse_inject(raw)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    known = sorted({p.name for p in profiles})
    for name in targets:
        if name not in known:
            raise UsageError(
                f"{ENV_INJECT_OOM}={raw!r}: no profile named {name!r} (known: {', '.join(known)}) "
                "(fix: NAME[@STEP|@probe][,...] with these names)"
            )


def check_run_inputs(profiles: list, plan, gpu_memory: float | None, resume: bool, gpu_name: str | None = None) -> None:
    """Raise UsageError for what would fail the run later; print what the data check found."""
    if gpu_memory is not None or gpu_name:
        from launcher.card.detect import detect_machine

        here = detect_machine()
        if not here.gpus:
            given = " ".join(
                part
                for part in (
                    f"--gpu-memory {gpu_memory:g}" if gpu_memory is not None else "",
                    f"--gpu-name {quoted(gpu_name)}" if gpu_name else "",
                )
                if part
            )
            raise UsageError(
                f"{given}: `train` trains on this machine, and it has no GPU ({here.message}) (fix: `python "
                f"train.py plan {given}` plans for that card, with the same options beside it; or drop "
                f"{'them' if gpu_memory is not None and gpu_name else 'it'} to train on what is here)"
            )
    check_inject(profiles)
    from profiles.rules import missing_tracker

    first = [plan.chosen] if plan.chosen is not None else []  # the rung that would run is the one named
    for profile in first + [p for p in profiles if p is not plan.chosen]:
        problem = missing_tracker(profile)
        if problem:
            raise UsageError(f"{profile.source or profile.name}: key 'report_to': {problem}")
    if plan.chosen is None or resume:
        return
    if plan.chosen.hub_model_id:
        # said now, not after hours of training (the push itself only notes a failure and keeps the files)
        what = "the merged model (save_merged)" if plan.chosen.save_merged else "the adapter"
        if os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"):
            text = (
                f"note: when '{plan.chosen.name}' ends, {what} is pushed to "
                f"https://huggingface.co/{plan.chosen.hub_model_id} (a private repository unless it exists) "
                "(to keep it on disk only: --set push_to_hub=false)"
            )
        else:
            text = (
                f"note: '{plan.chosen.name}' pushes to {plan.chosen.hub_model_id} when it ends, but HF_TOKEN is "
                "not set: the result will stay on disk only (fix: export HF_TOKEN=<a write token> before the run, "
                "or set hub_model_id to empty)"
            )
        print(text, file=sys.stderr, flush=True)
    from tasks import check_data

    # the attempt reads the data again; for the built-in tasks and local files this is quick
    try:
        found = check_data(plan.chosen)
    except UsageError:
        raise
    except Exception:  # not about the data's content (the hub unreachable...): the attempt reports it
        return
    print(f"data for '{plan.chosen.name}': {found}", flush=True)
