"""A tool cannot take the run down: each call of a tool (or of an environment's method) is guarded so that

- whatever goes wrong inside it (an exception, `sys.exit`, the time limit) leaves it as a ToolFailed, an
  ordinary exception that TRL's multi-turn loop turns into the tool message `{'error': '...'}` the model reads
  and counts in its `tools/failure_frequency` (evaluation.turns does the same);
- a call that runs past its time limit is stopped (an alarm raises inside it);
- what it returns is text of at most MAX_OUTPUT_CHARS characters, cut with a note beyond that;
- what it prints to stdout or stderr is kept out of the run's output (and counted, said once).

TRL calls the tools itself, in its own multi-turn loop (`_tool_call_loop`); the guarded function keeps the
tool's name, signature, type hints and docstring, which TRL and transformers read to describe the tool to the
model. A signal the run itself receives (Ctrl-C, SIGTERM) is never swallowed.

The time limit uses SIGALRM, so it holds where the tool runs in the main thread of a Unix process, as TRL runs
synchronous tools; elsewhere the call runs unbounded (said once). The limit does not depend on the tool's
cooperation: a tool that swallows the stop (a bare `except:`) is raised into again every REPEAT_S; UNWIND_AFTER_S
later each line it runs raises (a trace function on its frames), which no handler of its own survives; and a call
still running END_AFTER_S past its limit (stuck inside one long C call, a huge regular expression) ends the
process, saying which tool, rather than hold the run for good.

An `async def` tool (or method) is run to its end here, under the same limits (TRL calls the guarded tool as a
synchronous one): the model reads what it returns, never a coroutine. TRL itself would gather the async calls
of one message on an event loop in a thread of its own, which no alarm reaches; guarded, they run one after
another in the main thread, where the time limit holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import io
import os
import signal
import sys
import threading
import time
import typing
import warnings

from usercode.failure import failed_in, last_user_frame, raised_text

TIME_LIMIT_S = 10.0  # a tool call's wall-clock limit
MAX_OUTPUT_CHARS = 2000  # characters of a tool's result the model is shown
MAX_CAPTURED_CHARS = 10_000  # printed characters kept while a call runs (the rest is counted, not kept)
# After the limit, the alarm fires again this often while the tool keeps going (code that catches the first)
REPEAT_S = 0.5
# Past the limit, a tool still running this long swallows the stop: every line it runs raises from then on
UNWIND_AFTER_S = 2.0
# Past the limit, a call still running this long cannot be stopped from inside the process: it ends
END_AFTER_S = 30.0
# Frames never raised into while a tool is unwound: the guard's own, and the machinery it runs tools with
_NEVER_UNWOUND = ("tools.guard", "asyncio", "contextlib", "threading", "selectors")


class ToolFailed(Exception):
    """A guarded tool call that failed; its text is what the model is told (TRL writes it as the reply)."""


class ToolTimeout(BaseException):
    """Raised inside a tool that ran past its limit: a BaseException, so `except Exception` in the tool
    does not swallow it."""


class ToolRecord:
    """What the guarded calls did, over the run: calls, failures (an error, a timeout), cut outputs and
    printed characters, by tool name. The trainer reads it for the report; tests read it too."""

    def __init__(self):
        self.calls: dict[str, int] = {}
        self.failures: dict[str, int] = {}
        self.timeouts: dict[str, int] = {}
        self.cut: dict[str, int] = {}
        self.printed: dict[str, int] = {}
        self.said: set = set()

    def add(self, table: dict, name: str, count: int = 1) -> None:
        table[name] = table.get(name, 0) + count

    def to_json(self) -> dict:
        return {
            "calls": dict(self.calls),
            "failures": dict(self.failures),
            "timeouts": dict(self.timeouts),
            "outputs_cut": dict(self.cut),
            "printed_chars": dict(self.printed),
        }


RECORD = ToolRecord()  # the run's: its training and evaluations, what summary.json counts
# Where a tool guarded without a record of its own counts a call now: RECORD, unless inside apart()
_COUNTING: contextvars.ContextVar[ToolRecord | None] = contextvars.ContextVar("tool record", default=None)
_say = None


def counting() -> ToolRecord:
    """The record a call of a tool guarded without one of its own is counted in: RECORD, or apart()'s."""
    scoped = _COUNTING.get()
    return RECORD if scoped is None else scoped


