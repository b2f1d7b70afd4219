"""Data and rewards written for TRL and open-r1: every column reaches a reward (and an environment's reset) under
its own name, a gold that is a worked solution gives its final answer or is refused with the fix, and a
recipe's `accuracy` is the LaTeX-aware `math` reward."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contract.errors import UsageError
from rewards import get_reward
from tasks import load_task
from tasks.user_data import DataSpec, final_answer

# TRL drops these from the row before it passes the rest as keyword arguments
TRL_OWN = ("prompt", "completion", "completion_ids")


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _call_as_trl(reward, rows, completions):
    """A reward called as GRPOTrainer calls it: one keyword per column, a list with one value per completion."""
    columns = {key: [row[key] for row in rows] for key in rows[0] if key not in TRL_OWN}
    return reward(prompts=[row["prompt"] for row in rows], completions=completions, **columns)


def _worked(value: str, last: str) -> str:
    """A MATH-style worked solution whose final answer is boxed at the end."""
    return f"We simplify step by step.\nFirst, note the sum is {value}.\nSo the answer is $\\boxed{{{last}}}$."


def _math_file(tmp_path, count=20):
    rows = [
        {"problem": f"What is {i} over {i + 1}?", "solution": _worked("x", f"\\frac{{{i}}}{{{i + 1}}}")}
        for i in range(1, count + 1)
    ]
    return _jsonl(tmp_path / "math.jsonl", rows)


def test_gold_column_reaches_the_reward_under_its_own_name(tmp_path):
    rows = load_task(DataSpec(dataset=str(_math_file(tmp_path)), system_prompt=""), "train", limit=4)
    seen = {}

    # open-r1's signature: the gold is read from `solution`, the raw worked solution, as TRL passes it
    def accuracy_reward(completions, solution, **kwargs):
        seen.update(solution=solution, kwargs=kwargs)
        return [1.0 if "\\boxed" in text else 0.0 for text in solution]

    assert _call_as_trl(accuracy_reward, rows, ["x"] * len(rows)) == [1.0] * 4
    assert seen["solution"][0] == _worked("x", "\\frac{1}{2}")  # the cell as written, not renamed
    assert seen["kwargs"]["answer"][0] == "\\frac{1}{2}"  # the project's own rewards read the final answer
    assert seen["kwargs"]["problem"][0] == "What is 1 over 2?"  # the question column too


def test_ground_truth_column_named_by_answer_field(tmp_path):
    path = _jsonl(tmp_path / "d.jsonl", [{"question": f"{i} + {i}?", "ground_truth": str(2 * i)} for i in range(20)])
    rows = load_task(DataSpec(dataset=str(path), answer_field="ground_truth"), "train", limit=3)

    def exact(completions, ground_truth, **kwargs):  # the shape of TRL's docs example
        return [1.0 if c == g else 0.0 for c, g in zip(completions, ground_truth)]

    assert _call_as_trl(exact, rows, [row["ground_truth"] for row in rows]) == [1.0] * 3
    assert [row["answer"] for row in rows] == [row["ground_truth"] for row in rows]


def test_an_environment_reset_gets_its_column_by_name(tmp_path):
    from tools import check_environment_starts

    path = _jsonl(tmp_path / "d.jsonl", [{"prompt_text": f"Find {i}", "target": i} for i in range(20)])
    spec = DataSpec(dataset=str(path), question_field="prompt_text", answer_field="target")
    rows = load_task(spec, "train", limit=3)
    targets = []

    class Game:
        def reset(self, target, **row):
            targets.append(target)

    check_environment_starts(Game, rows)
    assert targets == [row["target"] for row in rows] and all(isinstance(t, int) for t in targets)


@pytest.mark.parametrize(
    "cell, gold",
    [
        ("She has 3 + 4 = <<3+4=7>>7 apples.\nThen 7 * 2 = 14.\n#### 14", "14"),  # GSM8K's shape
        ("Paid 1,000 + 200.\n#### 1,200", "1200"),
        ("So $x = \\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
        ("First \\boxed{3}, corrected: \\boxed{\\sqrt{2}}", "\\sqrt{2}"),  # the last box counts
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # braces inside the box
        ("72", "72"),
        ("Paris", "Paris"),
        ("a long worked solution " * 12, None),  # no marker: its final answer cannot be told
        ("line one\nline two\nline three", None),
        ("\\boxed{unclosed", None),
    ],
)
def test_final_answer_of_a_gold_cell(cell, gold):
    assert final_answer(cell) == gold


def test_gsm8k_file_without_answer_pattern_gives_the_number(tmp_path):
    rows = [{"question": f"Q{i}?", "answer": f"Half of {2 * i} is {i}.\nSo it is {i}.\n#### {i}"} for i in range(20)]
    loaded = load_task(DataSpec(dataset=str(_jsonl(tmp_path / "gsm.jsonl", rows))), "train", limit=2)
    assert [row["answer"] for row in loaded] == ["0", "1"]


def test_worked_solutions_without_a_final_answer_are_refused_with_the_fix(tmp_path):
    steps = "First we add the numbers. Then we take half of the result, which is the answer we want. " * 3
    path = _jsonl(tmp_path / "w.jsonl", [{"problem": f"P{i}", "solution": steps} for i in range(20)])
    with pytest.raises(UsageError) as info:
        load_task(DataSpec(dataset=str(path)), "train")
    text = str(info.value)
    assert "'solution'" in text and "answer_pattern" in text and "\\boxed{}" in text and "#### N" in text


# 12 LaTeX golds and an answer equal to each, or a plainly wrong one the number match takes for right
LATEX = [
    ("\\frac{1}{2}", "0.5", 1.0),
    ("\\frac{1}{2}", "2", 0.0),
    ("\\frac{3}{4}", "3/4", 1.0),
    ("\\sqrt{2}", "2", 0.0),
    ("2\\sqrt{3}", "\\sqrt{12}", 1.0),
    ("\\pi", "3", 0.0),
    ("10^{3}", "1000", 1.0),
    ("\\frac{\\pi}{4}", "4", 0.0),
    ("-\\frac{1}{3}", "1/3", 0.0),
    ("3x+1", "1", 0.0),
    ("\\dfrac{5}{2}", "2.5", 1.0),
    ("(1, 2)", "2", 0.0),
]


def _answered(text: str) -> str:
    return f"<reasoning>\nwork\n</reasoning>\n<answer>\n{text}\n</answer>"


def test_recipe_accuracy_is_the_latex_aware_reward(tmp_path):
    from profiles.load import load_profile
    from support.profile_data import write

    recipe = "model_name_or_path: tiny\nuse_cpu: true\nuse_vllm: false\nload_in_4bit: false\noptim: adamw_torch\n"
    recipe += "dataset_name: arithmetic\nmax_steps: 4\n"
    for name in ("accuracy", "accuracy_reward"):
        profile = load_profile(write(tmp_path, recipe + f"reward_funcs: [{name}, format]\n"))
        assert list(profile.rewards) == ["math", "xml_strict"] and profile.correctness == "math"
    completions = [_answered(answer) for _gold, answer, _right in LATEX]
    golds = [gold for gold, _answer, _right in LATEX]
    expected = [right for _gold, _answer, right in LATEX]
    assert get_reward("math")(completions, answer=golds) == expected
    misjudged = sum(a != e for a, e in zip(get_reward("accuracy")(completions, answer=golds), expected))
    assert misjudged >= 6  # the project's number match, which the recipe's name used to mean


def test_the_projects_own_profiles_keep_accuracy():
    from profiles.load import load_profile

    profile = load_profile(Path(__file__).parents[3] / "profiles" / "cpu-tiny-8gen.yaml")
    assert "accuracy" in profile.rewards and "math" not in profile.rewards and profile.correctness == "accuracy"


def test_check_data_says_the_gold_is_read_from_worked_solutions(tmp_path):
    from types import SimpleNamespace

    from tasks import check_data

    profile = SimpleNamespace(dataset=str(_math_file(tmp_path)), train_samples=0, eval_samples=2, seed=0)
    assert "the final answer of each worked solution in 'solution'" in check_data(profile)
    plain = _jsonl(tmp_path / "plain.jsonl", [{"question": f"{i}?", "answer": str(i)} for i in range(20)])
    assert "worked solution" not in check_data(
        SimpleNamespace(dataset=str(plain), train_samples=0, eval_samples=2, seed=0)
    )


def test_text_prompts_stay_text_as_trls_standard_format(tmp_path):
    from tasks import check_data

    rows = [{"prompt": f"{i} plus 1 is", "answer": str(i + 1)} for i in range(20)]
    path = _jsonl(tmp_path / "text.jsonl", rows)
    loaded = load_task(DataSpec(dataset=str(path)), "train")
    assert loaded[0]["prompt"] == "0 plus 1 is"  # no system turn, no chat
    named = load_task(DataSpec(dataset=str(path), question_field="prompt"), "train")
    assert named[0]["prompt"][-1] == {"role": "user", "content": "0 plus 1 is"}  # a question_field: a conversation
    talking = load_task(DataSpec(dataset=str(path), conversation=True), "train")  # with tools: turns of a chat
    assert talking[0]["prompt"][-1] == {"role": "user", "content": "0 plus 1 is"}
    # a system prompt of the profile's own (open-r1's recipes write one): a conversation that opens with it
    r1 = load_task(DataSpec(dataset=str(path), system_prompt="Think first."), "train")
    assert r1[0]["prompt"] == [
        {"role": "system", "content": "Think first."},
        {"role": "user", "content": "0 plus 1 is"},
    ]
    from types import SimpleNamespace

    said = check_data(SimpleNamespace(dataset=str(path), train_samples=0, eval_samples=2, seed=0))
    assert "prompts: 'prompt' as text, as TRL's standard format" in said


def test_an_answer_column_replaced_by_another_columns_gold_is_said(tmp_path):
    from types import SimpleNamespace

    from tasks import check_data

    rows = [{"question": f"{i}?", "answer": "see solution", "solution": f"#### {i}"} for i in range(20)]
    path = _jsonl(tmp_path / "two.jsonl", rows)
    spec = SimpleNamespace(dataset=str(path), answer_field="solution", train_samples=0, eval_samples=2, seed=0)
    assert "column 'answer' reaches the rewards as the gold read from 'solution'" in check_data(spec)
    assert load_task(DataSpec(dataset=str(path), answer_field="solution"), "train")[3]["answer"] == "3"


def test_open_r1_code_data_reads_its_test_cases_as_the_gold(tmp_path):
    from types import SimpleNamespace

    from tasks import check_data

    # open-r1's verifiable-coding-problems layout: the problem, and verification_info holding the test cases
    # (a JSON text in the published parquet)
    info = {"language": "python", "test_cases": [{"input": "1 2\n", "output": "3\n", "type": "stdin_stdout"}] * 2}
    rows = [{"problem": f"Add two numbers ({i}).", "verification_info": json.dumps(info)} for i in range(20)]
    path = _jsonl(tmp_path / "code.jsonl", rows)
    loaded = load_task(DataSpec(dataset=str(path)), "train")
    assert loaded[0]["answer"] == "2 test cases" and json.loads(loaded[0]["verification_info"]) == info
    said = check_data(SimpleNamespace(dataset=str(path), train_samples=0, eval_samples=2, seed=0))
    assert "gold: the test cases in 'verification_info'" in said
    empty = _jsonl(tmp_path / "none.jsonl", [{"problem": "x", "verification_info": "{}"}] * 20)
    with pytest.raises(UsageError):
        load_task(DataSpec(dataset=str(empty)), "train")
