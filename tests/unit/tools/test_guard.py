"""A tool cannot take the run down: whatever a tool does (raise, hang, return 10 MB, print, exit), the guarded
call returns bounded text or fails as one ordinary exception, which TRL's multi-turn loop turns into the reply
`{'error': ...}` (its `except Exception`), and the run's own signals still pass. Environments likewise, and one
whose reset fails is named with its line."""

from __future__ import annotations

import sys
import textwrap
import time

import pytest

from rewards.tool_use import TOOL_ERROR_PREFIX, call_figures, tool_ok
from tools import check_environment_starts, load_environment, load_tools
from tools.guard import MAX_OUTPUT_CHARS, ToolFailed, ToolRecord, guarded
from usercode.failure import UserCodeError


def _raises(expression: str) -> str:
    """Fails.

    Args:
        expression: anything
    """
    raise RuntimeError("the tool broke")


def _spins(expression: str) -> str:
    """Never returns, and swallows ordinary exceptions on the way.

    Args:
        expression: anything
    """
    while True:
        try:
            time.sleep(0.01)
        except Exception:
            pass


def _sleeps(expression: str) -> str:
    """Sleeps for an hour.

    Args:
        expression: anything
    """
    time.sleep(3600)
    return "late"


def _floods(expression: str) -> str:
    """Returns 10 MB.

    Args:
        expression: anything
    """
    return "x" * (10 * 1024 * 1024)


def _prints(expression: str) -> str:
    """Prints to stdout and stderr, then answers.

    Args:
        expression: anything
    """
    print("PRINTED-BY-TOOL " * 1000)
    print("ERR-BY-TOOL", file=sys.stderr)
    return "12"


def _exits(expression: str) -> str:
    """Calls sys.exit.

    Args:
        expression: anything
    """
    sys.exit(3)


def _returns_object(expression: str):
    """Returns a dict.

    Args:
        expression: anything
    """
    return {"value": 12}


@pytest.fixture
def record():
    return ToolRecord()


def trl_reply(tool, **arguments) -> str:
    """What TRL's _tool_call_loop makes of one call: the result as text, or {'error': ...} for an Exception."""
    try:
        result = tool(**arguments)
    except Exception as exc:
        result = {"error": str(exc)}
    return str(result)


# The limit of a tool that returns at once: one only a hang reaches, however busy the machine (the hanging tools
# have limits of their own, short: what they test)
RETURNS_S = 60


def test_a_raising_tool_becomes_a_tool_message(record):
    tool = guarded(_raises, time_limit_s=RETURNS_S, record=record)
    with pytest.warns(UserWarning, match="raised RuntimeError"):
        reply = trl_reply(tool, expression="1")
    assert reply == f"{TOOL_ERROR_PREFIX}'RuntimeError: the tool broke'}}"
    assert record.failures == {"_raises": 1} and record.calls == {"_raises": 1}
    assert issubclass(ToolFailed, Exception)  # what TRL's `except Exception` catches


@pytest.mark.parametrize("hang", [_spins, _sleeps], ids=["spins", "sleeps"])
def test_a_hanging_tool_is_stopped_at_its_limit(record, hang):
    tool = guarded(hang, time_limit_s=0.3, record=record)
    reply = trl_reply(tool, expression="1")
    assert reply.startswith(TOOL_ERROR_PREFIX) and "ran past its limit of 0.3 s and was stopped" in reply
    assert record.timeouts == {hang.__name__: 1}
    assert guarded(_returns_object, time_limit_s=RETURNS_S, record=record)(expression="1") == "{'value': 12}"


def test_a_flood_is_cut_to_the_output_bound(record):
    tool = guarded(_floods, time_limit_s=RETURNS_S, record=record)
    with pytest.warns(UserWarning, match="more than"):
        reply = tool(expression="1")
    assert len(reply) == MAX_OUTPUT_CHARS
    assert reply.endswith(f"[output cut at {MAX_OUTPUT_CHARS:,} of {10 * 1024 * 1024:,} characters]")
    assert record.cut == {"_floods": 1}


def test_printing_is_kept_out_of_the_run(record, capfd):
    tool = guarded(_prints, time_limit_s=RETURNS_S, record=record)
    with pytest.warns(UserWarning, match="printed"):
        assert tool(expression="1") == "12"
    out, err = capfd.readouterr()
    assert "PRINTED-BY-TOOL" not in out and "ERR-BY-TOOL" not in err
    assert record.printed["_prints"] == len("PRINTED-BY-TOOL " * 1000) + len("ERR-BY-TOOL") + 2


def test_sys_exit_in_a_tool_is_a_message(record):
    with pytest.warns(UserWarning, match="raised SystemExit"):
        assert trl_reply(guarded(_exits, record=record), expression="1") == f"{TOOL_ERROR_PREFIX}'called sys.exit(3)'}}"


def test_the_runs_own_stop_passes_through(record):
    def stopped(expression: str) -> str:
        """Stop.

        Args:
            expression: anything
        """
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        guarded(stopped, record=record)(expression="1")


