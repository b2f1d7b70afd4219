"""The shipped calculator tool: `calculate(expression)` for the arithmetic and GSM8K tasks.

The expression is read by a small parser of its own (numbers, + - * / and x or ÷ as people write them,
parentheses, a leading sign); nothing is ever handed to Python's `eval`, so a model that writes code gets an
error message back, not a program run. Arithmetic is exact (fractions), bounded in the length of what it reads,
the depth of its parentheses and the size of its numbers, so no expression can make it run long or eat memory.
"""

from __future__ import annotations

import re
from fractions import Fraction

MAX_EXPRESSION_CHARS = 200
MAX_DEPTH = 20  # nested parentheses
MAX_MAGNITUDE = Fraction(10) ** 15  # larger results are refused, not computed further
DECIMALS = 6  # a result that is not whole is written with at most this many decimals

_TOKEN = re.compile(r"\s*(?:(?P<number>\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)|(?P<op>[-+*/()x×÷−]))")
_OPERATOR = {"x": "*", "×": "*", "÷": "/", "−": "-"}


class CalculationError(ValueError):
    """An expression the calculator cannot read or compute; its text is what the model is told."""


def _tokens(expression: str) -> list[str | Fraction]:
    tokens: list[str | Fraction] = []
    position = 0
    text = expression.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            shown = text[position : position + 10]
            raise CalculationError(f"cannot read {shown!r} at character {position + 1}: use numbers, + - * / and ( )")
        if match.group("number") is not None:
            tokens.append(Fraction(match.group("number").replace(",", "")))
        else:
            op = match.group("op")
            tokens.append(_OPERATOR.get(op, op))
        position = match.end()
    return tokens


class _Parser:
    """expression := term (('+' | '-') term)*; term := factor (('*' | '/') factor)*;
    factor := ('+' | '-') factor | number | '(' expression ')'"""

    def __init__(self, tokens: list):
        self.tokens = tokens
        self.at = 0

    def peek(self):
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self):
        token = self.peek()
        self.at += 1
        return token

    def expression(self, depth: int) -> Fraction:
        value = self.term(depth)
        while self.peek() in ("+", "-"):
            op = self.take()
            right = self.term(depth)
            value = _bounded(value + right if op == "+" else value - right)
        return value

    def term(self, depth: int) -> Fraction:
        value = self.factor(depth)
        while self.peek() in ("*", "/"):
            op = self.take()
            right = self.factor(depth)
            if op == "*":
                value = _bounded(value * right)
            elif right == 0:
                raise CalculationError("division by zero")
            else:
                value = _bounded(value / right)
        return value

    def factor(self, depth: int) -> Fraction:
        if depth > MAX_DEPTH:
            raise CalculationError(f"more than {MAX_DEPTH} nested parentheses or signs")
        token = self.take()
        if token in ("+", "-"):
            value = self.factor(depth + 1)
            return value if token == "+" else -value
        if token == "(":
            value = self.expression(depth + 1)
            if self.take() != ")":
                raise CalculationError("a '(' is not closed")
            return value
        if isinstance(token, Fraction):
            return _bounded(token)
        if token is None:
            raise CalculationError("the expression ends where a number is expected")
        raise CalculationError(f"{token!r} where a number is expected")


def _bounded(value: Fraction) -> Fraction:
    if abs(value) > MAX_MAGNITUDE:
        raise CalculationError(f"a result beyond {int(MAX_MAGNITUDE):,} is out of range")
    return value


def _written(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    text = f"{float(value):.{DECIMALS}f}".rstrip("0").rstrip(".")
    return text or "0"


def compute(expression) -> str:
    """The value of an arithmetic expression as the model is shown it ("12", "2.5"); CalculationError saying
    what is wrong otherwise."""
    if isinstance(expression, bool) or not isinstance(expression, (str, int, float)):
        raise CalculationError(f"expected the expression as text, got {type(expression).__name__}")
    text = str(expression)
    if len(text) > MAX_EXPRESSION_CHARS:
        raise CalculationError(f"the expression is over {MAX_EXPRESSION_CHARS} characters")
    tokens = _tokens(text)
    if not tokens:
        raise CalculationError("the expression is empty")
    parser = _Parser(tokens)
    value = parser.expression(0)
    if parser.peek() is not None:
        raise CalculationError(f"{parser.peek()!r} after a complete expression")
    return _written(value)


def calculate(expression: str) -> str:
    """Compute an arithmetic expression exactly: numbers, + - * / and parentheses.

    Args:
        expression: the arithmetic to compute, for example "7 + 5" or "(12 - 4) * 3"
    """
    return compute(expression)
