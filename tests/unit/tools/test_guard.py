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
from tools.guard import MAX_OUTPUT_CHARS, ToolCodeError, ToolFailed, ToolRecord, guarded


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
    with pytest.raises(ToolCodeError) as caught:
        check_environment_starts(factory, [{"answer": "2"}, {"answer": "3"}])
    text = str(caught.value)
    assert "environment Breaks reset failed: KeyError: 'odd'" in text
    assert f"{environment_file}:7" in text and "answer='3'" in text


def test_an_environment_method_that_raises_is_a_tool_message(environment_file):
    instance = load_environment(f"{environment_file}:Breaks")()
    with pytest.warns(UserWarning, match="raised ZeroDivisionError"):
        assert trl_reply(instance.peek, number=3) == f"{TOOL_ERROR_PREFIX}'ZeroDivisionError: inside a method'}}"


def test_an_environment_that_cannot_be_made_is_named(environment_file):
    with pytest.raises(ToolCodeError, match=r"environment WontStart could not be created: OSError: no server"):
        load_environment(f"{environment_file}:WontStart")()


def test_a_tool_file_that_fails_at_import_is_named(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import not_a_module_anywhere\n\ndef f(x: int) -> int:\n    return x\n", encoding="utf-8")
    with pytest.raises(ToolCodeError, match="could not be imported: ModuleNotFoundError"):
        load_tools([f"{path}:f"])
