"""One training attempt in this process, from its start to its recorded end: the training stages run
(trainer.stages: load, evaluate, train with GRPO, save, evaluate, report), a failure is classified the
supervisor's way, and the summary is built.

Always leaves its outcome file in the attempt folder (contract.attempt.Outcome, what the supervisor reads)
and returns the exit status of contract.attempt.EXIT_FOR_STATUS, or 2 for bad input.

Under accelerate (several processes) every rank trains, rank 0 alone writes the shared files (metrics,
adapter, summary, report, plots), evaluates and prints progress; rank N > 0 leaves only its own
`outcome-rank<N>.json`, which the supervisor merges with rank 0's.
"""

from __future__ import annotations

import errno
import json
import os
import time
import traceback
from pathlib import Path

from contract import attempt as contract
from contract.attempt import ERROR, EXIT_FOR_STATUS, INTERRUPTED, NODE, OK, OOM, REPLANNED, Outcome
from contract.environment import ENV_INJECT_OOM, ENV_PROBE_ONLY, ENV_RESTART_COUNT
from contract.errors import EXIT_BAD_INPUT, EXIT_FAILURE, UsageError
from contract.failure import write_problem
from contract.safe_write import disk_error_text
from trainer.state import AttemptState, say


def _one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return (lines[0] if lines else "")[:500]


def user_reward_error(exc: BaseException):
    """The failure of the user's own code (a reward; a tool's or an environment's) behind exc (TRL or accelerate
    may wrap it), or None."""
    from usercode.failure import UserCodeError

    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, UserCodeError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def classify(exc: BaseException, folder: Path | None = None, signalled: bool = False) -> tuple[str, str]:
    """(status, one-line error) for an exception raised during an attempt, read the supervisor's way.
    `signalled`: a signal reached the attempt (a KeyboardInterrupt then is its doing)."""
    from contract.errors import SecondSignal
    from contract.failure import DISK_FULL, classify_failure, is_oom_exception, write_fix

    name = type(exc).__name__
    text = str(exc)
    if isinstance(exc, SecondSignal):
        return INTERRUPTED, "stopped by a second signal"
    if isinstance(exc, KeyboardInterrupt):
        if signalled:
            return INTERRUPTED, "stopped by a signal"
        raiser = getattr(exc, "grpo_reward", None)
        by = f"reward '{raiser}'" if raiser else "code the attempt ran (a reward or a library)"
        return ERROR, (
            f"KeyboardInterrupt raised by {by} although no signal was sent; a reward must return "
            "its scores (or raise an ordinary exception)"
        )
    reward_failure = user_reward_error(exc)
    if reward_failure is not None:  # the user's code failed: never read as memory, whatever its text says
        return ERROR, _one_line(str(reward_failure))
    if is_oom_exception(exc):
        return OOM, _one_line(text) or "CUDA out of memory"
    verdict = classify_failure(f"{name}: {text}")
    if verdict != ERROR:
        return verdict, _one_line(text)
    problem = write_problem(exc, folder)
    if problem:
        where = getattr(exc, "filename", None) or folder
        if isinstance(exc, OSError) and exc.errno:
            what = os.strerror(exc.errno)
        elif problem != DISK_FULL or any(w in text for w in ("No space", "StorageFull", "quota")):
            what = _one_line(text)
        else:  # torch's writer on a nearly full disk
            what = f"{os.strerror(errno.ENOSPC)} ({_one_line(text)})"
        inside = folder is None or str(where).startswith(str(folder))  # else a cache: Hugging Face's, ours
        target = (f"the attempt's files to {where}" if inside else f"to {where}") if where else "the attempt's files"
        return ERROR, f"cannot write {target}: {what} {write_fix(problem, Path(where or '.'))}"
    return ERROR, f"{name}: {_one_line(text)}"


def check_writable(attempt_dir: Path, rank: int = 0) -> None:
    attempt_dir.mkdir(parents=True, exist_ok=True)
    probe = attempt_dir / (".write-test" if rank == 0 else f".write-test-rank{rank}")  # ranks check at once
    try:
        with open(probe, "wb") as handle:
            handle.write(b"x" * 4096)
            handle.flush()
            os.fsync(handle.fileno())
    finally:
        probe.unlink(missing_ok=True)