@contextlib.contextmanager
def apart():
    """Calls made inside (in this thread) of tools guarded without a record of their own are counted in a
    record of their own (yielded), not in RECORD: work of the process that is not the run's (building the tiny
    tool model tries the tools) stays out of the run's counts."""
    record = ToolRecord()
    token = _COUNTING.set(record)
    try:
        yield record
    finally:
        _COUNTING.reset(token)


def attach(say=None) -> None:
    """Say the guard's one-off notes with `say` (the attempt's output); else through warnings."""
    global _say
    _say = say


def _note(key, text: str, record: ToolRecord | None = None) -> None:
    record = counting() if record is None else record
    if key in record.said:
        return
    record.said.add(key)
    if _say is not None:
        _say(f"note: {text}")
    else:
        warnings.warn(text, ToolNote, stacklevel=3)


class ToolNote(UserWarning):
    """Something a tool did that the run survived (it printed, its output was cut, it could not be timed)."""


def shown_text(result, limit: int = MAX_OUTPUT_CHARS) -> tuple[str, bool]:
    """A tool's result as the text the model is shown, at most `limit` characters; (text, cut)."""
    text = result if isinstance(result, str) else repr(result) if not isinstance(result, (int, float)) else str(result)
    if len(text) <= limit:
        return text, False
    note = f" [output cut at {limit:,} of {len(text):,} characters]"
    return text[: max(0, limit - len(note))] + note, True


class _Alarm:
    """Raise ToolTimeout in the main thread `limit_s` from now, then every REPEAT_S until cleared; UNWIND_AFTER_S
    past the limit, make every line of the tool's own frames raise it (a tool that catches everything cannot
    keep going); END_AFTER_S past it, end the process (the watchdog thread)."""

    def __init__(self, limit_s: float | None, name: str = "tool"):
        self.limit_s = limit_s
        self.name = name
        self.armed = False
        self.previous = None
        self.started = 0.0
        self.home = None  # the frame that calls the tool: the unwinding stops there
        self.unwinding = False
        self.previous_trace = self.previous_profile = None

    def __enter__(self):
        usable = (
            self.limit_s is not None
            and self.limit_s > 0
            and hasattr(signal, "setitimer")
            and threading.current_thread() is threading.main_thread()
        )
        if not usable:
            return self
        if signal.getitimer(signal.ITIMER_REAL)[0] > 0:
            return self  # someone else's timer runs: leave it alone
        self.previous = signal.signal(signal.SIGALRM, self._fire)
        self.started = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, self.limit_s, REPEAT_S)
        self.armed = True
        _WATCHDOG.begin(self.name, self.started + self.limit_s + END_AFTER_S)
        return self

    def call(self, function, args, kwargs):
        """function(*args, **kwargs), an awaitable it returns awaited, in a frame the unwinding stops at."""
        self.home = sys._getframe()
        try:
            result = function(*args, **kwargs)
            if inspect.isawaitable(result):
                result = _awaited(result, self.limit_s if not self.armed else None)
            return result
        finally:
            unwound, self.unwinding = self.unwinding, False  # first: the trace and profile functions stand down
            if self.armed:  # done: no alarm may reach the guard's own clean-up
                signal.setitimer(signal.ITIMER_REAL, 0)
            if unwound:
                sys.setprofile(self.previous_profile)
                sys.settrace(self.previous_trace)

    def _fire(self, signum, frame):
        if self.home is not None and time.monotonic() - self.started >= (self.limit_s or 0.0) + UNWIND_AFTER_S:
            self._unwind(frame)  # again at each alarm: a tool may have switched it off
        raise ToolTimeout()

    def _unwind(self, frame) -> None:
        """From now on each line the tool runs (in the frames between the call and `frame`, and in any it
        starts) raises ToolTimeout, so a handler that swallows one meets the next on its own first line.
        Python switches a trace function off at the first exception it raises: a profile function (called at
        every call the tool makes, raising nothing) switches it on again."""
        if not self.unwinding:
            self.unwinding = True
            self.previous_trace, self.previous_profile = sys.gettrace(), sys.getprofile()
        self._trace_from(frame)
        sys.setprofile(self._rearm)

    def _trace_from(self, frame) -> None:
        while frame is not None and frame is not self.home:
            if not _spared(frame):
                frame.f_trace = self._raise
            frame = frame.f_back
        sys.settrace(self._raise)

    def _raise(self, frame, event, arg):
        if not self.unwinding or _spared(frame):
            return None
        if event in ("call", "line"):
            raise ToolTimeout()
        return self._raise

    def _rearm(self, frame, event, arg) -> None:
        if self.unwinding and sys.gettrace() is None:
            self._trace_from(frame)

    def __exit__(self, *exc_info):
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous or signal.SIG_DFL)
            _WATCHDOG.end()
        return False


