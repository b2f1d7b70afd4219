"""The signal GRPO learns from, per step: GRPO's advantage is a completion's reward minus its group's mean,
so a group whose completions all got the same reward gives no advantage and no gradient. Each step records
the share of such groups, the spread of rewards within groups, and (with a correctness reward) the share
of groups that were all correct or all wrong; a run where most groups are alike cannot learn, and says so.

The reward functions are wrapped to record what they return to TRL: the figures are the rewards of the
groups this process scored (TRL keeps a group within one process, since every process's batch is a whole
number of groups)."""

from __future__ import annotations

import functools
import inspect
import math

from evaluation.score import FULL_SCORE

NO_SIGNAL_SHARE = 0.8  # at or above this share of alike groups, the run is told it cannot learn
NO_SIGNAL_WINDOW = 10  # steps averaged before the warning can fire
FLAT_TOLERANCE = 1e-6  # rewards closer than this count as the same


class GroupSignal:
    """Records the rewards each step's completions got, then reduces them to per-group figures.

    `weights` maps each reward's name to its weight (the profile's `rewards`); `correctness` names the
    reward that says right or wrong, or None (then no all-correct / all-wrong split)."""

    def __init__(self, weights: dict, num_generations: int, correctness: str | None = None):
        self.weights = {name: float(weight) for name, weight in weights.items()}
        self.num_generations = int(num_generations)
        self.correctness = correctness if correctness in self.weights else None
        self._batches: list[dict] = []  # one {reward name: scores} per scoring call of TRL
        self.complete = True  # False when a reward could not be wrapped (an async one)

    def wrap(self, name: str, fn):
        """`fn` as TRL calls it, recording its scores under `name` (async rewards are left as they are)."""
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__ if callable(fn) else None):
            self.complete = False
            return fn

        @functools.wraps(fn)
        def recorded(*args, **kwargs):
            scores = fn(*args, **kwargs)
            self.record(name, scores)
            return scores

        return recorded

    def record(self, name: str, scores) -> None:
        # TRL calls every reward once per batch, in order: a name seen again opens the next batch
        if not self._batches or name in self._batches[-1]:
            self._batches.append({})
        self._batches[-1][name] = list(scores)

    def clear(self) -> None:
        self._batches = []

    def take(self) -> dict | None:
        """The figures of the batches scored since the last call (None when there were none, or when the
        rewards could not all be seen), and forget them."""
        batches, self._batches = self._batches, []
        if not self.complete:
            return None
        return group_figures(batches, self.weights, self.num_generations, self.correctness)


def _value(score) -> float:
    # TRL turns a None score into NaN and sums the weighted rewards with nansum: None counts as 0
    if score is None:
        return 0.0
    value = float(score)
    return 0.0 if math.isnan(value) else value


def _sample_std(values: list[float]) -> float:
    """The standard deviation TRL divides advantages by (n - 1 in the denominator)."""
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def group_figures(
    batches: list[dict], weights: dict, num_generations: int, correctness: str | None = None
) -> dict | None:
    """Per-group figures over `batches` ({reward name: scores}, completions in TRL's order: each prompt's
    `num_generations` completions next to each other):

    - groups: how many groups were scored
    - groups_alike: share of groups whose completions all got the same weighted reward (no advantage)
    - group_reward_spread: mean over groups of the standard deviation of the weighted reward
    - groups_all_correct, groups_all_wrong: share of groups all right / all wrong by `correctness`
    """
    if num_generations < 2:
        return None
    totals: list[float] = []
    correct: list[bool] = []
    for batch in batches:
        if set(batch) != set(weights):  # a batch cut short (an error inside a reward): not a whole step
            continue
        size = len(next(iter(batch.values())))
        if size % num_generations or any(len(scores) != size for scores in batch.values()):
            continue
        for i in range(size):
            totals.append(sum(weights[name] * _value(batch[name][i]) for name in weights))
            if correctness:
                correct.append(_value(batch[correctness][i]) >= FULL_SCORE)
    groups = len(totals) // num_generations
    if not groups:
        return None
    alike = spread = all_correct = all_wrong = 0
    for g in range(groups):
        chunk = totals[g * num_generations : (g + 1) * num_generations]
        alike += max(chunk) - min(chunk) <= FLAT_TOLERANCE
        spread += _sample_std(chunk)
        if correctness:
            verdicts = correct[g * num_generations : (g + 1) * num_generations]
            all_correct += all(verdicts)
            all_wrong += not any(verdicts)
    out = {"groups": groups, "groups_alike": round(alike / groups, 4), "group_reward_spread": round(spread / groups, 4)}
    if correctness:
        out["groups_all_correct"] = round(all_correct / groups, 4)
        out["groups_all_wrong"] = round(all_wrong / groups, 4)
    return out


def no_signal_share(figures: dict) -> float | None:
    """The share of groups that teach nothing about the task: all correct or all wrong where a correctness
    reward judges, else all given the same reward."""
    if not figures:
        return None
    if "groups_all_correct" in figures:
        return figures["groups_all_correct"] + figures["groups_all_wrong"]
    return figures.get("groups_alike")


def no_signal_warning(rows: list[dict], window: int = NO_SIGNAL_WINDOW) -> str | None:
    """One line when, over the last `window` steps of `rows` (metrics.jsonl's), at least NO_SIGNAL_SHARE
    of the groups taught nothing; None otherwise or when fewer steps carry the figures."""
    recent = [r.get("group_signal") for r in rows[-window:]]
    shares = [no_signal_share(f) for f in recent if f]
    shares = [s for s in shares if s is not None]
    if len(shares) < window:
        return None
    share = sum(shares) / len(shares)
    if share < NO_SIGNAL_SHARE:
        return None
    split = [f for f in recent if f and "groups_all_correct" in f]
    if split:
        right = sum(f["groups_all_correct"] for f in split) / len(split)
        wrong = sum(f["groups_all_wrong"] for f in split) / len(split)
        what = f"all-correct or all-wrong ({right:.0%} all correct, {wrong:.0%} all wrong)"
    else:
        what = "given one reward for every completion"
    return f"{share:.0%} of groups are {what}: raise temperature or num_generations, or pick harder/easier data"