def restart_point(attempt_dir, resume_from: str | None, environ=None) -> tuple[int | None, str | None]:
    """(exit status now, or None to train; the checkpoint to start from) for this process. On several machines
    torch elastic restarts the worker group of a failed attempt (TORCHELASTIC_RESTART_COUNT > 0): a failure no
    restart mends (out of memory, a model that cannot load, a bug, a stop asked for) stands, and this process
    exits with its status at once, writing nothing; after a lost peer the attempt goes on from the newest whole
    checkpoint it saved, not from the start."""
    environ = os.environ if environ is None else environ
    try:
        count = int(environ.get(ENV_RESTART_COUNT) or 0)
    except ValueError:
        count = 0
    if count <= 0:
        return None, resume_from
    earlier = contract.merge_outcomes(Path(attempt_dir))
    if earlier is not None and earlier.status != NODE:
        say(
            f"restart {count} of the attempt's processes: rank {earlier.rank}'s {earlier.status} stands "
            f"({earlier.error or 'no error text'}); not training again"
        )
        return EXIT_FOR_STATUS[earlier.status], resume_from
    newest = contract.latest_checkpoint(Path(attempt_dir))
    if newest is not None and contract.checkpoint_step(newest) > contract.checkpoint_step(resume_from):
        say(f"restart {count} of the attempt's processes after a lost peer: going on from {newest.name}")
        return None, str(newest)
    return None, resume_from


def run_attempt(
    profile, attempt_dir, resume_from=None, resolve_model=None, estimate_gib: float | None = None, after_probe=None
) -> int:
    """Train one attempt of `profile` in `attempt_dir` (see the module docstring for the exit status).

    `resolve_model(profile)` gives (path to load, build record or None): the command that starts the attempt
    knows the project's offline models; `estimate_gib` is the figure the attempt is judged by. `after_probe(
    trainer, loaded)`, in a probe-only attempt, runs after the probe with the model still loaded; the dict it
    returns joins the probe's figures (the measurement kit times a generation wave and a step there)."""
    attempt_dir = Path(attempt_dir)
    from trainer.backends import process_rank, world_size

    rank = process_rank()
    try:
        check_writable(attempt_dir, rank)
    except OSError as exc:
        from contract.failure import write_fix

        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # which disk, and how full
            reason = disk_error_text(exc, attempt_dir).split(": ", 1)[-1]
        say(
            f"error: cannot write to the attempt folder {attempt_dir}: {reason} "
            f"{write_fix(write_problem(exc, attempt_dir), attempt_dir)}",
            error=True,
        )
        return EXIT_FAILURE

    state = AttemptState(
        profile,
        attempt_dir,
        str(resume_from) if resume_from else None,
        main=rank == 0,
        resolve_model=resolve_model,
        estimate_gib=estimate_gib,
    )
    from trainer.signals import StopFlag

    stopper = StopFlag().install()
    state.resolve_model = _interruptible(state.resolve_model, stopper)
    outcome = Outcome(rank=rank, ranks=world_size())
    code = EXIT_FAILURE
    try:
        outcome.status = _train(state, stopper, after_probe)
        code = EXIT_FOR_STATUS[outcome.status]
        if outcome.status == INTERRUPTED:
            outcome.error = f"stopped by a signal; {saved_text(state)}"
    except BaseException as exc:  # every failure must leave an outcome file for the supervisor
        if isinstance(exc, SystemExit):
            raise
        code = _record_failure(outcome, exc, profile.name, rank, attempt_dir, stopper.stopped)
    finally:
        if not _close_outcome(state, outcome):
            code = code or EXIT_FAILURE
        stopper.uninstall()
    return code


# Once the outcome is written the process has nothing left to do but exit; a thread someone's code left running
# (a reward's non-daemon thread) would make the interpreter wait for it forever. This long, then it ends anyway.
EXIT_GRACE_S = 60.0


def end_within_grace(code: int, grace_s: float = EXIT_GRACE_S) -> None:
    """Arm a watchdog (a daemon thread, which never holds the exit up) that ends the process with `code` if it
    has not exited `grace_s` seconds from now, naming the threads still running and where they come from.
    Called once the attempt's outcome is written: the normal exit (joins, atexit) gets its chance first."""
    import sys
    import threading

    def watch() -> None:
        import time

        time.sleep(grace_s)
        stray = [
            t
            for t in threading.enumerate()
            if t is not threading.current_thread() and not t.daemon and t is not threading.main_thread()
        ]
        names = ", ".join(_thread_text(t) for t in stray) or "none left (the interpreter's own teardown hung)"
        try:
            sys.stderr.write(
                f"note: the attempt's outcome is written, but the process has not exited {grace_s:g} s "
                f"later; threads still running: {names}; ending it (exit {code})\n"
            )
            sys.stderr.flush()
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        os._exit(code)

    threading.Thread(target=watch, name="grpo-exit-watchdog", daemon=True).start()