def _spared(frame) -> bool:
    module = frame.f_globals.get("__name__") or ""
    return any(module == name or module.startswith(name + ".") for name in _NEVER_UNWOUND)


def _awaited(awaitable, limit_s: float | None):
    """What an async tool's awaitable returns, run to its end here. In a thread without a running event loop
    (where TRL calls tools) it runs in this thread, under the caller's alarm; beside a running loop, in a thread
    of its own, given `limit_s` (the caller's alarm cannot reach it there)."""

    async def run():
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run())
    box: dict = {}

    def in_thread() -> None:
        try:
            box["result"] = asyncio.run(asyncio.wait_for(run(), limit_s) if limit_s else run())
        except BaseException as exc:  # handed to the caller as it would have been raised
            box["error"] = exc

    worker = threading.Thread(target=in_thread, name="async tool", daemon=True)
    worker.start()
    worker.join()
    if "error" in box:
        if isinstance(box["error"], (asyncio.TimeoutError, TimeoutError)):
            raise ToolTimeout()
        raise box["error"]
    return box.get("result")


class _Watchdog:
    """One thread, started with the first timed call: a call still running at its deadline (a tool no alarm
    reaches: inside one long C call, or defeating the unwinding) ends the process, saying which tool; the
    supervisor reads that line as the attempt's error."""

    def __init__(self):
        self.lock = threading.Lock()
        self.deadline: float | None = None
        self.name = ""
        self.thread: threading.Thread | None = None

    def begin(self, name: str, deadline: float) -> None:
        with self.lock:
            self.name, self.deadline = name, deadline
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._watch, name="tool watchdog", daemon=True)
                self.thread.start()

    def end(self) -> None:
        with self.lock:
            self.deadline = None

    def _watch(self) -> None:
        while True:
            time.sleep(REPEAT_S)
            with self.lock:
                late = self.deadline is not None and time.monotonic() > self.deadline
                name = self.name
                if late:
                    self.deadline = None
            if late:
                _end_process(
                    f"\nerror: the tool {name} ran {END_AFTER_S:g} s past its time limit and could not be stopped "
                    "(stuck inside one long call, or catching every stop); the attempt ends (fix: bound the work "
                    f"the tool {name} does, and catch Exception, never everything, inside it)\n"
                )


def _end_process(text: str) -> None:
    from contract.errors import EXIT_FAILURE

    try:
        os.write(2, text.encode("utf-8", "replace"))
    except OSError:
        pass
    os._exit(EXIT_FAILURE)


_WATCHDOG = _Watchdog()


class _Printed(io.TextIOBase):
    """Stands in for stdout / stderr during a call: keeps the first characters, counts the rest."""

    def __init__(self):
        self.kept: list[str] = []
        self.count = 0

    def writable(self) -> bool:
        return True

    def write(self, text) -> int:
        text = str(text)
        if self.count < MAX_CAPTURED_CHARS:
            self.kept.append(text[: MAX_CAPTURED_CHARS - self.count])
        self.count += len(text)
        return len(text)


