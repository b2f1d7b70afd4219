"""Does a run show the signal GRPO learns from? Per-group figures from the rewards TRL saw, the progress line,
the report's table and plot, and the one-line warning when most groups teach nothing."""

from __future__ import annotations

import asyncio
import json

import pytest

from trainer.group_signal import GroupSignal, group_figures, no_signal_share, no_signal_warning
from trainer.plots import write_plots
from trainer.report import signal_figures, write_report

WEIGHTS = {"xml_soft": 0.5, "accuracy": 2.0}


def test_groups_alike_spread_and_correct_split_from_one_batch():
    # 2 groups of 4: the first all right and well formed (alike), the second mixed
    batch = {"xml_soft": [1, 1, 1, 1, 1, 0, 1, 1], "accuracy": [1, 1, 1, 1, 0, 0, 1, 0]}
    figures = group_figures([batch], WEIGHTS, 4, "accuracy")
    assert figures["groups"] == 2
    assert figures["groups_alike"] == 0.5
    assert figures["groups_all_correct"] == 0.5 and figures["groups_all_wrong"] == 0.0
    # second group's totals 0.5, 0, 2.5, 0.5: sample sd (as TRL scales advantages) 1.1087; mean over 2 groups
    assert figures["group_reward_spread"] == pytest.approx(1.1087 / 2, abs=1e-3)


def test_a_group_alike_in_total_but_mixed_in_parts_counts_as_alike():
    # 0.5 * 1 + 2 * 0 == 0.5 * 1 + 2 * 0: same total, no advantage whatever the parts
    batch = {"xml_soft": [1, 1], "accuracy": [0, 0]}
    figures = group_figures([batch], WEIGHTS, 2, "accuracy")
    assert figures["groups_alike"] == 1.0 and figures["groups_all_wrong"] == 1.0


def test_none_scores_count_as_zero_and_without_correctness_there_is_no_split():
    batch = {"xml_soft": [None, 0.0, 1, 1], "accuracy": [0, float("nan"), 1, 1]}
    figures = group_figures([batch], WEIGHTS, 2)
    assert figures["groups_alike"] == 1.0 and "groups_all_correct" not in figures
    assert no_signal_share(figures) == 1.0


def test_incomplete_or_misshapen_batches_are_left_out():
    whole = {"xml_soft": [1, 0], "accuracy": [1, 0]}
    assert group_figures([{"accuracy": [1, 0]}], WEIGHTS, 2) is None
    assert group_figures([{"xml_soft": [1, 0, 1], "accuracy": [1, 0, 1]}], WEIGHTS, 2) is None
    assert group_figures([whole, {"accuracy": [1, 1]}], WEIGHTS, 2)["groups"] == 1
    assert group_figures([], WEIGHTS, 2) is None
    assert group_figures([whole], WEIGHTS, 1) is None  # one completion a group: no group at all


def test_wrapped_rewards_record_what_they_return_batch_by_batch():
    signal = GroupSignal(WEIGHTS, 2, "accuracy")

    def xml_soft(completions, **kwargs):
        return [1.0] * len(completions)

    def accuracy(completions, **kwargs):
        return [1.0 if c == "right" else 0.0 for c in completions]

    soft, acc = signal.wrap("xml_soft", xml_soft), signal.wrap("accuracy", accuracy)
    assert soft.__name__ == "xml_soft" and acc.__name__ == "accuracy"  # TRL names rewards by __name__
    for completions in (["right", "wrong"], ["wrong", "wrong"]):  # two scoring calls before one log
        assert soft(completions=completions) == [1.0, 1.0]
        acc(completions=completions)
    figures = signal.take()
    assert figures["groups"] == 2 and figures["groups_alike"] == 0.5 and figures["groups_all_wrong"] == 0.5
    assert signal.take() is None  # taken: the next step starts empty


def test_an_async_reward_is_left_unwrapped_and_the_figures_are_withheld():
    signal = GroupSignal({"mine": 1.0}, 2)

    async def mine(completions, **kwargs):
        return [1.0] * len(completions)

    assert signal.wrap("mine", mine) is mine
    assert asyncio.run(mine(completions=["a", "b"])) == [1.0, 1.0]
    assert signal.take() is None


def _rows(shares, steps=None):
    return [
        {
            "step": i + 1,
            "group_signal": {
                "groups": 8,
                "groups_alike": s,
                "group_reward_spread": 1 - s,
                "groups_all_correct": s / 4,
                "groups_all_wrong": 3 * s / 4,
            },
        }
        for i, s in enumerate(shares[:steps] if steps else shares)
    ]


def test_warning_names_the_share_and_the_remedy_only_when_most_groups_teach_nothing():
    assert no_signal_warning(_rows([0.5] * 20)) is None
    assert no_signal_warning(_rows([0.9] * 5)) is None  # too few steps to say
    line = no_signal_warning(_rows([0.5] * 10 + [0.82] * 10))
    assert line.startswith("82% of groups are all-correct or all-wrong (20% all correct, 62% all wrong)")
    assert "raise temperature or num_generations, or pick harder/easier data" in line


def test_report_shows_the_signal_table_the_warning_and_the_plot(tmp_path):
    rows = [
        {**row, "reward": 1.0, "rewards": {"accuracy": 0.5}, "completion_length": 20.0, "memory": {"rss_gib": 0.5}}
        for row in _rows([0.3] * 10 + [0.9] * 10)
    ]
    signal = signal_figures(rows)
    assert signal["groups_alike"] == {"first": 0.3, "last": 0.9}
    assert signal["warning"].startswith("90% of groups")
    plots = write_plots(tmp_path, rows, ["accuracy"], "cpu", None, "run")
    assert "group_signal.png" in plots and (tmp_path / "group_signal.png").stat().st_size > 1000
    summary = {
        "status": "ok",
        "steps": 20,
        "max_steps": 20,
        "train_seconds": 1.0,
        "wall_seconds": 2.0,
        "profile": {"name": "p", "model": "tiny", "dataset": "arithmetic"},
        "device": {"name": "CPU"},
        "backend": "transformers",
        "train_rows": 5,
        "dropped_prompts": 0,
        "memory": {"peak_gib": 0.5, "estimate_gib": 0.6, "measure": "RSS", "ratio": 0.8},
        "rewards": {"window": 10, "total": {"first": 1.0, "last": 1.0}},
        "accuracy": {"samples": 2, "before": 0.5, "after": 0.5},
        "group_signal": signal,
        "plots": plots,
    }
    write_report(tmp_path, summary)
    report = (tmp_path / "report.md").read_text()
    assert "| groups with one reward for all completions (no advantage) | 0.300 | 0.900 |" in report
    assert "**Warning: 90% of groups are all-correct or all-wrong" in report
    assert "![group_signal](group_signal.png)" in report
    assert json.loads((tmp_path / "summary.json").read_text())["group_signal"]["window"] == 10
    assert signal_figures([{"step": 1, "group_signal": None}]) is None


def test_progress_line_shows_alike_groups_and_spread(capsys):
    from trainer.progress import Progress

    progress = Progress("p", 1, "cpu")
    progress.update(
        1,
        1,
        {
            "reward": 2.0,
            "step_time": 0.3,
            "memory": {"rss_gib": 0.5},
            "group_signal": {"groups_alike": 0.375, "group_reward_spread": 0.61},
        },
    )
    progress.warn("82% of groups are all-correct or all-wrong")
    out = capsys.readouterr().out
    assert "alike groups 38%  spread 0.61" in out
    assert "[p] warning: 82% of groups are all-correct or all-wrong" in out
