"""contract.length_rule: the figures of measured answers, when they overrule a plan, and what they call for."""

from __future__ import annotations

import pytest

from contract.length_rule import (
    CUT_WARNING_SHARE,
    MeasuredLengths,
    cut_warning,
    lengths_after,
    measure,
    needs_larger_cap,
    overruled,
    percentile,
    planned_from,
    round_cap,
)


def test_percentile_is_the_nearest_rank():
    assert percentile(list(range(1, 101))) == 95
    assert percentile([5]) == 5
    assert percentile([10, 1, 3, 2]) == 10  # 95% of four values: the fourth
    assert percentile(list(range(1, 21))) == 19


def test_measure_counts_mean_percentile_longest_and_cut_share():
    found = measure([10, 20, 30, 48], [False, False, False, True], 48)
    assert (found.samples, found.mean, found.p95, found.longest, found.cut_share, found.cap) == (
        4,
        27.0,
        48,
        48,
        0.25,
        48,
    )
    assert found.censored
    assert measure([], [], 48) is None


def test_a_measurement_reads_back_from_its_record_and_refuses_a_broken_one():
    found = measure([10, 20, 30], [False] * 3, 64)
    assert MeasuredLengths.from_json(found.to_json()) == found
    for broken in (None, [], {"samples": 3}, {**found.to_json(), "mean": 99.0}, {**found.to_json(), "cut_share": 2}):
        assert MeasuredLengths.from_json(broken) is None


@pytest.mark.parametrize(
    "lengths, cap, expected, why",
    [
        ([40] * 20, 48, 39, None),  # inside the cap, the mean near the plan's
        ([30] + [48] * 19, 48, 39, "reaches the cap of 48"),
        ([48] * 20, 48, 39, "none of the 20 answers ended within the cap of 48 tokens"),
        ([20] * 20, 48, 39, "0.51 x the 39 expected"),  # half the expected: time was planned twice too long
        ([70] * 20, 128, 40, "1.75 x the 40 expected"),
        ([20] * 20, 48, None, None),  # no expected length to hold the mean against
    ],
)
def test_overruled_when_answers_reach_the_cap_or_the_mean_is_far_from_the_plan(lengths, cap, expected, why):
    found = measure(lengths, [n >= cap for n in lengths], cap)
    text = overruled(found, cap, expected)
    assert (text is None) == (why is None)
    if why:
        assert why in text


def test_answers_at_the_cap_need_a_larger_one_all_cut_or_not():
    assert needs_larger_cap(measure([30] + [48] * 19, [False] + [True] * 19, 48), 48)
    assert not needs_larger_cap(measure([20] * 20, [False] * 20, 48), 48)
    # not one answer ended: they run longer than the cap (the tiny model at a cap of 20 answers in 21): a cut
    # measurement is a lower bound, never a verdict that the model does not stop
    every = measure([48] * 20, [True] * 20, 48)
    assert needs_larger_cap(every, 48)
    assert lengths_after(every, 48, 39) == (96, 48)
    why = overruled(every, 48, 39)
    assert "run longer than 48" in why and "does not end" not in why and "only cost more" not in why


def test_round_cap_steps():
    assert [round_cap(t) for t in (1, 16, 17, 60, 128, 129, 900)] == [16, 16, 32, 64, 128, 256, 1024]


def test_cut_answers_double_the_cap_and_keep_the_expected_length_as_a_lower_bound():
    cut = measure([30, 48, 48, 48], [False, True, True, True], 48)
    assert lengths_after(cut, 48, 24) == (96, 44)
    assert lengths_after(cut, 48, 60) == (96, 60)  # a cut mean is a lower bound: a larger plan stands


def test_answers_inside_the_cap_keep_it_and_take_the_mean():
    found = measure([10] * 19 + [30], [False] * 20, 48)
    assert lengths_after(found, 48, 39) == (48, 11)  # the cap never shrinks here: that is the next plan's
    long = measure([100] * 19 + [120], [False] * 20, 128)
    assert lengths_after(long, 128, 40) == (128, 101)
    near = measure([110] * 20, [False] * 20, 128)
    assert lengths_after(near, 128, 40) == (256, 110)  # 1.25 x 110 does not fit 128


def test_a_plan_from_a_measurement_covers_its_percentile_or_doubles_a_cut_one():
    assert planned_from(measure([20] * 19 + [23], [False] * 20, 48)) == (32, 20)
    assert planned_from(measure([400] * 19 + [700], [False] * 20, 768)) == (512, 415)
    assert planned_from(measure([768] * 20, [True] * 20, 768)) == (1536, 768)


def test_a_cut_measurement_is_a_lower_bound_never_the_answers_length():
    # a smoke run's answers all cut at 2 tokens, or at 8: the plan's estimate (cap 384, expected 190) stands
    for cap in (2, 8):
        cut = measure([cap] * 24, [True] * 24, cap)
        assert cut.to_json()["censored"] is True
        assert planned_from(cut, (384, 190)) == (384, 190)
    # a cut measurement longer than the estimate raises both
    assert planned_from(measure([768] * 20, [True] * 20, 768), (512, 200)) == (1536, 768)
    # half of them cut: still censored, the mean a lower bound
    assert planned_from(measure([10] * 10 + [48] * 10, [False] * 10 + [True] * 10, 48), (64, 40)) == (96, 40)
    # answers measured whole replace the estimate, shorter or longer
    assert planned_from(measure([20] * 19 + [23], [False] * 20, 48), (384, 190)) == (32, 20)


def test_the_cut_warning_reads_a_window_of_steps():
    assert cut_warning([0.5] * 4, 48) is None  # too few steps yet
    assert cut_warning([0.0] * 10 + [CUT_WARNING_SHARE] * 5, 48) is None  # at the share: not past it
    text = cut_warning([0.0] * 10 + [0.3, 0.4, 0.3, 0.5, 0.5], 48)
    assert text.startswith("40% of the answers of the last 5 steps were cut at max_completion_length (48 tokens)")
    assert "--set max_completion_length=96" in text
    assert cut_warning([None, 0.5, 0.5, 0.5, 0.5, 0.5], 48) is not None  # a step without the figure is passed over
