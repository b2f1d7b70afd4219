"""Tasks: the registry, GSM8K loading, prompts, the arithmetic generator, load_task, and length filtering."""

from __future__ import annotations

import ast
import json
import operator
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from contract.errors import UsageError
from rewards import REWARDS, for_layout
from support.waiting import run_to_end
from tasks import ARITHMETIC_TEST_SIZE, ARITHMETIC_TRAIN_SIZE, TASKS, describe, load_task, task_names
from tasks.arithmetic import LEVELS, TEMPLATES, generate
from tasks.gsm8k import extract_gold, load_gsm8k
from tasks.prompts import SYSTEM_PROMPT, build_prompt, count_prompt_tokens, filter_by_length, to_prompt_rows
from tasks.user_data import DataSpec

REPO = Path(__file__).resolve().parents[3]


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines), encoding="utf-8"
    )
    return path


# ---------------------------------------------------------------- GSM8K pieces


@pytest.mark.parametrize(
    "text, gold",
    [
        ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72", "72"),
        ("Total is $1,000.\n#### 1,000", "1000"),
        ("#### -3", "-3"),
        ("#### 0.5 ", "0.5"),
        ("a #### 1\nb #### 2", "2"),  # the last marker counts
        ("72", "72"),  # a bare answer is the answer
        ("1,250", "1250"),
    ],
)
def test_extract_gold(text, gold):
    assert extract_gold(text) == gold


@pytest.mark.parametrize("text", ["", "   ", "steps\n####", "#### ,", None, 72])
def test_extract_gold_refuses_empty_or_non_text(text):
    with pytest.raises(ValueError):
        extract_gold(text)


def test_prompt_asks_for_the_format_the_rewards_score():
    prompt = build_prompt("  How many apples?\n")
    assert prompt == [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "How many apples?"}]
    assert (
        SYSTEM_PROMPT.index("<reasoning>")
        < SYSTEM_PROMPT.index("</reasoning>")
        < SYSTEM_PROMPT.index("<answer>")
        < SYSTEM_PROMPT.index("</answer>")
    )
    # The layout shown in the instructions is itself a strict completion.
    shown = SYSTEM_PROMPT[SYSTEM_PROMPT.index("<reasoning>") :]
    assert REWARDS["xml_strict"]([shown]) == [1.0]


def test_to_prompt_rows():
    rows = [{"question": "Q1", "answer_text": "s\n#### 5", "answer": "5"}]
    assert to_prompt_rows(rows) == [{"prompt": build_prompt("Q1"), "answer": "5"}]


# ---------------------------------------------------------------- local files (through tasks.user_data)


def test_jsonl_rows_through_user_data(tmp_path):
    path = write_jsonl(
        tmp_path / "data.jsonl",
        [
            {"question": "Q1", "answer": "two steps\n#### 1,000"},
            {"question": "Q2", "answer": "#### 7", "extra": 1},
        ]
        * 10,
    )
    spec = DataSpec(dataset=str(path), answer_pattern=r"#### (.+)")
    rows = load_task(spec, "train") + load_task(spec, "test")
    assert sorted({row["answer"] for row in rows}) == ["1000", "7"]
    assert len(rows) == 20 and rows[0]["prompt"] == build_prompt("Q1")


def test_lone_file_holds_out_a_tenth_and_keeps_file_order(tmp_path):
    path = write_jsonl(tmp_path / "mine.jsonl", [{"question": f"Q{i}", "answer": str(i)} for i in range(25)])
    train, test = load_task(str(path), "train"), load_task(str(path), "test")
    assert (len(train), len(test)) == (23, 2)
    assert [int(r["answer"]) for r in train] == sorted(int(r["answer"]) for r in train)
    assert not {r["answer"] for r in train} & {r["answer"] for r in test}


