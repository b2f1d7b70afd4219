"""The shipped calculator: exact arithmetic from its own small parser, errors the model can read, and no way
for a model's text to run as code or run long."""

from __future__ import annotations

import builtins

import pytest

from tools.calculator import MAX_DEPTH, MAX_EXPRESSION_CHARS, CalculationError, calculate


@pytest.mark.parametrize(
    "expression, value",
    [
        ("7 + 5", "12"),
        ("7+5", "12"),
        ("(12 - 4) * 3", "24"),
        ("2 + 3 * 4", "14"),
        ("(2 + 3) * 4", "20"),
        ("10 / 4", "2.5"),
        ("1 / 3", "0.333333"),
        ("6 x 7", "42"),
        ("6 × 7", "42"),
        ("84 ÷ 2", "42"),
        ("-3 + 5", "2"),
        ("-(-3)", "3"),
        ("8 − 3", "5"),
        ("1,000 + 24", "1024"),
        ("0.1 + 0.2", "0.3"),
        (".5 * 4", "2"),
        ("12", "12"),
        (12, "12"),
        ("3 - 5", "-2"),
    ],
)
def test_it_computes_exactly(expression, value):
    assert calculate(expression) == value


@pytest.mark.parametrize(
    "expression, words",
    [
        ("1 / 0", "division by zero"),
        ("2 ** 10", "where a number is expected"),
        ("__import__('os').system('true')", "cannot read"),
        ("a + b", "cannot read"),
        ("(1 + 2", "not closed"),
        ("1 + 2)", "after a complete expression"),
        ("", "empty"),
        ("7 +", "ends where a number is expected"),
        ("9" * 20 + " * " + "9" * 20, "out of range"),
        ("1" + " + 1" * 100, "over"),
        ("(" * (MAX_DEPTH + 2) + "1" + ")" * (MAX_DEPTH + 2), "nested"),
        ("-" * (MAX_DEPTH + 2) + "1", "nested"),
    ],
)
def test_what_it_cannot_compute_is_an_error_the_model_reads(expression, words):
    with pytest.raises(CalculationError, match=words):
        calculate(expression)


def test_the_length_bound_is_the_documented_one():
    assert len("1" + " + 1" * 100) > MAX_EXPRESSION_CHARS
    assert calculate("1" + " + 1" * 40) == "41"


@pytest.mark.parametrize("value", [None, True, ["1 + 1"], {"expression": "1"}])
def test_a_value_that_is_not_text_is_refused(value):
    with pytest.raises(CalculationError, match="as text"):
        calculate(value)


def test_nothing_is_evaluated_as_python(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the calculator called eval/exec/compile")

    for name in ("eval", "exec", "compile"):
        monkeypatch.setattr(builtins, name, refuse)
    assert calculate("(1 + 2) * 3 - 4 / 2") == "7"
    with pytest.raises(CalculationError):
        calculate("__import__('os')")