def _thread_text(thread) -> str:
    """A thread's name and the function it runs (module.function), when it still knows it."""
    target = getattr(thread, "_target", None)
    where = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}" if target else "?"
    return f"'{thread.name}' ({where})"


def _interruptible(resolve, stopper):
    """`resolve` (which may build the project's offline model on first use: minutes) in the stop flag's
    "building" phase, where a signal stops at once instead of after the build."""

    def resolve_now(profile):
        if stopper.stopped:
            raise KeyboardInterrupt("stopped before the model was built")
        before = stopper.phase
        stopper.phase = "building"
        try:
            return resolve(profile)
        finally:
            stopper.phase = before

    return resolve_now


def saved_text(state: AttemptState) -> str:
    """What an interrupted attempt leaves to continue from, as it is on disk (not as it was hoped)."""
    adapter = (state.attempt_dir / contract.ADAPTER_DIR).is_dir()
    checkpoint = contract.latest_checkpoint(state.attempt_dir)
    if adapter and checkpoint is not None:
        return f"the adapter and {checkpoint.name} were saved"
    if checkpoint is not None:
        return f"{checkpoint.name} was saved (no adapter)"
    if adapter:
        return "the adapter was saved (no checkpoint)"
    before = f"; `train --resume` continues from {Path(state.resume_from).name}" if state.resume_from else ""
    return f"nothing was saved (it stopped before a checkpoint){before}"


def _record_failure(
    outcome: Outcome,
    exc: BaseException,
    profile_name: str,
    rank: int,
    attempt_dir: Path | None = None,
    signalled: bool = False,
) -> int:
    """Fill the outcome from the exception, say what happened, and return the exit status."""
    status, line = classify(exc, attempt_dir, signalled)
    code = EXIT_FOR_STATUS[status]
    if isinstance(exc, UsageError):
        status, line, code = ERROR, str(exc), EXIT_BAD_INPUT
    outcome.status = status
    outcome.error = line
    outcome.error_text = str(exc) or type(exc).__name__
    outcome.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    who = f"attempt '{profile_name}'" + (f" rank {rank}" if rank else "")
    say(f"{who} ended: {status}: {line}", error=True)
    reward_failure = user_reward_error(exc)
    if reward_failure is not None:
        if reward_failure.trace:  # the user's own frames; the library's around them are in outcome.json
            say(reward_failure.trace, error=True)
    elif status == ERROR and not isinstance(exc, UsageError) and not write_problem(exc, attempt_dir):
        say(outcome.traceback, error=True)  # a bug: the traceback is the report (a full disk is not one)
    return code


def _lengths(state: AttemptState) -> dict | None:
    """The answers' measured lengths for the outcome (and the ledger): the length probe's figures, else the
    training steps' (trainer.answer_lengths), with the chat template's switches they were rendered with."""
    if state.lengths is not None:
        return state.lengths
    from trainer.answer_lengths import training_lengths

    figures = training_lengths(state.length_recorder, _metric_rows(state), state.profile.max_completion_length)
    return {**figures, "switches": dict(state.switches)} if figures else None


def _metric_rows(state: AttemptState) -> list[dict]:
    """The attempt's metrics.jsonl lines (a line cut short by a kill is passed over)."""
    rows = []
    try:
        with open(state.attempt_dir / contract.METRICS_FILE, encoding="utf-8") as handle:
            for line in handle:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        return []
    return [r for r in rows if isinstance(r, dict)]


def _timing(state: AttemptState) -> dict | None:
    """The measured seconds per step beside the plan's prediction, from the attempt's metrics.jsonl."""
    from trainer.timing import measured_step

    rows = []
    try:
        with open(state.attempt_dir / contract.METRICS_FILE, encoding="utf-8") as handle:
            for line in handle:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    continue  # a line cut short by a kill
    except OSError:
        return None
    return measured_step([r for r in rows if isinstance(r, dict)], state.predicted_step_s)


