"""WHAT both sides agree on about completion lengths: the figures measured of a model's answers (by the length
probe at the start of an attempt, or by the training steps), the rule that says when they overrule the plan,
and the cap and expected length they call for.

The attempt measures and judges (trainer.answer_lengths); the supervisor re-plans from the same figures by the
same rule (launcher.run.fallback), and the planner reads them back from the ledger (launcher.plan.completion_lengths).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

CAP_MARGIN = 1.25  # the cap a task needs: its 95th (measured) or 99th (reference) percentile and a quarter more
CAP_STEP = 128  # caps are rounded up to this many tokens ...
SMALL_CAP_STEP = 16  # ... or to this below CAP_STEP (the CPU profiles' caps of a few dozen tokens)
EXPECTED_TOLERANCE = 1.5  # a measured mean further than this factor from the expected length overrules it
CUT_WARNING_SHARE = 0.2  # answers cut at the cap past this share: training says what to change
CUT_WARNING_WINDOW = 5  # ... read over this many steps
PERCENTILE = 0.95
PROBE = "probe"  # the length probe at the start of an attempt
TRAINING = "training"  # the completions of the training steps


@dataclass(frozen=True)
class MeasuredLengths:
    """Tokens of sampled answers at a cap: their mean, 95th percentile, longest, and the share cut at the cap."""

    samples: int
    mean: float
    p95: int
    longest: int
    cut_share: float
    cap: int
    source: str = PROBE  # PROBE or TRAINING

    @property
    def censored(self) -> bool:
        """The cap cut the longer answers short: the true lengths lie beyond what was measured."""
        return self.p95 >= self.cap

    def to_json(self) -> dict:
        """The figures, and whether they are censored (a lower bound: read back from p95 and cap, not from this)."""
        figures = {**asdict(self), "mean": round(self.mean, 1), "cut_share": round(self.cut_share, 4)}
        return {**figures, "censored": self.censored}

    @classmethod
    def from_json(cls, data) -> MeasuredLengths | None:
        """From a record (outcome.json, the ledger); None when it is not a sound one."""
        if not isinstance(data, dict):
            return None
        try:
            samples, p95, longest, cap = (int(data[k]) for k in ("samples", "p95", "longest", "cap"))
            mean, cut = float(data["mean"]), float(data["cut_share"])
        except (KeyError, TypeError, ValueError):
            return None
        if samples < 1 or cap < 1 or not (0 <= mean <= cap and 0 <= p95 <= cap and 0.0 <= cut <= 1.0):
            return None
        if not math.isfinite(mean):
            return None
        return cls(samples, mean, p95, longest, cut, cap, str(data.get("source") or PROBE))


def percentile(values: list[int], share: float = PERCENTILE) -> int:
    """The nearest-rank percentile: the smallest value with at least `share` of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def measure(lengths: list[int], cut: list[bool], cap: int, source: str = PROBE) -> MeasuredLengths | None:
    """The figures of answers of `lengths` tokens (`cut`: each ran into the cap without ending); None for none."""
    if not lengths:
        return None
    return MeasuredLengths(
        samples=len(lengths),
        mean=sum(lengths) / len(lengths),
        p95=percentile(lengths),
        longest=max(lengths),
        cut_share=sum(bool(c) for c in cut) / len(lengths),
        cap=int(cap),
        source=source,
    )


def round_cap(tokens: float) -> int:
    """A cap of at least `tokens`, rounded up to CAP_STEP (to SMALL_CAP_STEP below it)."""
    step = CAP_STEP if tokens > CAP_STEP else SMALL_CAP_STEP
    return max(step, math.ceil(tokens / step) * step)


def overruled(measured: MeasuredLengths, cap: int, expected: int | None) -> str | None:
    """Why the measured answers overrule the plan (a cap or expected length), or None when they agree:
    the 95th percentile reaches the cap (answers are cut: they run longer than the cap, however many), or the
    mean lies more than EXPECTED_TOLERANCE times from the expected length."""
    if measured.cut_share >= 1.0:
        # a lower bound, not a verdict on the model: every answer runs past the cap, by how much is not known
        return (
            f"none of the {measured.samples} answers ended within the cap of {cap} tokens: they run longer than "
            f"{cap} (by how much is not measured yet)"
        )
    if measured.p95 >= cap:
        return (
            f"the 95th percentile ({measured.p95} tokens) reaches the cap of {cap}: "
            f"{measured.cut_share:.0%} of the answers were cut"
        )
    if expected and not expected / EXPECTED_TOLERANCE <= measured.mean <= expected * EXPECTED_TOLERANCE:
        return (
            f"the answers run {measured.mean:.0f} tokens on average, {measured.mean / expected:.2f} x the "
            f"{expected} expected"
        )
    return None


def needs_larger_cap(measured: MeasuredLengths, cap: int) -> bool:
    """Whether the answers call for a larger cap than `cap` (memory must be planned again): a restart. Answers
    cut at the cap, some or all of them, say only that they run longer: the cap grows (lengths_after) and they
    are measured again."""
    return measured.p95 >= cap


def lengths_after(measured: MeasuredLengths, cap: int, expected: int | None = None) -> tuple[int, int]:
    """(cap, expected length) the measurement calls for, starting from a plan of `cap`. Answers cut at the cap
    say only that they run longer: the cap doubles (at least) and is measured again; otherwise the cap covers
    the 95th percentile with CAP_MARGIN (it never shrinks below `cap` here: a smaller cap is the next plan's,
    from the ledger). The expected length is the measured mean (a lower bound when answers were cut)."""
    if measured.censored or measured.p95 >= cap:
        new_cap = max(2 * cap, round_cap(CAP_MARGIN * measured.p95))
        new_expected = max(measured.mean, float(expected or 0))
    else:
        new_cap = max(cap, round_cap(CAP_MARGIN * measured.p95))
        new_expected = measured.mean
    return int(new_cap), max(1, min(int(round(new_expected)), int(new_cap)))


def planned_from(measured: MeasuredLengths, estimate: tuple[int, int] | None = None) -> tuple[int, int]:
    """(cap, expected length) a plan takes from a measurement (the ledger's): the 95th percentile with
    CAP_MARGIN, and the mean. A cut (censored) measurement is a lower bound, never the answers' length: its
    cap doubles until measured uncut, and neither figure falls below the plan's own `estimate` (cap,
    expected) when one is given (answers cut at 8 tokens say nothing of answers of 300)."""
    if measured.censored:
        cap = max(2 * measured.cap, round_cap(CAP_MARGIN * measured.p95))
        expected = measured.mean
        if estimate is not None:
            cap, expected = max(cap, int(estimate[0])), max(expected, float(estimate[1]))
    else:
        cap = round_cap(CAP_MARGIN * measured.p95)
        expected = measured.mean
    return int(cap), max(1, min(int(round(expected)), int(cap)))


def cut_warning(shares: list[float | None], cap: int, window: int = CUT_WARNING_WINDOW) -> str | None:
    """One line when the share of answers cut at the cap, over the last `window` steps, passes
    CUT_WARNING_SHARE; None otherwise or with fewer steps."""
    recent = [s for s in shares[-window:] if s is not None]
    if len(recent) < window:
        return None
    share = sum(recent) / len(recent)
    if share <= CUT_WARNING_SHARE:
        return None
    return (
        f"{share:.0%} of the answers of the last {window} steps were cut at max_completion_length ({cap} tokens): "
        f"a cut answer loses its final answer and its format reward; raise it (--set max_completion_length="
        f"{round_cap(2 * cap)}, with max_seq_length to match), or ask for shorter answers in the system prompt"
    )
