"""Rewards from the user's own code: a `rewards:` entry `path/to/file.py:function` or `package.module:function`,
found and checked as any user's code is (usercode), and imported in the attempt. The function takes TRL's reward
signature (prompts, completions, and the dataset's columns as keyword arguments) and returns one float (or None)
per completion. An exception inside it is re-raised as UserRewardError naming the reward and the last frame of
the traceback, so the attempt ends `error` with both.

An `async def` reward (or a callable whose `__call__` is one) stays async once guarded: TRL awaits such rewards
together, on an event loop of its own, while it calls the others one by one. Code that scores outside TRL
(evaluation, `sample`) calls any reward through `scores_now`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import math
import threading
import time
import warnings
from pathlib import Path

from usercode import load as usercode_load
from usercode.entry import UserCodeSpec
from usercode.failure import UserCodeError, last_user_frame, user_trace


class UserRewardError(UserCodeError):
    """A user's reward function failed during training: its name (`reward`), where in the user's code, and
    what it did (raised, returned something that is not a score, ended the process)."""

    def __init__(
        self, name: str, where: str, exc: BaseException | None = None, what: str | None = None, trace: str = ""
    ):
        self.reward = name
        what = f"raised {type(exc).__name__}: {exc}" if what is None else what
        super().__init__(f"reward '{name}'", where, what, trace)


def load(spec: UserCodeSpec):
    """Import the user's function (in the attempt, not the planner) and wrap it so that TRL logs it under
    its own name and a failure inside it names the reward and the user's line. A failure while importing
    (an error at the top of the file, a missing package, sys.exit) is a UserCodeError naming the file."""
    with _running(spec.function, spec.text):
        function = usercode_load.load(spec, f"reward '{spec.function}'", "reward")
    return _guarded(function, spec.function, spec.text)


# Set by the attempt (attach): the folder that holds the marker of a running reward
# (contract.attempt.REWARD_RUNNING_FILE), and how a warning is said. Elsewhere (tests, `sample`): no marker,
# warnings through the warnings module.
_marker_dir: Path | None = None
_say = None


def attach(folder: Path | None, say=None) -> None:
    """Leave REWARD_RUNNING_FILE in folder while the user's code runs, so that a process ended inside it
    (os._exit) is reported as the reward's doing; say warnings with `say`."""
    global _marker_dir, _say
    _marker_dir = Path(folder) if folder is not None else None
    _say = say


class _running:
    """The marker says which rewards are running while any is: async rewards run side by side, so it is
    rewritten as each starts and ends, and removed when the last one ends."""

    def __init__(self, name: str, text: str):
        self.name, self.text = name, text

    def __enter__(self):
        with _active_lock:
            _active.append(self)
            _mark()
        return self

    def __exit__(self, *exc_info):
        with _active_lock:
            _active.remove(self)
            _mark()
        return False


_active: list[_running] = []  # the rewards running now, in the order they started
_active_lock = threading.Lock()  # TRL awaits async rewards on a thread of its own


def _mark() -> None:
    if _marker_dir is None:
        return
    from contract.attempt import REWARD_RUNNING_FILE

    path = _marker_dir / REWARD_RUNNING_FILE
    try:
        if _active:
            names = "', '".join(r.name for r in _active)
            path.write_text(json.dumps({"reward": names, "entry": ", ".join(r.text for r in _active)}))
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass  # only a better message is lost


# A reward slower than this per call is worth a line: every step waits for it.
SLOW_CALL_S = 60.0


def is_async(function) -> bool:
    """Whether calling `function` gives a coroutine, by the test TRL applies to a reward before awaiting it:
    an `async def` (through functools.partial) or a callable object whose `__call__` is one."""
    while isinstance(function, functools.partial):
        function = function.func
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(type(function).__call__)


def scores_now(reward, *args, **kwargs):
    """What `reward` returns, for code that scores outside TRL's loop (evaluation, `sample`): an async
    reward's scores awaited here."""
    result = reward(*args, **kwargs)
    return run_to_end(result) if inspect.isawaitable(result) else result


def run_to_end(awaitable):
    """What `awaitable` gives, run to its end from synchronous code: on a loop of its own in this thread, or
    in a thread of its own when this thread already runs a loop (asyncio.run refuses to nest)."""

    async def wait():
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    box: dict = {}

    def in_thread() -> None:
        try:
            box["result"] = asyncio.run(wait())
        except BaseException as exc:  # handed to the caller as it would have been raised
            box["error"] = exc

    worker = threading.Thread(target=in_thread, name="async reward", daemon=True)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box.get("result")


def _code_of(function):
    while isinstance(function, functools.partial):
        function = function.func
    function = inspect.unwrap(function) if inspect.isfunction(function) else function
    return getattr(function, "__code__", None) or getattr(type(function).__call__, "__code__", None)