def test_the_guarded_tool_describes_itself_as_the_tool_does():
    from transformers.utils import get_json_schema

    from tools.calculator import calculate

    assert get_json_schema(guarded(calculate)) == get_json_schema(calculate)


def test_the_shipped_reward_reads_failed_calls():
    good = [
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "calculate"}}]},
        {"role": "tool", "name": "calculate", "content": "12"},
        {"role": "assistant", "content": "<answer>12</answer>"},
    ]
    bad = [good[0], {"role": "tool", "name": "calculate", "content": "{'error': 'division by zero'}"}]
    unknown = [good[0], {"role": "tool", "name": "nope", "content": "{'error': 'Tool nope not found.'}"}]
    assert tool_ok([good, bad, unknown, "plain text", None]) == [1.0, 0.0, 0.0, 1.0, 0.0]
    assert call_figures(bad) == {"calls": 1, "answered": 1, "failed": 1}


ENVIRONMENTS = '''
class Breaks:
    """Its reset fails on odd answers."""

    def reset(self, answer=None, **row):
        if int(answer) % 2:
            raise KeyError("odd")

    def peek(self, number: int) -> str:
        """Raises.

        Args:
            number: anything
        """
        raise ZeroDivisionError("inside a method")


class WontStart:
    def __init__(self):
        raise OSError("no server")

    def reset(self, **row):
        pass
'''


@pytest.fixture
def environment_file(tmp_path):
    path = tmp_path / "envs.py"
    path.write_text(textwrap.dedent(ENVIRONMENTS), encoding="utf-8")
    return path


def test_an_environment_whose_reset_fails_is_named_with_its_line(environment_file):
    factory = load_environment(f"{environment_file}:Breaks")
    check_environment_starts(factory, [{"answer": "2"}])  # starts on an even answer
    with pytest.raises(UserCodeError) as caught:
        check_environment_starts(factory, [{"answer": "2"}, {"answer": "3"}])
    text = str(caught.value)
    assert "environment Breaks reset failed: KeyError: 'odd'" in text
    assert f"{environment_file}:7" in text and "answer='3'" in text


def test_an_environment_method_that_raises_is_a_tool_message(environment_file):
    instance = load_environment(f"{environment_file}:Breaks")()
    with pytest.warns(UserWarning, match="raised ZeroDivisionError"):
        assert trl_reply(instance.peek, number=3) == f"{TOOL_ERROR_PREFIX}'ZeroDivisionError: inside a method'}}"


def test_an_environment_that_cannot_be_made_is_named(environment_file):
    with pytest.raises(UserCodeError, match=r"environment WontStart could not be created: OSError: no server"):
        load_environment(f"{environment_file}:WontStart")()