def test_train_file_finds_its_test_file_beside_it(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", [{"question": "Q1", "answer": "1"}] * 20)
    write_jsonl(tmp_path / "test.jsonl", [{"question": "T1", "answer": "2"}])
    assert len(load_task(str(tmp_path / "train.jsonl"), "train")) == 20
    assert load_task(str(tmp_path / "train.jsonl"), "test")[0]["prompt"][-1]["content"] == "T1"


def test_system_prompt_key_applies_to_every_task(tmp_path):
    assert (
        load_task(DataSpec(dataset="arithmetic", system_prompt=""), "test", limit=1)[0]["prompt"][0]["role"] == "user"
    )
    assert load_task(DataSpec(dataset="arithmetic", system_prompt="Be brief."), "test", limit=1)[0]["prompt"][0] == {
        "role": "system",
        "content": "Be brief.",
    }


def test_unknown_split():
    with pytest.raises(UsageError, match="unknown GSM8K split 'validation'"):
        load_gsm8k("validation")
    with pytest.raises(UsageError, match="unknown split 'dev'"):
        load_task("arithmetic", "dev")


def test_real_gsm8k_files(gsm8k_dir):
    spec = DataSpec(dataset=str(gsm8k_dir), answer_pattern=r"#### (.+)")
    train, test = load_task(spec, "train"), load_task(spec, "test")
    assert (len(train), len(test)) == (7473, 1319)
    assert train[0]["answer"] == "72"
    assert train[0]["prompt"][-1]["content"].startswith("Natalia sold clips to 48 of her friends")
    assert test[0]["answer"] == "18"
    assert all(re.fullmatch(r"-?\d+(\.\d+)?", row["answer"]) for row in train + test)


# ---------------------------------------------------------------- hub and cache (in a child process,
# because huggingface_hub and datasets read HF_HOME and HF_HUB_OFFLINE when they are imported)

LOAD_SCRIPT = """
import json, sys
from contract.errors import UsageError
from tasks.gsm8k import load_gsm8k
try:
    rows = load_gsm8k(sys.argv[1])
except UsageError as error:
    print(error, file=sys.stderr)
    raise SystemExit(error.exit_code)
print(json.dumps(rows[:2]), len(rows))
"""


def run_loader(split: str, hf_home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    env.pop("HF_DATASETS_CACHE", None)
    env.pop("HF_HUB_CACHE", None)
    return run_to_end([sys.executable, "-c", LOAD_SCRIPT, split], cwd=REPO, env=env)


def test_hub_loader_offline_without_cache_is_a_clear_usage_error(tmp_path):
    result = run_loader("train", tmp_path / "hf")  # offline: refused at once, never a wait on the network
    assert result.returncode == 2, result.stderr
    message = result.stderr.strip()
    assert message.startswith("cannot load openai/gsm8k (main, train) offline (HF_HUB_OFFLINE)")
    assert "set `dataset:` to a JSONL file" in message and "answer_pattern" in message
    assert "Traceback" not in result.stderr


def test_hub_loader_reads_the_hub_cache_offline(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    revision = "0123456789abcdef0123456789abcdef01234567"
    repo_cache = tmp_path / "hf" / "hub" / "datasets--openai--gsm8k"
    (repo_cache / "refs").mkdir(parents=True)
    (repo_cache / "refs" / "main").write_text(revision)
    folder = repo_cache / "snapshots" / revision / "main"
    folder.mkdir(parents=True)
    table = pa.table(
        {"question": ["Q one?", "Q two?", "Q three?"], "answer": ["a\n#### 72", "b\n#### 1,000", "c\n#### -3"]}
    )
    pq.write_table(table, folder / "test-00000-of-00001.parquet")

    result = run_loader("test", tmp_path / "hf")
    assert result.returncode == 0, result.stderr
    first_two, count = result.stdout.rsplit(" ", 1)
    assert int(count) == 3
    assert json.loads(first_two) == [
        {"question": "Q one?", "answer_text": "a\n#### 72", "answer": "72"},
        {"question": "Q two?", "answer_text": "b\n#### 1,000", "answer": "1000"},
    ]
    # The train split is not in this cache: a clear refusal, not a download attempt.
    assert run_loader("train", tmp_path / "hf").returncode == 2


def test_tasks_import_no_heavy_library():
    code = (
        "import sys, tasks, tasks.gsm8k, tasks.arithmetic; "
        "print(sorted(m for m in ('torch', 'transformers', 'trl', 'unsloth', 'datasets') if m in sys.modules))"
    )
    out = run_to_end([sys.executable, "-c", code], cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- arithmetic generator

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def evaluate(expression: str) -> float:
    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        raise AssertionError(f"unexpected expression {expression!r}")

    return walk(ast.parse(expression, mode="eval"))


def test_same_seed_same_rows_and_prefix_stable():
    assert generate(50, seed=7) == generate(50, seed=7)
    assert generate(50, seed=7)[:10] == generate(10, seed=7)
    assert generate(20, seed=7) != generate(20, seed=8)
    assert generate(20, seed=7, level=2) == generate(20, seed=7, level=2)
    assert generate(0) == []


@pytest.mark.parametrize("level", [None, "mixed"])
def test_rows_have_gsm8k_shape_and_correct_arithmetic(level):
    rows = generate(600, seed=3, level=level)
    for row in rows:
        assert set(row) == {"question", "answer_text", "answer"}
        assert row["question"].endswith("?")
        lines = row["answer_text"].split("\n")
        assert lines[-1] == f"#### {row['answer']}"
        assert extract_gold(row["answer_text"]) == row["answer"]
        assert int(row["answer"]) >= 0
        steps = [re.search(r"<<([^=]+)=(-?\d+)>>(-?\d+)", line) for line in lines[:-1]]
        assert all(steps), row["answer_text"]
        for step in steps:
            expression, value, shown = step.groups()
            assert evaluate(expression) == int(value) == int(shown)
        assert steps[-1].group(2) == row["answer"]


def test_levels_set_the_number_of_steps_and_every_template_appears():
    for level, steps in zip(LEVELS, ((1, 1), (2, 3), (3, 4), (4, 7))):
        rows = generate(300, seed=1, level=level)
        counts = {row["answer_text"].count("<<") for row in rows}
        assert min(counts) >= steps[0] and max(counts) <= steps[1], (level, counts)
    assert generate(50, seed=1) == generate(50, seed=1, level=0)  # the default is the one-step level
    mixed = generate(400, seed=2, level="mixed")
    kinds = {len(row["answer_text"].split("\n")) for row in mixed}
    assert len(kinds) >= 4
    first_words = {row["answer_text"].split(" ")[0] for row in mixed}
    assert len(first_words) >= len(TEMPLATES) - 2


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"n": -1}, "n must be a whole number"),
        ({"n": 2.5}, "n must be a whole number"),
        ({"n": 1, "level": 4}, "level must be one of 0, 1, 2, 3"),
        ({"n": 1, "level": True}, "level must be"),
    ],
)
def test_generate_refuses_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate(**kwargs)