def _guarded(function, name: str, entry: str = ""):
    code = _code_of(function)
    slow_said = False

    def failed(exc: BaseException) -> UserRewardError:
        what = f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else None
        trace = user_trace(exc, getattr(code, "co_filename", None))
        return UserRewardError(name, last_user_frame(exc, code), exc, what, trace)

    def checked(scores, started: float, args, kwargs) -> list:
        nonlocal slow_said
        seconds = time.monotonic() - started
        completions = kwargs.get("completions", args[1] if len(args) > 1 else None)
        out = checked_scores(name, scores, completions, kwargs.get("prompts", args[0] if args else None))
        if seconds > SLOW_CALL_S and not slow_said:
            slow_said = True
            _warn(
                f"reward '{name}' took {seconds:.0f} s to score {len(out)} completions; every training step "
                "waits for it"
            )
        return out

    @contextlib.contextmanager
    def guarded():
        """The call marked as running, its failure handed on as the reward's own error."""
        with _running(name, entry or name):
            try:
                yield
            except KeyboardInterrupt as exc:  # a signal's (it passes on), or the reward's own: say whose
                exc.grpo_reward = name
                raise
            except (Exception, SystemExit) as exc:
                raise failed(exc) from exc

    if is_async(function):

        @functools.wraps(function)
        async def reward(*args, **kwargs):
            started = time.monotonic()
            with guarded():
                scores = await function(*args, **kwargs)
            return checked(scores, started, args, kwargs)

    else:

        @functools.wraps(function)
        def reward(*args, **kwargs):
            started = time.monotonic()
            with guarded():
                scores = function(*args, **kwargs)
                if inspect.isawaitable(scores):  # async behind a plain wrapper (a decorator): TRL cannot tell
                    scores = run_to_end(scores)
            return checked(scores, started, args, kwargs)

    reward.__name__ = name
    return reward


def _warn(text: str) -> None:
    if _say is not None:
        _say(f"warning: {text}")
    else:
        warnings.warn(text, UserRewardWarning, stacklevel=3)


class UserRewardWarning(UserWarning):
    """Something a user's reward did that trains poorly, without being an error (slow, nothing scored)."""


def _row_text(index: int, prompts) -> str:
    """`completion 3 (prompt 'What is 2 + ...')`: which row a score belongs to, briefly."""
    text = ""
    try:
        prompt = prompts[index]
        if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
            prompt = prompt[-1].get("content")
        if isinstance(prompt, str):
            text = prompt.strip().replace("\n", " ")
            text = f" (prompt {text[:60] + '...' if len(text) > 60 else text!r})"
    except (IndexError, KeyError, TypeError):
        pass
    return f"completion {index}{text}"


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def checked_scores(name: str, scores, completions, prompts=None) -> list:
    """The reward's return value as TRL needs it, one float or None per completion; UserRewardError naming
    the reward, the completion and the value for anything else. inf and NaN are refused: one of them makes
    the group's advantages NaN, and the step then trains nothing without failing."""

    def refuse(what: str) -> UserRewardError:
        return UserRewardError(name, "its return value", what=what)

    if scores is None or isinstance(scores, (str, bytes, dict)) or not hasattr(scores, "__iter__"):
        raise refuse(
            f"returned {type(scores).__name__} {_shown(scores)}, expected a list with one float (or "
            "None) per completion"
        )
    scores = list(scores)
    if completions is not None and len(scores) != len(completions):
        raise refuse(f"returned {len(scores)} scores for {len(completions)} completions (expected one per completion)")
    out = []
    for index, score in enumerate(scores):
        if score is None:
            out.append(None)
            continue
        if isinstance(score, (str, bytes)):
            raise refuse(
                f"returned the text {_shown(score)} for {_row_text(index, prompts)}; a score is a "
                "number (float(...) it), or None where the reward does not apply"
            )
        try:
            value = float(score)
        except (TypeError, ValueError, OverflowError):
            raise refuse(
                f"returned {type(score).__name__} {_shown(score)} for {_row_text(index, prompts)}; a "
                "score is a number, or None where the reward does not apply"
            ) from None
        if not math.isfinite(value):
            raise refuse(
                f"returned {value} for {_row_text(index, prompts)}; a score must be finite (inf or NaN "
                "makes the group's advantages NaN and the step trains nothing); return None where the "
                "reward does not apply"
            )
        out.append(value)
    if out and all(v is None for v in out) and (name, "none") not in _warned:
        _warned.add((name, "none"))
        _warn(
            f"reward '{name}' returned None for all {len(out)} completions of a batch: it scores nothing there "
            "(said once)"
        )
    return out


_warned: set = set()


# Keywords TRL gives every reward itself, beside the data set's columns
TRL_KEYWORDS = frozenset(
    ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments")
)


def check_columns(reward, columns) -> None:
    """UserRewardError when `reward` needs a keyword that neither TRL nor a column of the data gives: TRL would
    fail it with a TypeError at its first call, after the model has loaded and generated. Names the parameter,
    the columns there and the fix; a signature that cannot be read is left to the call."""
    try:
        parameters = inspect.signature(reward).parameters.values()
    except (TypeError, ValueError):
        return
    given = TRL_KEYWORDS | set(columns)
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    missing = [p.name for p in parameters if p.kind in named and p.default is p.empty and p.name not in given]
    if not missing:
        return
    code = _code_of(reward)
    where = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else "its signature"
    shown_columns = ", ".join(sorted(set(columns) - {"prompt"}))
    raise UserRewardError(
        getattr(reward, "__name__", str(reward)),
        where,
        what=(
            f"needs the argument{'s' if len(missing) > 1 else ''} {', '.join(repr(m) for m in missing)}, which no "
            f"column of the data set gives (the columns reach rewards as: {shown_columns}; `answer` is the gold "
            "answer field's final answer) (fix: name the parameter as the column is named, give it a default, "
            "or set answer_field to the column it reads)"
        ),
    )
