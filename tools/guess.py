"""The shipped multi-turn environment: the task's arithmetic problem played as a guessing game.

One `GuessTheSum` per rollout (TRL's environment_factory makes them): `reset(**row)` reads the problem's gold
answer from the row, and the model may call `guess(number)` up to max_tool_calls times, hearing "higher",
"lower" or "correct" after each. `solved` is its reward, read from the environment's state: 1.0 for a win at
the first guess, 1/n at the n-th, 0.0 without one. A profile names them as any package's code is named:

    environment: guess                          (short for tools.guess:GuessTheSum)
    rewards: {tools.guess:solved: 1.0, accuracy: 1.0}
"""

from __future__ import annotations

from fractions import Fraction


class GuessTheSum:
    """The problem's answer is hidden; each guess is told whether the answer is higher, lower or correct."""

    def __init__(self):
        self.answer: Fraction | None = None
        self.guesses: list[Fraction] = []
        self.won_at: int | None = None

    def reset(self, answer=None, **row) -> None:
        """A new game for one row: its gold answer is the number to find (nothing is added to the prompt)."""
        if answer is None:
            raise ValueError("the row has no 'answer' column: the game needs the number to find")
        self.answer = Fraction(str(answer).replace(",", ""))
        self.guesses = []
        self.won_at = None
        return None

    def guess(self, number: float) -> str:
        """Guess the problem's answer; the reply says whether the answer is higher, lower or correct.

        Args:
            number: your guess at the answer
        """
        if self.answer is None:
            raise ValueError("the game has not started")
        value = Fraction(str(number).strip().replace(",", ""))
        self.guesses.append(value)
        if value == self.answer:
            if self.won_at is None:
                self.won_at = len(self.guesses)
            return "correct"
        return "higher" if self.answer > value else "lower"


def solved(completions, environments=None, **kwargs) -> list:
    """1.0 for a game won at the first guess, 1/n at the n-th, 0.0 when not won; None without a game."""
    if environments is None:
        return [None] * len(completions)
    scores = []
    for environment in environments:
        won_at = getattr(environment, "won_at", None)
        scores.append(0.0 if not won_at else 1.0 / won_at)
    return scores
