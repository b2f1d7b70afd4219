"""The `programs` task: generated tiny stdin/stdout problems, their test cases and splits, and the
completions its warm start teaches."""

from __future__ import annotations

import json

import pytest

from rewards import REWARDS
from rewards.execution import binary_code, code
from tasks import PROGRAMS_TEST_SIZE, TASKS, load_task, programs
from tiny_model import program_warm_start


def test_the_same_seed_gives_the_same_rows_and_a_longer_list_starts_with_the_shorter():
    assert programs.generate(30, seed=5) == programs.generate(30, seed=5)
    assert programs.generate(200, seed=5)[:30] == programs.generate(30, seed=5)
    assert programs.generate(30, seed=5) != programs.generate(30, seed=6)
    with pytest.raises(ValueError, match="whole number"):
        programs.generate(-1)


def test_rows_carry_a_reference_program_and_test_cases_in_open_r1_layout():
    for row in programs.generate(50, seed=1):
        info = json.loads(row["verification_info"])
        assert info["language"] == "python"
        assert len(info["test_cases"]) == programs.TEST_CASES
        assert {case["type"] for case in info["test_cases"]} == {"stdin_stdout"}
        first, second = row["answer"].splitlines()
        assert first.endswith("= map(int, input().split())") and second.startswith("print(")
        assert "```python" in row["question"]


def test_every_reference_program_passes_its_own_test_cases_in_the_sandbox():
    rows = programs.generate(40, seed=2)
    completions = [program_warm_start.completion(row) for row in rows]
    infos = [row["verification_info"] for row in rows]
    assert binary_code(completions, verification_info=infos) == [1.0] * len(rows)
    # a program of another row's expression fails some case: the tests tell the expressions apart
    shifted = completions[1:] + completions[:1]
    assert sum(code(shifted, verification_info=infos)) < len(rows) / 2


def test_the_taught_completion_has_the_answer_layout():
    rows = programs.generate(20, seed=3)
    texts = [program_warm_start.completion(row) for row in rows]
    assert REWARDS["xml_soft"](texts, answer=[row["answer"] for row in rows]) == [1.0] * len(rows)


def test_the_question_count_bounds_every_stream_and_the_held_out_split_is_distinct():
    seen = {row["question"] for row in programs.generate(20000, seed=0)}
    assert 0.95 * programs.QUESTIONS < len(seen) <= programs.QUESTIONS
    with pytest.raises(ValueError, match="distinct questions"):
        programs.distinct(programs.QUESTIONS + 1, seed=0)


def test_registered_task_keeps_the_test_split_fixed_and_disjoint_and_passes_the_test_cases_on():
    assert "programs" in TASKS
    test = load_task("programs", "test")
    assert len(test) == PROGRAMS_TEST_SIZE == len({row["prompt"][-1]["content"] for row in test})
    assert load_task("programs", "test", seed=9) == test
    train = load_task("programs", "train", limit=500, seed=4)
    assert len(train) == 500
    assert not {row["prompt"][-1]["content"] for row in test} & {row["prompt"][-1]["content"] for row in train}
    assert all(json.loads(row["verification_info"])["test_cases"] for row in train + test)
    assert load_task("programs", "train", limit=50, seed=4) == train[:50]


def test_warm_start_problems_never_hold_a_held_out_or_check_question():
    held_out = {row["prompt"][-1]["content"] for row in load_task("programs", "test")}
    checks = program_warm_start.check_rows()
    assert len(checks) == program_warm_start.CHECK_ROWS
    assert not held_out & {row["question"] for row in checks}
    rows = program_warm_start.training_rows(seed=3407, count=2000)
    assert not (held_out | {row["question"] for row in checks}) & {row["question"] for row in rows}
    assert program_warm_start.training_rows(seed=3407, count=40) == rows[:40]
