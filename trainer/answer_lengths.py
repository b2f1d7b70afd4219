"""HOW LONG the model's answers run, measured before the plan is trusted: the length probe at the start of an
attempt (one answer sampled for each of a few training prompts, as training samples them, at the cap), the
lengths of the training steps' answers, and summary.json's `completion_lengths`.

When the probe finds the answers cut at the cap and the supervisor re-plans (contract.attempt's
ENV_LENGTH_REPLAN), the attempt stops before its first step with the status `replanned`; the supervisor plans the
larger cap (launcher.run.fallback). The rule is the contract's (contract.length_rule), so both sides read a
measurement alike.
"""

from __future__ import annotations

import functools
import time

from contract.length_rule import PROBE, TRAINING, cut_warning, measure, needs_larger_cap, overruled
from trainer.state import AttemptState, say


def probe_rows(rows: list[dict], count: int) -> list[dict]:
    """`count` of the training rows, spread evenly over them (the data's order, not only its start)."""
    if count <= 0 or not rows:
        return []
    if len(rows) <= count:
        return list(rows)
    return [rows[i * len(rows) // count] for i in range(count)]


def planned_expected(profile) -> int | None:
    """The tokens the plan expects a completion to run: the supervisor's figure, else the profile's own."""
    from contract.attempt import expected_tokens_from_env

    return expected_tokens_from_env() or profile.expected_completion_length or None


def run_length_probe(state: AttemptState, loaded) -> dict | None:
    """Sample one answer for each of `length_probe` training prompts with training's tokenizer, chat template
    switches, sampling settings and cap; their figures (contract.length_rule.MeasuredLengths' and what they were
    held against), kept in state.lengths. None when the profile turns it off, accelerate runs the processes, or
    the weights are random (calibrate --random-weights, the measurement kit)."""
    profile = state.profile
    if not profile.length_probe:
        say("length probe: off (profile key length_probe is 0)")
        return None
    if profile.distributed:
        say("length probe: skipped under accelerate; the training steps' answers are measured instead")
        return None
    if profile.tools or profile.environment:
        # TRL runs a tools profile's turns (calls, the tools' replies, the answer) inside one completion: one
        # answer sampled without them measures another thing
        say(
            "length probe: skipped (with tools the answers take turns); the training steps' answers are measured instead"
        )
        return None
    from contract.attempt import random_weights_requested

    if random_weights_requested():
        say("length probe: skipped (random weights: their answers say nothing of the model's)")
        return None
    from evaluation.generate import Sampling, sample

    rows = probe_rows(loaded.train_rows, profile.length_probe)
    if not rows:
        return None
    cap = profile.max_completion_length
    sampling = Sampling(
        temperature=profile.temperature,
        top_p=profile.top_p,
        top_k=profile.top_k,
        min_p=profile.min_p,
        repetition_penalty=profile.repetition_penalty,
        seed=profile.seed,
    )
    started = time.perf_counter()
    answers = sample(
        loaded.model,
        loaded.tokenizer,
        rows,
        max_new_tokens=cap,
        sampling=sampling,
        use_vllm=loaded.unsloth_vllm,
        switches=loaded.switches,
    )
    seconds = time.perf_counter() - started
    measured = measure([a.tokens for a in answers], [a.cut for a in answers], cap, PROBE)
    expected = planned_expected(profile)
    why = overruled(measured, cap, expected)
    figures = {
        **measured.to_json(),
        "switches": dict(loaded.switches),
        "planned_cap": cap,
        "planned_expected": expected,
        "seconds": round(seconds, 3),
        "engine": "vllm" if loaded.unsloth_vllm else "transformers",
        "overruled": why,
        "example": answers[0].text[:300] if answers else None,
    }
    state.lengths = figures
    say(
        f"length probe: {measured.samples} answers sampled at the cap of {cap} tokens in {seconds:.1f} s: "
        f"{measured.mean:.0f} tokens on average, {measured.p95} at the 95th percentile, {measured.cut_share:.0%} "
        f"cut" + (f"; expected {expected}" if expected else "")
    )
    return figures


def stops_for_replan(state: AttemptState, figures: dict | None) -> bool:
    """Whether the attempt stops before training for the supervisor to re-plan a larger cap: the answers were
    cut at the cap (some or all of them: a cut answer says only that it runs longer) and the supervisor
    re-plans (ENV_LENGTH_REPLAN); what is said either way, with the cap the measurement calls for when it
    trains as it is."""
    from contract.attempt import length_replan_allowed
    from contract.length_rule import MeasuredLengths, lengths_after

    if figures is None:
        return False
    measured = MeasuredLengths.from_json(figures)
    cap = state.profile.max_completion_length
    if figures.get("overruled") is None or measured is None:
        return False
    if needs_larger_cap(measured, cap):
        if length_replan_allowed():
            say(f"lengths overrule the plan: {figures['overruled']}; stopping before training to re-plan the cap")
            return True
        wanted, _ = lengths_after(measured, cap, figures.get("planned_expected"))
        sequence = state.profile.max_seq_length
        wanted_sequence = max(sequence, state.profile.max_prompt_length + wanted)
        # what the answers call for and this attempt did not change, {key: [as it runs, called for]}: kept with
        # the measurement (outcome.json, attempts.jsonl, summary.json) beside what a re-plan would have done
        figures["held"] = {"max_completion_length": [cap, wanted]}
        if wanted_sequence != sequence:
            figures["held"]["max_seq_length"] = [sequence, wanted_sequence]
        say(
            f"warning: {figures['overruled']}; training at the cap of {cap} tokens as it is (nothing re-plans it "
            "here: the cap is pinned with --set or written in the --profile file, the run's re-plans are spent, "
            f"or no supervisor runs it): the answers call for max_completion_length {wanted} or more (fix: --set "
            f"max_completion_length={wanted} --set max_seq_length={wanted_sequence}, or write them in the profile)"
        )
        return False
    say(
        f"note: {figures['overruled']}: the time per step was planned for {figures['planned_expected']} tokens a "
        "completion; the measurement is kept for the next plan (the cap holds the answers)"
    )
    return False


class LengthRecorder:
    """The lengths of the training steps' answers, read from the completion ids TRL hands a reward (this
    process's completions; the first reward's calls only)."""

    def __init__(self):
        self.lengths: list[int] = []
        self.complete = True

    def wrap(self, fn):
        import inspect

        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__ if callable(fn) else None):
            self.complete = False
            return fn

        @functools.wraps(fn)
        def recorded(*args, **kwargs):
            ids = kwargs.get("completion_ids")
            if ids is not None:
                self.lengths.extend(len(one) for one in ids)
            return fn(*args, **kwargs)

        return recorded

    def clear(self) -> None:
        self.lengths = []


def training_lengths(recorder: LengthRecorder | None, rows: list[dict], cap: int) -> dict | None:
    """The training steps' answers as MeasuredLengths' figures: their lengths from the recorder, the share cut
    from TRL's per-step clipped ratio (every process's) where it logged one."""
    if recorder is None or not recorder.lengths:
        return None
    measured = measure(recorder.lengths, [n >= cap for n in recorder.lengths], cap, TRAINING)
    shares = [r.get("cut_share") for r in rows if isinstance(r.get("cut_share"), (int, float))]
    figures = measured.to_json()
    if shares:
        figures["cut_share"] = round(sum(shares) / len(shares), 4)
    return figures


def completion_lengths(state: AttemptState, recorder: LengthRecorder | None, rows: list[dict]) -> dict:
    """summary.json's completion_lengths: the plan's cap and expected length beside the measured mean, 95th
    percentile and share cut, from the length probe when it ran, else from the training steps."""
    profile = state.profile
    figures = state.lengths
    source = figures.get("source") if figures else None
    if figures is None:
        figures = training_lengths(recorder, rows, profile.max_completion_length)
        source = TRAINING if figures else None
    return {
        "planned_cap": profile.max_completion_length,
        "planned_expected": planned_expected(profile),
        "measured_mean": figures.get("mean") if figures else None,
        "measured_p95": figures.get("p95") if figures else None,
        "cut_share": figures.get("cut_share") if figures else None,
        "samples": figures.get("samples") if figures else None,
        "source": source,
        "switches": figures.get("switches") if figures else None,
        # the probe's verdict on the plan, and what the answers called for that the attempt kept as it was
        "overruled": figures.get("overruled") if figures else None,
        "held": figures.get("held") if figures else None,
    }


def cut_share_warning(rows: list[dict], cap: int) -> str | None:
    """The warning of contract.length_rule.cut_warning over metrics.jsonl's rows."""
    return cut_warning([r.get("cut_share") for r in rows], cap)