def test_a_tool_file_that_fails_at_import_is_named(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import not_a_module_anywhere\n\ndef f(x: int) -> int:\n    return x\n", encoding="utf-8")
    with pytest.raises(UserCodeError, match="could not be imported from .*broken.py: ModuleNotFoundError"):
        load_tools([f"{path}:f"])


# ---------------------------------------------------------------------------------------------------
# A limit that does not depend on the tool's cooperation. Each of these tools swallows the guard's stop and
# counts what it swallowed; past GIVES_UP swallows (the alarm repeats every 0.5 s: far beyond the unwinding's
# 2 s) it returns "survived", which a guard that relies on the tool would hand the model. Counting, not a clock.

GIVES_UP = 40


def _bare_except(expression: str) -> str:
    """Retries whatever happens.

    Args:
        expression: anything
    """
    swallowed = 0
    while swallowed < GIVES_UP:
        try:
            time.sleep(0.01)
        except:  # noqa: E722 - the point of the test
            swallowed += 1
    return "survived"


def _base_exception_in_a_helper(expression: str) -> str:
    """Retries in a helper, and cleans up in a finally that retries too.

    Args:
        expression: anything
    """
    swallowed = [0]

    def attempt():
        try:
            time.sleep(0.01)
        except BaseException:
            swallowed[0] += 1

    try:
        while swallowed[0] < GIVES_UP:
            attempt()
    finally:
        while swallowed[0] < GIVES_UP:
            try:
                time.sleep(0.01)
            except BaseException:
                swallowed[0] += 1
    return "survived"


def _suppresses(expression: str) -> str:
    """Retries under contextlib.suppress, and turns the tracing off in its handler.

    Args:
        expression: anything
    """
    import contextlib

    for _ in range(GIVES_UP * 50):
        with contextlib.suppress(BaseException):
            try:
                time.sleep(0.01)
            except BaseException:
                sys.settrace(None)
    return "survived"


@pytest.mark.parametrize("tool", [_bare_except, _base_exception_in_a_helper, _suppresses])
def test_a_tool_that_swallows_every_stop_is_stopped_all_the_same(record, tool, capsys):
    before = sys.gettrace()
    reply = trl_reply(guarded(tool, time_limit_s=0.2, record=record), expression="1")
    assert reply.startswith(TOOL_ERROR_PREFIX) and "ran past its limit of 0.2 s and was stopped" in reply
    assert record.timeouts == {tool.__name__: 1}
    assert sys.gettrace() is before  # the unwinding leaves no trace function behind
    # the run goes on as before: the next tool answers, its printing is still kept out
    assert guarded(_prints, time_limit_s=RETURNS_S, record=record)(expression="1") == "12"
    assert "PRINTED-BY-TOOL" not in capsys.readouterr().out


def test_a_call_no_alarm_reaches_ends_the_process_naming_the_tool(record, monkeypatch):
    """A tool no alarm reaches (here it ignores SIGALRM; one inside a long C call alike) is ended by the
    watchdog thread: the process ends (here recorded instead), saying which tool and the fix."""
    import signal
    import threading

    from tools import guard

    ended = threading.Event()
    said = []
    monkeypatch.setattr(guard, "END_AFTER_S", 0.5)
    monkeypatch.setattr(guard, "_end_process", lambda text: (said.append(text), ended.set()))

    def _deaf(expression: str) -> str:
        """Hears no alarm.

        Args:
            expression: anything
        """
        previous = signal.signal(signal.SIGALRM, signal.SIG_IGN)
        try:
            for _ in range(GIVES_UP * 100):
                if ended.is_set():
                    break
                time.sleep(0.01)
        finally:
            signal.signal(signal.SIGALRM, previous)
        return "survived"

    trl_reply(guarded(_deaf, time_limit_s=0.2, record=record), expression="1")
    assert ended.is_set(), "the watchdog never ended the call"
    assert "the tool _deaf ran 0.5 s past its time limit and could not be stopped" in said[0]
    assert "fix:" in said[0]


# ---------------------------------------------------------------------------------------------------
# An async tool is awaited under the same limits: the model reads its result, never a coroutine.


async def _async_answers(expression: str) -> str:
    """Answers after a pause.

    Args:
        expression: anything
    """
    import asyncio

    await asyncio.sleep(0)
    return "12"


async def _async_raises(expression: str) -> str:
    """Refuses its input.

    Args:
        expression: anything
    """
    raise ValueError("not arithmetic")


async def _async_hangs(expression: str) -> str:
    """Never answers.

    Args:
        expression: anything
    """
    import asyncio

    await asyncio.sleep(3600)
    return "late"


async def _async_swallows(expression: str) -> str:
    """Retries whatever happens, cancellation included.

    Args:
        expression: anything
    """
    import asyncio

    swallowed = 0
    while swallowed < GIVES_UP:
        try:
            await asyncio.sleep(0.01)
        except:  # noqa: E722 - the point of the test
            swallowed += 1
    return "survived"


class _AsyncCallable:
    """An object whose __call__ is async."""

    __name__ = "async_callable"

    async def __call__(self, expression: str) -> str:
        return "called"


def test_an_async_tool_is_awaited_and_its_result_read(record):
    assert trl_reply(guarded(_async_answers, time_limit_s=RETURNS_S, record=record), expression="1") == "12"
    assert trl_reply(guarded(_AsyncCallable(), time_limit_s=RETURNS_S, record=record), expression="1") == "called"
    reply = trl_reply(guarded(_async_raises, time_limit_s=RETURNS_S, record=record), expression="1")
    assert reply == f"{TOOL_ERROR_PREFIX}'ValueError: not arithmetic'}}"
    assert record.failures == {"_async_raises": 1} and "coroutine" not in reply


@pytest.mark.parametrize("tool", [_async_hangs, _async_swallows], ids=["hangs", "swallows"])
def test_an_async_tool_keeps_the_time_limit(record, tool):
    import asyncio

    reply = trl_reply(guarded(tool, time_limit_s=0.2, record=record), expression="1")
    assert "ran past its limit of 0.2 s and was stopped" in reply
    assert guarded(_async_answers, time_limit_s=RETURNS_S, record=record)(expression="1") == "12"
    with pytest.raises(RuntimeError):  # no event loop left running or set in this thread
        asyncio.get_running_loop()


def test_an_async_tool_called_inside_a_running_loop_is_awaited_and_bounded(record):
    import asyncio

    async def caller():
        return (
            guarded(_async_answers, time_limit_s=RETURNS_S, record=record)(expression="1"),
            trl_reply(guarded(_async_hangs, time_limit_s=0.2, record=record), expression="1"),
        )

    answered, hung = asyncio.run(caller())
    assert answered == "12" and "ran past its limit of 0.2 s" in hung


ASYNC_ENVIRONMENT = '''
import asyncio


class Counter:
    def reset(self, **row):
        self.count = 0

    async def add(self, number: int) -> str:
        """Adds a number.

        Args:
            number: what to add
        """
        await asyncio.sleep(0)
        self.count += number
        return str(self.count)
'''


def test_an_environments_async_method_is_awaited(tmp_path):
    path = tmp_path / "counter.py"
    path.write_text(ASYNC_ENVIRONMENT, encoding="utf-8")
    instance = load_environment(f"{path}:Counter")()
    instance.reset()
    assert trl_reply(instance.add, number=3) == "3" and trl_reply(instance.add, number=4) == "7"
    assert instance.count == 7
