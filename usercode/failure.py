"""HOW a failure of the user's code is reported: what failed, the user's own line, what it did, and the user's
own frames of the traceback (what the user can act on, without the library frames around them)."""

from __future__ import annotations

import traceback


class UserCodeError(RuntimeError):
    """The user's code failed where the run cannot go on without it: the attempt ends `error` naming `label`
    (`reward 'f'`, `environment Guess`), where in the user's code, and what it did; `trace` is the user's own
    frames, which the attempt prints."""

    def __init__(self, label: str, where: str, what: str, trace: str = ""):
        self.label = label
        self.where = where
        self.trace = trace
        super().__init__(f"{label} {what} (at {where})")


def raised_text(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r})"
    return f"{type(exc).__name__}: {exc}"


def last_user_frame(exc: BaseException, code) -> str:
    """Where the user's code failed: the last frame in the function's own file (a library it called may have
    raised deeper down); when none is there the call itself failed (its arguments), so the function's line."""
    own_file = getattr(code, "co_filename", None)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if own_file and f.filename == own_file]
    if frames:
        return f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}"
    if code is not None:
        return f"{own_file}:{code.co_firstlineno}, calling {code.co_name}"
    return "unknown"


def user_trace(exc: BaseException, own_file: str | None) -> str:
    """The traceback's frames in the user's own file, and the error line."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if own_file and f.filename == own_file]
    lines = [f'  File "{f.filename}", line {f.lineno}, in {f.name}\n    {(f.line or "").strip()}' for f in frames]
    return "\n".join(lines + [f"{type(exc).__name__}: {exc}"])


def failed_in(label: str, exc: BaseException, code, what: str) -> UserCodeError:
    """The report of `exc`, raised inside the user's function or class whose code object is `code`."""
    return UserCodeError(label, last_user_frame(exc, code), what, user_trace(exc, getattr(code, "co_filename", None)))