def guarded(function, name: str | None = None, time_limit_s: float | None = TIME_LIMIT_S, record=None):
    """`function` as a tool TRL may call with whatever the model wrote: never raises (but for the run's own
    signals), stops past `time_limit_s`, returns text of at most MAX_OUTPUT_CHARS characters. Its name,
    signature, type hints and docstring are the function's. Its calls are counted in `record`, else where
    counting() says at the time of each call."""
    name = name or getattr(function, "__name__", "tool")
    code = getattr(inspect.unwrap(function), "__code__", None)
    own = record

    @functools.wraps(function)
    def tool(*args, **kwargs):
        record = counting() if own is None else own
        record.add(record.calls, name)
        printed = _Printed()
        started = time.monotonic()
        alarm = _Alarm(time_limit_s, name)
        try:
            with alarm, contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                result = alarm.call(function, args, kwargs)
                text, cut = shown_text(result)
        except ToolTimeout:
            record.add(record.failures, name)
            record.add(record.timeouts, name)
            raise ToolFailed(f"the tool {name} ran past its limit of {time_limit_s:g} s and was stopped") from None
        except KeyboardInterrupt:
            raise  # the run's own stop (a signal), or code that imitates one: it is not the tool's to keep
        except (Exception, SystemExit) as exc:
            record.add(record.failures, name)
            what = f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, ValueError):  # a ValueError is the tool refusing its input; others are bugs
                _note(
                    ("raised", name),
                    f"tool {name} raised {type(exc).__name__} (at {last_user_frame(exc, code)}); the "
                    "model is told the error and training goes on (said once)",
                    record,
                )
            raise ToolFailed(shown_text(what)[0]) from None
        finally:
            if printed.count:
                record.add(record.printed, name, printed.count)
                _note(
                    ("printed", name),
                    f"tool {name} printed {printed.count} characters; a tool's output reaches "
                    "the model only through what it returns, so printing is kept out of the run (said once)",
                    record,
                )
            if time_limit_s and not alarm.armed and time.monotonic() - started > time_limit_s:
                _note(
                    ("untimed", name),
                    f"tool {name} ran {time.monotonic() - started:.0f} s outside the main "
                    "thread, where its time limit cannot stop it (said once)",
                    record,
                )
        if cut:
            record.add(record.cut, name)
            _note(
                ("cut", name),
                f"tool {name} returned more than {MAX_OUTPUT_CHARS:,} characters; the model is "
                "shown the first ones (said once)",
                record,
            )
        return text

    try:  # resolved now, in the tool's own module: the guard's module could not resolve its names later
        tool.__annotations__ = typing.get_type_hints(function)
    except Exception:
        pass
    return tool


def guarded_environment(factory, name: str | None = None, time_limit_s: float | None = TIME_LIMIT_S):
    """A factory whose environments TRL may use as it does the user's: the same public methods (its tools),
    each guarded like a tool; `reset` and `get_reward` are the user's own, and a failing `reset` ends the
    attempt as usercode's UserCodeError naming the environment's line (an environment that cannot start has nothing to
    offer the model)."""
    name = name or getattr(factory, "__name__", "environment")
    cls = factory if isinstance(factory, type) else None

    def make():
        try:
            instance = factory()
        except KeyboardInterrupt:
            raise
        except (Exception, SystemExit) as exc:
            raise failed_in(
                f"environment {name}", exc, _code_of(factory), f"could not be created: {raised_text(exc)}"
            ) from exc
        return _wrap_instance(instance, name, time_limit_s)

    make.__name__ = name
    make.environment_class = cls
    return make


_WRAPPED: dict[type, type] = {}


def _wrap_instance(instance, name: str, time_limit_s):
    """The instance as one of a subclass whose public methods are guarded and whose reset names failures."""
    base = type(instance)
    wrapped = _WRAPPED.get(base)
    if wrapped is None:
        members = {}
        for member, value in inspect.getmembers(base, predicate=inspect.isfunction):
            if member.startswith("_") or member == "get_reward":
                continue
            if member == "reset":
                members[member] = _guarded_reset(value, name)
            else:
                members[member] = guarded(value, member, time_limit_s)
        wrapped = type(base.__name__, (base,), {**members, "__module__": base.__module__, "__doc__": base.__doc__})
        _WRAPPED[base] = wrapped
    try:
        instance.__class__ = wrapped
    except TypeError:  # a class whose instances cannot change class (slots, builtins): unguarded, said once
        _note(
            ("unwrapped", name),
            f"environment {name}: its methods could not be guarded (its class does not allow "
            "it); an error in one of them ends the attempt",
        )
    return instance


def _guarded_reset(reset, name: str):
    code = getattr(inspect.unwrap(reset), "__code__", None)

    @functools.wraps(reset)
    def guarded_reset(self, *args, **kwargs):
        try:
            return reset(self, *args, **kwargs)
        except KeyboardInterrupt:
            raise
        except (Exception, SystemExit) as exc:
            row = ", ".join(f"{k}={str(v)[:40]!r}" for k, v in list(kwargs.items())[:4])
            raise failed_in(
                f"environment {name}",
                exc,
                code,
                f"reset failed: {raised_text(exc)} (row: {row or 'none'}); fix its reset for such rows, or "
                "leave them out of the data",
            ) from exc

    return guarded_reset


def _code_of(factory):
    target = factory.__init__ if isinstance(factory, type) else factory
    return getattr(inspect.unwrap(target), "__code__", None)
