"""A user's `async def` tool (and an environment's async method) as TRL runs one: TRL sorts the tools it is
given by `inspect.iscoroutinefunction`, calling the others in its own loop and gathering the async ones on an
event loop of its own. The guard hands TRL a plain function that awaits the tool itself, under the tool's time
limit (a signal reaches only the main thread): TRL calls it as any other, and the model reads the tool's
answer, never a coroutine."""

from __future__ import annotations

import inspect

import pytest

from tools import check_entry, load_environment, load_tools, tool_methods

TOOL_FILE = '''
import asyncio


async def weather(city: str, days: int) -> str:
    """The forecast for a city.

    Args:
        city: the city's name
        days: how many days ahead
    """
    await asyncio.sleep(0)
    return f"{city}: sunny for {days} days"


class Shop:
    def reset(self, **row):
        self.basket = []

    async def buy(self, item: str) -> str:
        """Puts an item in the basket.

        Args:
            item: what to buy
        """
        await asyncio.sleep(0)
        self.basket.append(item)
        return ", ".join(self.basket)
'''


@pytest.fixture
def tool_file(tmp_path):
    path = tmp_path / "my_tools.py"
    path.write_text(TOOL_FILE, encoding="utf-8")
    return path


def trl_calls(tool, **arguments):
    """What TRL's tool loop does with a tool it is given: a coroutine function is gathered on its loop, any
    other is called; an exception becomes {'error': ...}."""
    assert not inspect.iscoroutinefunction(tool), "TRL would gather it on its own loop, past the guard's limit"
    try:
        return tool(**arguments)
    except Exception as exc:
        return {"error": str(exc)}


def test_an_async_tool_answers_as_trl_calls_it(tool_file):
    (tool,) = load_tools([f"{tool_file}:weather"], time_limit_s=60)
    assert tool.__name__ == "weather"
    assert trl_calls(tool, city="Oslo", days=3) == "Oslo: sunny for 3 days"


def test_an_async_tool_is_described_to_the_model_as_written(tool_file):
    get_json_schema = pytest.importorskip("transformers.utils").get_json_schema

    (tool,) = load_tools([f"{tool_file}:weather"], time_limit_s=60)
    schema = get_json_schema(tool)["function"]
    assert schema["name"] == "weather" and schema["description"] == "The forecast for a city."
    assert schema["parameters"]["properties"] == {
        "city": {"type": "string", "description": "the city's name"},
        "days": {"type": "integer", "description": "how many days ahead"},
    }


def test_an_environments_async_method_answers_as_trl_calls_it(tool_file):
    shop = load_environment(f"{tool_file}:Shop", time_limit_s=60)()
    shop.reset()
    (buy,) = tool_methods(shop)  # as TRL takes them: the public methods of the instance, bound
    assert trl_calls(buy, item="bread") == "bread"
    assert trl_calls(buy, item="milk") == "bread, milk"


def test_profiles_check_takes_an_async_tool_and_method(tool_file):
    assert check_entry(f"{tool_file}:weather", "tool") == f"{tool_file.resolve()}:weather"
    assert check_entry(f"{tool_file}:Shop", "environment") == f"{tool_file.resolve()}:Shop"