def _close_outcome(state: AttemptState, outcome: Outcome) -> bool:
    """Complete the outcome with what the attempt reached and write it; False when it could not be written."""
    outcome.steps = state.steps
    outcome.checkpoint = contract.relative_path(state.latest_checkpoint(), state.attempt_dir)  # folder may move
    outcome.estimate_gib = state.estimate_gib
    outcome.probe = state.probe
    outcome.timing = _timing(state)
    outcome.lengths = _lengths(state)
    outcome.stopped_by = state.stopped_by
    if state.memory is not None and state.measures_peak:
        try:
            state.memory.sample()
        except Exception:  # a last sample is a nicety; the peak so far stands
            pass
        outcome.peak_gib = round(state.memory.peak_gib, 4)
        outcome.peak_measure = state.memory.measure
    try:
        outcome.write(state.attempt_dir, outcome.rank)
    except OSError as exc:
        say(
            f"error: the attempt ended {outcome.status}, but its {contract.outcome_name(outcome.rank)} is not "
            f"written: {disk_error_text(exc, state.attempt_dir, len(outcome.to_json()))}",
            error=True,
        )
        return False
    return True


def _train(state: AttemptState, signals, after_probe=None) -> str:
    """Load, evaluate, train, finish; the status. A signal between stages stops with what was saved."""
    from trainer.inject import parse_inject
    from trainer.ranks import join_ranks, wait_for_ranks
    from trainer.stages import (
        build_trainer,
        evaluate_rows,
        finish,
        load,
        load_trained_checkpoint,
        nothing_left_to_train,
        probe,
        train,
    )

    parse_inject(os.environ.get(ENV_INJECT_OOM))  # refuse a malformed value before anything loads
    if state.resume_from:
        problem = contract.checkpoint_problem(Path(state.resume_from))
        if problem:
            raise UsageError(
                f"--resume-from {state.resume_from}: cannot resume from it: {problem} (fix: give an "
                "earlier checkpoint-N, or `python train.py train --resume`, which picks the newest whole one)"
            )
        say(f"resuming from {Path(state.resume_from).name} (step {contract.checkpoint_step(state.resume_from)})")
    loaded = load(state)
    state.phase_done("load")
    if signals.stopped:
        return INTERRUPTED
    if os.environ.get(ENV_PROBE_ONLY) == "1":  # `calibrate`: the probe's figures are all it wants
        session = build_trainer(state, loaded, signals)  # the probe drives the trainer's own loss
        probe(state, loaded, asked=True)
        if after_probe is not None and state.probe is not None and not signals.stopped:
            state.probe = {**state.probe, **after_probe(session.trainer, loaded)}
        say("probe only: stopping before training")
        return OK
    if state.main:  # the answers measured before the plan's cap and expected length are trusted
        from trainer.answer_lengths import run_length_probe, stops_for_replan

        if stops_for_replan(state, run_length_probe(state, loaded)):
            return REPLANNED
        state.phase_done("length_probe")
        if signals.stopped:
            return INTERRUPTED
    join_ranks(loaded.backend.device == "cpu")  # every rank in the process group before rank 0 evaluates alone
    from evaluation.generate import EvaluationStopped

    try:
        # under accelerate the ranks must meet at the barrier below: rank 0 evaluates to its end
        evaluated = time.time()
        before = evaluate_rows(state, loaded, loaded.eval_rows, signals=None if state.profile.distributed else signals)
        state.eval_seconds = time.time() - evaluated  # the final evaluation takes about as long (trainer.budget)
        state.phase_done("evaluation_before")
    except EvaluationStopped:
        return INTERRUPTED
    wait_for_ranks()
    if signals.stopped:
        return INTERRUPTED
    session = build_trainer(state, loaded, signals)
    if session.best is not None:  # the best so far: before training, or kept by the attempt resumed
        session.best.start(before, state.resume_from)
    if nothing_left_to_train(state):
        load_trained_checkpoint(state, session)
        return finish(state, loaded, session, before, 0.0, signals)
    signals.phase = "probe"
    probe(state, loaded)  # an OOM here is the attempt's OOM, before any step is spent
    state.phase_done("probe")
    if signals.stopped:
        return INTERRUPTED
    signals.phase = "training"
    train_seconds = train(state, session)
    state.phase_done("training")
    return finish(state, loaded, session, before, train_seconds, signals)