@pytest.mark.parametrize("level", [None, "mixed"])
def test_generated_solutions_score_full_marks(level):
    rows = generate(300, seed=5, level=level)
    texts = [
        f"<reasoning>\n{row['answer_text'].rpartition('####')[0].strip()}\n</reasoning>\n"
        f"<answer>\n{row['answer']}\n</answer>"
        for row in rows
    ]
    golds = [row["answer"] for row in rows]
    for name, fn in for_layout().items():
        assert fn(texts, answer=golds) == [1.0] * len(rows), name


# ---------------------------------------------------------------- load_task


def test_load_task_arithmetic_splits_are_fixed_and_disjoint():
    test = load_task("arithmetic", "test")
    assert len(test) == ARITHMETIC_TEST_SIZE
    assert load_task("arithmetic", "test", seed=99) == test  # the held-out set ignores the seed
    assert load_task("arithmetic", "test", limit=20) == test[:20]
    held_out = {row["prompt"][1]["content"] for row in test}
    for seed in (0, 1, 2):
        train = load_task("arithmetic", "train", seed=seed)
        assert len(train) == ARITHMETIC_TRAIN_SIZE
        assert not held_out & {row["prompt"][1]["content"] for row in train}
    assert load_task("arithmetic", "train", limit=30, seed=4) == load_task("arithmetic", "train", limit=30, seed=4)
    assert load_task("arithmetic", "train", limit=30, seed=4) != load_task("arithmetic", "train", limit=30, seed=5)
    row = test[0]
    assert set(row) == {"prompt", "answer"}
    assert row["prompt"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert row["prompt"][1]["role"] == "user"


@pytest.mark.parametrize(
    "dataset, message",
    [
        ("no/such/file.jsonl", "no such file or folder"),
        ("", "unknown dataset ''"),
        (None, "unknown dataset None"),
    ],
)
def test_load_task_refuses_bad_datasets(dataset, message):
    with pytest.raises(UsageError, match=message):
        load_task(dataset, "train")


def test_the_registry_names_and_describes_every_task():
    assert task_names() == ("gsm8k", "arithmetic", "programs")
    assert set(describe()) == set(TASKS)
    assert all(line and "\n" not in line for line in describe().values())
    assert load_task("arithmetic", "train", limit=3, seed=1) == to_prompt_rows(TASKS["arithmetic"].load("train", 3, 1))


def test_the_registry_imports_nothing_heavy():
    """The launcher checks a profile's dataset against task_names(): that must stay instant."""
    code = (
        "import sys, tasks; tasks.task_names(); "
        "print(sorted(m for m in ('torch', 'datasets', 'transformers', 'trl') if m in sys.modules))"
    )
    out = run_to_end([sys.executable, "-c", code], cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"


def test_load_task_refuses_a_bad_limit():
    with pytest.raises(UsageError, match="limit must be a whole number"):
        load_task("arithmetic", "train", limit=-1)


# ---------------------------------------------------------------- filtering by prompt length


@pytest.fixture(scope="module")
def word_tokenizer():
    """One token per whitespace-separated word, built offline with the tokenizers library."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    core = Tokenizer(models.WordLevel({"[UNK]": 0, "apples": 1}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return core


@pytest.fixture(scope="module")
def chat_tokenizer(word_tokenizer):
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=word_tokenizer, unk_token="[UNK]")
    tokenizer.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    return tokenizer


def rows_with_questions(word_counts: list[int]) -> list[dict]:
    return to_prompt_rows(
        [{"question": " ".join(["apples"] * n), "answer_text": "1", "answer": "1"} for n in word_counts]
    )


SYSTEM_WORDS = len(SYSTEM_PROMPT.split())


def test_count_prompt_tokens_with_and_without_a_chat_template(word_tokenizer, chat_tokenizer):
    prompt = rows_with_questions([5])[0]["prompt"]
    # Plain join: the system words and the question words.
    assert count_prompt_tokens(prompt, word_tokenizer) == SYSTEM_WORDS + 5
    # Chat template: "system:" and "user:" prefixes and the generation prompt "assistant:".
    assert count_prompt_tokens(prompt, chat_tokenizer) == SYSTEM_WORDS + 5 + 3
    chat_tokenizer_without_template = type(chat_tokenizer)(tokenizer_object=word_tokenizer, unk_token="[UNK]")
    assert count_prompt_tokens(prompt, chat_tokenizer_without_template) == SYSTEM_WORDS + 5


def test_filter_by_length_keeps_rows_that_fit_and_counts_the_rest(chat_tokenizer, word_tokenizer):
    rows = rows_with_questions([1, 10, 3, 30, 7])
    limit = SYSTEM_WORDS + 3 + 7  # with the chat template's 3 words
    kept, dropped = filter_by_length(rows, chat_tokenizer, limit)
    assert [len(row["prompt"][1]["content"].split()) for row in kept] == [1, 3, 7]
    assert dropped == 2
    kept, dropped = filter_by_length(rows, word_tokenizer, SYSTEM_WORDS + 10)
    assert ([len(row["prompt"][1]["content"].split()) for row in kept], dropped) == ([1, 10, 3, 7], 1)
    assert filter_by_length(rows, chat_tokenizer, 1) == ([], 5)
    assert filter_by_length(rows, chat_tokenizer, 0) == (rows, 0)  # 0: no limit
