"""The chat template's switches reach every rendering of a prompt (TRL's own, evaluation's, the probes'), and the
answers' lengths are measured: the length probe on the real tiny model, the training steps' lengths, the cut
share, summary.json's completion_lengths. The tiny model's template reads `enable_thinking` as Qwen3's does (it
thinks unless told false), so the real code path runs here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer import backends  # noqa: F401  (import order: Unsloth before transformers, below)

REPO = Path(__file__).resolve().parents[3]
SMALL = REPO / "profiles" / "cpu-tiny-4gen.yaml"


@pytest.fixture(scope="module", autouse=True)
def unsloth_first():
    backends.import_unsloth()


@pytest.fixture(scope="module")
def tiny_dir(tiny_cache, tiny_seed):
    from tiny_model.build import ensure_tiny

    return ensure_tiny("arithmetic", seed=tiny_seed, root=tiny_cache)


@pytest.fixture(scope="module")
def tokenizer(tiny_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_dir))


def _profile(*overrides):
    from profiles.load import load_profile

    return load_profile(SMALL, ["train_samples=64", "eval_samples=0", *overrides])


def _loaded(tmp_path, tiny_dir, *overrides):
    from trainer.stages import load
    from trainer.state import AttemptState

    state = AttemptState(_profile(*overrides), tmp_path, None, resolve_model=lambda p: (str(tiny_dir), None))
    return state, load(state)


def _think_ids(tokenizer) -> list[int]:
    return tokenizer("<think>\n", add_special_tokens=False)["input_ids"]


def test_the_tiny_template_thinks_unless_told_false(tokenizer):
    from tasks.prompts import build_prompt, reads_thinking_switch, render_ids, template_switches

    prompt = build_prompt("What is 2 + 3?")
    assert reads_thinking_switch(tokenizer)
    think = _think_ids(tokenizer)
    unsaid = render_ids(prompt, tokenizer)
    off = render_ids(prompt, tokenizer, template_switches({}, True))
    on = render_ids(prompt, tokenizer, {"enable_thinking": True})
    assert unsaid[-len(think) :] == think and on == unsaid  # Qwen3's default: thinking
    assert off == unsaid[: -len(think)]  # the project's default: the prompt the warm start was taught on
    text = tokenizer.decode(off)
    assert text.endswith("<|assistant|>\n") and "<think>" not in text


def test_evaluation_and_the_worst_case_probe_render_with_the_switches(tokenizer):
    from evaluation.generate import prompt_ids
    from tasks.prompts import build_prompt, render_ids
    from trainer.probe import longest_prompts

    rows = [{"prompt": build_prompt("What is 2 + 3?" + " and 1" * i), "answer": "5"} for i in range(3)]
    off = {"enable_thinking": False}
    assert prompt_ids(tokenizer, rows, off) == [render_ids(r["prompt"], tokenizer, off) for r in rows]
    assert prompt_ids(tokenizer, rows) != prompt_ids(tokenizer, rows, off)
    longest = longest_prompts(rows, tokenizer, batch=2, generations=2, switches=off)
    assert longest == [render_ids(rows[2]["prompt"], tokenizer, off)] * 2


def test_trl_renders_the_prompts_it_generates_from_with_the_switches(tmp_path, tiny_dir, tokenizer):
    """The real trainer (Unsloth's patched GRPOTrainer on the CPU): GRPOConfig.chat_template_kwargs is what its
    own tokenisation of prompts uses, for vLLM and transformers generation alike."""
    from tasks.prompts import render_ids
    from trainer.signals import StopFlag
    from trainer.stages import build_trainer

    for overrides, switches in (
        ((), {"enable_thinking": False}),
        (("chat_template_kwargs={enable_thinking: true}",), {"enable_thinking": True}),
    ):
        state, loaded = _loaded(tmp_path / str(len(overrides)), tiny_dir, *overrides)
        assert loaded.switches == switches
        session = build_trainer(state, loaded, StopFlag())
        assert session.trainer.args.chat_template_kwargs == switches
        prompts = [row["prompt"] for row in loaded.train_rows[:3]]
        ids = session.trainer._tokenize_prompts(prompts)[0]
        assert [list(map(int, one)) for one in ids] == [render_ids(p, tokenizer, switches) for p in prompts]
        think = _think_ids(tokenizer)
        assert all((list(one[-len(think) :]) == think) == switches["enable_thinking"] for one in ids)


def test_the_length_probe_samples_training_prompts_at_the_cap_and_leaves_the_random_state(tmp_path, tiny_dir):
    import torch

    from contract.length_rule import MeasuredLengths
    from trainer.answer_lengths import run_length_probe

    state, loaded = _loaded(tmp_path, tiny_dir, "max_completion_length=22", "expected_completion_length=0")
    before = torch.get_rng_state()
    figures = run_length_probe(state, loaded)
    assert torch.equal(before, torch.get_rng_state())
    measured = MeasuredLengths.from_json(figures)
    assert measured.samples == 24 and measured.cap == 22 and measured.source == "probe"
    # the tiny model's answers run 21 or 23 tokens (a one- or two-digit sum): at a cap of 22 the longer are cut
    assert measured.p95 == 22 and 0 < measured.cut_share < 1
    assert figures["switches"] == {"enable_thinking": False} and figures["engine"] == "transformers"
    assert "reaches the cap of 22" in figures["overruled"] and figures["seconds"] >= 0
    assert state.lengths is figures
    again = run_length_probe(state, loaded)
    assert {k: again[k] for k in ("mean", "p95", "cut_share")} == {k: figures[k] for k in ("mean", "p95", "cut_share")}


def test_the_probe_stops_for_a_replan_only_when_the_supervisor_replans(tmp_path, tiny_dir, monkeypatch, capsys):
    from contract.environment import ENV_LENGTH_REPLAN
    from trainer.answer_lengths import run_length_probe, stops_for_replan

    state, loaded = _loaded(tmp_path, tiny_dir, "max_completion_length=22", "expected_completion_length=0")
    figures = run_length_probe(state, loaded)
    monkeypatch.delenv(ENV_LENGTH_REPLAN, raising=False)
    assert not stops_for_replan(state, figures)  # started by hand: nobody re-plans; it trains and says so
    assert "warning: the 95th percentile (22 tokens) reaches the cap of 22" in capsys.readouterr().out
    # what it would have changed is kept with the measurement (the sequence of 256 holds 160 + 44 already)
    assert figures["held"] == {"max_completion_length": [22, 44]} and state.lengths is figures
    monkeypatch.setenv(ENV_LENGTH_REPLAN, "1")
    assert stops_for_replan(state, figures)
    roomy, loaded = _loaded(tmp_path / "roomy", tiny_dir, "max_completion_length=48")
    assert not stops_for_replan(roomy, run_length_probe(roomy, loaded))
    # not one answer ends within 12 tokens (they run 21 or 23): they run longer, and the cap is re-planned; the
    # model is not blamed for it
    short, loaded = _loaded(tmp_path / "short", tiny_dir, "max_completion_length=12", "expected_completion_length=0")
    figures = run_length_probe(short, loaded)
    assert figures["cut_share"] == 1.0
    capsys.readouterr()
    assert stops_for_replan(short, figures)
    said = capsys.readouterr().out
    assert "none of the 24 answers ended within the cap of 12 tokens: they run longer than 12" in said
    assert "stopping before training to re-plan the cap" in said and "does not end" not in said
    # pinned (or started by hand): it trains as it is, and says what the answers call for
    monkeypatch.delenv(ENV_LENGTH_REPLAN)
    assert not stops_for_replan(short, figures)
    said = capsys.readouterr().out
    assert "training at the cap of 12 tokens as it is" in said
    assert "the answers call for max_completion_length 24 or more (fix: --set max_completion_length=24" in said


def test_a_tools_profile_is_not_probed_without_its_turns(tmp_path, capsys):
    """The probe samples one answer without the tools' turns: a tools profile's answers are measured from its
    training steps instead (its tiny build answers in 8 tokens without the tools, in 21 with them)."""
    from trainer.answer_lengths import run_length_probe
    from trainer.state import AttemptState

    state = AttemptState(_profile("tools=[calculate]"), tmp_path, None, resolve_model=lambda p: ("unused", None))
    assert run_length_probe(state, None) is None and state.lengths is None
    assert "length probe: skipped (with tools the answers take turns)" in capsys.readouterr().out


def test_the_length_probe_is_off_at_zero(tmp_path, tiny_dir):
    from trainer.answer_lengths import run_length_probe

    state, loaded = _loaded(tmp_path, tiny_dir, "length_probe=0")
    assert run_length_probe(state, loaded) is None and state.lengths is None


def test_sampled_lengths_count_the_end_token_and_flag_the_cut():
    from evaluation.generate import sampled_length

    assert sampled_length([5, 6, 1, 0, 0], {1}, 5) == (3, False)
    assert sampled_length([5, 6, 7, 8, 9], {1}, 5) == (5, True)
    assert sampled_length([5, 1], {1, 2}, 8) == (2, False)


def test_probe_rows_spread_over_the_data():
    from trainer.answer_lengths import probe_rows

    rows = [{"i": i} for i in range(100)]
    assert [r["i"] for r in probe_rows(rows, 4)] == [0, 25, 50, 75]
    assert probe_rows(rows[:3], 24) == rows[:3] and probe_rows(rows, 0) == []


def test_training_lengths_and_summary_figures(tmp_path):
    from trainer.answer_lengths import LengthRecorder, completion_lengths, cut_share_warning, training_lengths
    from trainer.state import AttemptState

    recorder = LengthRecorder()
    scored = recorder.wrap(lambda completions=None, completion_ids=None, **kw: [1.0] * len(completion_ids))
    assert scored(completions=["a"] * 4, completion_ids=[[1] * 10, [1] * 20, [1] * 48, [1] * 30]) == [1.0] * 4
    rows = [{"cut_share": 0.25}, {"cut_share": 0.0}]
    figures = training_lengths(recorder, rows, 48)
    assert figures["samples"] == 4 and figures["p95"] == 48 and figures["mean"] == 27.0
    assert figures["cut_share"] == 0.125 and figures["source"] == "training"  # TRL's own share, every process
    state = AttemptState(_profile("max_completion_length=48"), tmp_path, None)
    summary = completion_lengths(state, recorder, rows)
    assert summary == {
        "planned_cap": 48,
        "planned_expected": None,  # no supervisor told the attempt the plan's, and the profile states none
        "measured_mean": 27.0,
        "measured_p95": 48,
        "cut_share": 0.125,
        "samples": 4,
        "source": "training",
        "switches": None,
        "overruled": None,
        "held": None,
    }
    state.lengths = {"mean": 20.0, "p95": 23, "cut_share": 0.0, "samples": 24, "source": "probe", "switches": {}}
    assert completion_lengths(state, recorder, rows)["source"] == "probe"  # the probe's, when it ran
    assert cut_share_warning([{"cut_share": 0.5}] * 5, 48).startswith("50% of the answers")


def test_training_warns_once_when_a_fifth_of_the_answers_are_cut(tmp_path):
    from trainer.answer_lengths import LengthRecorder
    from trainer.callbacks import TelemetryCallback

    class Memory:
        def sample(self):
            return {}

    class Progress:
        def __init__(self):
            self.lines = []

        def update(self, *args):
            pass

        def warn(self, line):
            self.lines.append(line)

    progress = Progress()
    telemetry = TelemetryCallback(
        tmp_path / "metrics.jsonl", ["accuracy"], Memory(), progress, lengths=LengthRecorder(), cap=48
    )
    state = type("State", (), {"global_step": 0, "max_steps": 20})()
    telemetry.on_train_begin(None, state, None)
    for step, share in enumerate([0.0, 0.1, 0.3, 0.4, 0.3, 0.5, 0.6, 0.6], 1):
        state.global_step = step
        telemetry.on_log(None, state, None, logs={"reward": 1.0, "completions/clipped_ratio": share})
    assert [r["cut_share"] for r in telemetry.rows] == [0.0, 0.1, 0.3, 0.4, 0.3, 0.5, 0.6, 0.6]
    assert len(progress.lines) == 1  # said once, at the first window of five steps past a fifth (steps 1 to 5)
    assert progress.lines[0].startswith("22% of the answers of the last 5 steps were cut at max_completion_length (48")
    written = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert written[-1]["cut_share"] == 0.6


def test_the_report_says_how_long_the_answers_ran():
    from trainer.report import _lengths_line

    lengths = {"planned_cap": 48, "planned_expected": 24, "measured_mean": 21.3, "measured_p95": 23}
    lengths.update(cut_share=0.0, samples=24, source="probe")
    assert _lengths_line(lengths) == (
        "- answer lengths (probe, 24 answers): 21.3 tokens on average, 23 at the 95th percentile, 0% cut at the "
        "cap of 48 (the plan expected 24)"
    )
    assert _lengths_line(None) == "- answer lengths: not measured"


def test_random_weights_have_no_answers_worth_measuring(tmp_path, tiny_dir, monkeypatch):
    from contract.environment import ENV_RANDOM_WEIGHTS
    from trainer.answer_lengths import run_length_probe

    state, loaded = _loaded(tmp_path, tiny_dir)
    monkeypatch.setenv(ENV_RANDOM_WEIGHTS, "1")
    assert run_length_probe(state, loaded) is None and state.lengths is None
