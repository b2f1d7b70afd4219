"""Rewards: the registry, exact scores for each reward, the real GSM8K solutions, and "never raises"."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rewards import (
    NOT_OF_ANSWERS,
    REWARDS,
    describe,
    extract_answer,
    for_layout,
    get_reward,
    get_reward_funcs,
    is_correct,
    parse_number,
)
from rewards.accuracy import accuracy
from rewards.format import number, xml_count, xml_soft, xml_strict
from rewards.parse import MAX_COMPLETION_CHARS, completion_text, find_numbers
from support.waiting import run_to_end

REPO = Path(__file__).resolve().parents[3]
NAMES = [
    "xml_strict",
    "xml_soft",
    "xml_count",
    "think_format",
    "think_count",
    "number",
    "accuracy",
    "math",
    "tool_ok",
    "soft_overlong",
    "code",
    "binary_code",
    "code_format",
]


def strict(reasoning: str, answer: str, trailing: str = "") -> str:
    return f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{answer}\n</answer>{trailing}"


def chat(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


# ---------------------------------------------------------------- registry


def test_registry_has_exactly_the_stable_names_in_order():
    assert list(REWARDS) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_function_name_matches_registry_name(name):
    # TRL logs rewards/<__name__>/mean: the name in the logs must be the name in the profile.
    assert REWARDS[name].__name__ == name
    assert get_reward(name) is REWARDS[name]


def test_describe_gives_first_docstring_line_of_each():
    lines = describe()
    assert list(lines) == NAMES
    for name, line in lines.items():
        assert line == REWARDS[name].__doc__.strip().splitlines()[0]
        assert "\n" not in line and line
    assert lines["xml_count"].startswith("Partial credit: 0.25 per tag")


def test_unknown_reward_lists_known_names():
    with pytest.raises(ValueError) as info:
        get_reward("acuracy")
    message = str(info.value)
    assert "'acuracy'" in message
    assert "xml_strict, xml_soft, xml_count, think_format, think_count, number, accuracy" in message


def test_unhashable_name_is_a_value_error():
    with pytest.raises(ValueError, match="known rewards"):
        get_reward(["accuracy"])


def test_get_reward_funcs_keeps_order_and_weights():
    funcs, weights = get_reward_funcs({"accuracy": 2, "xml_soft": 0.5})
    assert funcs == [accuracy, xml_soft]
    assert weights == [2.0, 0.5]
    assert all(type(w) is float for w in weights)


@pytest.mark.parametrize(
    "weights, match",
    [
        ({"accuracy": 1.0, "speed": 1.0}, "unknown reward 'speed'; known rewards: xml_strict"),
        ({"accuracy": "high"}, "weight of reward 'accuracy' must be a number, got 'high'"),
        ({"accuracy": True}, "weight of reward 'accuracy' must be a number"),
        ({}, "expected a mapping of reward name to weight"),
        (["accuracy"], "expected a mapping of reward name to weight"),
    ],
)
def test_get_reward_funcs_refuses_bad_input(weights, match):
    with pytest.raises(ValueError, match=match):
        get_reward_funcs(weights)


def test_rewards_import_no_heavy_library():
    code = (
        "import sys, rewards, rewards.format, rewards.accuracy, rewards.parse; "
        "print(sorted(m for m in ('torch', 'transformers', 'trl', 'unsloth', 'datasets') if m in sys.modules))"
    )
    out = run_to_end([sys.executable, "-c", code], cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"


def test_rewards_source_has_no_print():
    for source in (REPO / "rewards").glob("*.py"):
        assert "print(" not in source.read_text(), f"{source.name} prints"


# ---------------------------------------------------------------- xml_strict


@pytest.mark.parametrize(
    "text, expected",
    [
        (strict("48 / 2 = 24", "72"), 1.0),
        (strict("48 / 2 = 24", "72") + "\n", 1.0),  # one trailing newline allowed
        (strict("line one\nline two\n\nline four", "72"), 1.0),  # multi-line reasoning
        (strict("r", "$1,000 dollars"), 1.0),  # any answer text
        (strict("r", "72") + "\n\n", 0.0),  # two trailing newlines
        (strict("r", "72") + " ", 0.0),
        ("\n" + strict("r", "72"), 0.0),  # leading text
        ("Sure! " + strict("r", "72"), 0.0),
        (strict("r", "72") + "\nmore", 0.0),  # text after </answer>
        ("<reasoning>r</reasoning>\n<answer>\n72\n</answer>", 0.0),  # no newlines inside reasoning
        ("<reasoning>\nr\n</reasoning><answer>\n72\n</answer>", 0.0),  # no newline between blocks
        ("<reasoning>\nr\n</reasoning>\n\n<answer>\n72\n</answer>", 0.0),
        ("<reasoning>\nr\n</reasoning>\n<answer>72</answer>", 0.0),
        (strict("", "72"), 0.0),  # empty reasoning
        (strict("   ", "72"), 0.0),
        (strict("r", ""), 0.0),  # empty answer
        ("<reasoning>\n\n</reasoning>\n<answer>\n72\n</answer>", 0.0),
        ("<reasoning>\n</reasoning>\n<answer>\n72\n</answer>", 0.0),
        ("<reasoning>\nr\n</reasoning>\n<answer>\n</answer>", 0.0),
        (strict("r\n</reasoning>\n<reasoning>\nr", "72"), 0.0),  # a tag twice
        (strict("r <answer>5</answer>", "72"), 0.0),
        (strict("r", "72").replace("\n", "\r\n"), 0.0),
        ("<answer>\n72\n</answer>", 0.0),
        ("", 0.0),
        ("72", 0.0),
    ],
)
def test_xml_strict(text, expected):
    assert xml_strict([text]) == [expected]
    assert xml_strict([chat(text)]) == [expected]


# ---------------------------------------------------------------- xml_soft


@pytest.mark.parametrize(
    "text, expected",
    [
        (strict("r", "72"), 1.0),
        ("<reasoning>r</reasoning><answer>72</answer>", 1.0),
        ("  <reasoning> r </reasoning>\n\n\t<answer> 72 </answer>\n \n", 1.0),
        ("<reasoning>a\nb</reasoning> <answer>72</answer>", 1.0),
        ("Sure. <reasoning>r</reasoning><answer>72</answer>", 0.0),  # text before
        ("<reasoning>r</reasoning> so <answer>72</answer>", 0.0),  # text between
        ("<reasoning>r</reasoning><answer>72</answer> done", 0.0),  # text after
        ("<answer>72</answer><reasoning>r</reasoning>", 0.0),  # wrong order
        ("<reasoning></reasoning><answer>72</answer>", 0.0),  # empty reasoning
        ("<reasoning>r</reasoning><answer> </answer>", 0.0),  # empty answer
        ("<reasoning>r<answer>1</answer></reasoning><answer>72</answer>", 0.0),
        ("<reasoning>r</reasoning>", 0.0),
        ("<reasoning>r<answer>72</answer>", 0.0),
        ("", 0.0),
    ],
)
def test_xml_soft(text, expected):
    assert xml_soft([text]) == [expected]
    assert xml_soft([chat(text)]) == [expected]


# ---------------------------------------------------------------- xml_count


@pytest.mark.parametrize(
    "text, expected",
    [
        (strict("r", "72"), 1.0),
        (strict("r", "72") + "\n", 1.0),  # trailing whitespace is free
        ("<reasoning>r</reasoning><answer>72</answer>", 1.0),
        ("<reasoning>", 0.25),  # one tag alone earns its share
        ("some text </reasoning> more", 0.25),
        ("<answer>", 0.25),
        ("<answer>72</answer>", 0.5),
        ("<reasoning>r</reasoning>", 0.5),
        ("<reasoning>r</reasoning><answer>72", 0.75),
        (strict("r", "72") + "abc", 0.997),  # 3 characters after </answer>
        (strict("r", "72") + "\n  abc  \n", 0.997),
        (strict("r", "72") + "x" * 100, 0.9),
        (strict("r", "72") + "x" * 5000, 0.0),  # never below zero
        ("<answer>72</answer>" + "x" * 200, 0.3),
        ("<reasoning><reasoning>r</reasoning><answer>72</answer>", 0.75),  # a doubled tag earns nothing
        ("<answer>72</answer><reasoning>r</reasoning>", 0.0),  # every tag out of order, and
        # "<reasoning>r</reasoning>" after </answer> costs 0.024 on top
        ("</reasoning><reasoning>", 0.0),
        ("</reasoning><reasoning><answer>x</answer>", 0.5),  # the answer tags still earn
        ("", 0.0),
        ("no tags at all", 0.0),
    ],
)
def test_xml_count(text, expected):
    assert xml_count([text]) == [expected]
    assert xml_count([chat(text)]) == [expected]


# ---------------------------------------------------------------- number


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("72", 1.0),
        ("-3", 1.0),
        ("0.5", 1.0),
        (".5", 1.0),
        ("$1,000", 1.0),
        ("1000.00", 1.0),
        ("1/2", 1.0),
        ("72 dollars", 1.0),
        ("72%", 1.0),
        ("x = 72", 1.0),
        ("5 cm^2", 1.0),  # the 2 belongs to the unit
        ("3 apples and 4", 0.0),  # two numbers
        ("8 x 9 = 72", 0.0),
        ("seventy-two", 0.0),
        ("", 0.0),
        ("   ", 0.0),
    ],
)
def test_number(answer, expected):
    assert number([strict("r", answer)]) == [expected]
    assert number([f"<answer>{answer}</answer>"]) == [expected]


def test_number_needs_a_complete_answer_block():
    assert number(["72", "<answer>72", "72</answer>", "<reasoning>\n72\n</reasoning>"]) == [0.0] * 4


# ---------------------------------------------------------------- accuracy


@pytest.mark.parametrize(
    "answer, gold, expected",
    [
        ("72", "72", 1.0),
        ("$1,000", "1000", 1.0),
        ("1000", "1,000", 1.0),
        ("1000.00", "1000", 1.0),
        ("$1,000.00", "1000", 1.0),
        ("-3", "-3", 1.0),
        ("−3", "-3", 1.0),  # a typographic minus
        ("0.5", ".5", 1.0),
        (".5", "0.5", 1.0),
        ("1/2", "0.5", 1.0),
        ("72 dollars", "72", 1.0),  # units do not make it wrong
        ("$72.", "72", 1.0),
        ("72%", "72", 1.0),
        ("The answer is 72", "72", 1.0),
        ("x = 72", "72", 1.0),
        ("8 x 9 = 72", "72", 1.0),  # the last number counts
        ("3 apples and 4", "4", 1.0),
        ("3 apples and 4", "3", 0.0),
        ("72 (9 x 8)", "72", 1.0),  # an aside in parentheses
        ("(3 + 4) x 2 = 14", "14", 1.0),
        ("(-3)", "-3", 1.0),
        ("72 dollars for 3 days", "72", 0.0),  # the last number counts, even here
        ("25 m^2", "25", 1.0),
        ("73", "72", 0.0),
        ("-72", "72", 0.0),  # the sign changes the number
        ("72.5", "72", 0.0),
        ("720", "72", 0.0),
        ("7,200", "72", 0.0),
        ("0.1", "0.10000000001", 1.0),  # within 1e-9
        ("0.1", "0.1001", 0.0),
        ("seventy-two", "72", 0.0),
        ("", "72", 0.0),
        ("72", "", 0.0),
        ("72", "seventy-two", 0.0),
    ],
)
def test_accuracy(answer, gold, expected):
    assert accuracy([strict("r", answer)], answer=[gold]) == [expected]
    assert accuracy(completions=[chat(strict("r", answer))], answer=[gold], prompts=["q"]) == [expected]


@pytest.mark.parametrize(
    "answer, gold, expected",
    [
        ("0.00001", "1e-05", 1.0),  # str(0.00001): how a float column reads
        ("5", "1e-05", 0.0),  # never the exponent alone
        ("10000000000000000", "1e+16", 1.0),
        ("16", "1e+16", 0.0),
        ("2.5E+3", "2500", 1.0),
        ("1.5e-3", "0.0015", 1.0),
        ("3", "1e9999", 0.0),  # too large to be a number: no gold
    ],
)
def test_accuracy_reads_scientific_notation(answer, gold, expected):
    assert accuracy([strict("r", answer)], answer=[gold]) == [expected]
    assert accuracy([strict("r", answer)], answer=[float(gold)] if gold != "1e9999" else [gold]) == [expected]


def test_accuracy_reads_only_the_answer_block():
    gold = ["72"] * 4
    completions = ["72", "The answer is 72.", "<reasoning>\n72\n</reasoning>", "<answer>72"]
    assert accuracy(completions, answer=gold) == [0.0] * 4


def test_accuracy_takes_the_last_answer_block():
    text = "<answer>5</answer> wait, no: <answer>72</answer>"
    assert accuracy([text], answer=["72"]) == [1.0]
    assert accuracy([text], answer=["5"]) == [0.0]


def test_accuracy_gold_forms():
    text = strict("r", "72")
    assert accuracy([text], answer=[72]) == [1.0]
    assert accuracy([text], answer=[72.0]) == [1.0]
    assert accuracy([text], answer="72") == [1.0]  # one gold for every completion
    assert accuracy([text, text], answer=["72", "73"]) == [1.0, 0.0]
    assert accuracy([text, text], answer=["72"]) == [1.0, 0.0]  # a missing gold scores 0
    assert accuracy([text], answer=None) == [0.0]
    assert accuracy([text]) == [0.0]
    assert accuracy([text], answer=[None]) == [0.0]
    assert accuracy([text], answer=[True]) == [0.0]
    assert accuracy([text, text], answer=[True, 1]) == [0.0, 0.0]


def test_trl_calling_convention():
    # As GRPOTrainer calls them: keywords only, dataset columns and trainer extras included.
    completions = [chat(strict("r", "72")), chat("no format"), chat(strict("r", "71") + "\n")]
    kwargs = dict(
        prompts=[[{"role": "user", "content": "q"}]] * 3,
        completions=completions,
        completion_ids=[[1, 2]] * 3,
        answer=["72", "72", "72"],
        question=["q"] * 3,
        trainer_state=object(),
        log_extra=lambda *a: None,
        log_metric=lambda *a: None,
    )
    assert {name: fn(**kwargs) for name, fn in REWARDS.items()} == {
        "xml_strict": [1.0, 0.0, 1.0],
        "xml_soft": [1.0, 0.0, 1.0],
        "xml_count": [1.0, 0.0, 1.0],
        "think_format": [0.0, 0.0, 0.0],
        # open-r1's tag count: the <answer> pieces are present once each, the <think> ones not
        "think_count": [0.5, 0.0, 0.5],
        "number": [1.0, 0.0, 1.0],
        "accuracy": [1.0, 0.0, 0.0],
        "math": [1.0, 0.0, 0.0],
        "tool_ok": [1.0, 1.0, 1.0],  # no tool was called, so none failed
        "soft_overlong": [0.0, 0.0, 0.0],  # no completion near TRL's registry's 1,024 tokens
        # no fenced program and no test cases: nothing ran
        "code": [0.0, 0.0, 0.0],
        "binary_code": [0.0, 0.0, 0.0],
        "code_format": [0.0, 0.0, 0.0],
    }


# ---------------------------------------------------------------- reading completions


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("text", "text"),
        ([{"role": "assistant", "content": "text"}], "text"),
        ({"role": "assistant", "content": "text"}, "text"),
        ([{"role": "assistant", "content": [{"type": "text", "text": "te"}, {"type": "text", "text": "xt"}]}], "text"),
        ([{"role": "assistant", "content": "te"}, {"role": "assistant", "content": "xt"}], "text"),
        ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "text"}], "text"),
        ([{"content": "text"}], "text"),
        ([], None),
        ([{"role": "user", "content": "q"}], None),
        ([{"role": "assistant", "content": None}], None),
        ([{"role": "assistant", "content": [{"type": "image"}]}], None),
        ([{"role": "assistant"}], None),
        (None, None),
        (b"<answer>72</answer>", None),
        (72, None),
        ("a\x00b", None),  # binary
        ("x" * (MAX_COMPLETION_CHARS + 1), None),  # huge
    ],
)
def test_completion_text(completion, expected):
    assert completion_text(completion) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<answer>72</answer>", "72"),
        ("<answer>\n  72 \n</answer>\n", "72"),
        ("<reasoning>x</reasoning><answer>a</answer><answer>b</answer>", "b"),
        ("<answer></answer>", ""),
        ("<answer>72", None),
        ("72</answer>", None),
        ("</answer><answer>", None),
        ("", None),
        (None, None),
        (chat("<answer>7</answer>"), "7"),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("72", 72.0),
        ("-3", -3.0),
        ("+3", 3.0),
        ("$1,000", 1000.0),
        ("1,000,000", 1_000_000.0),
        ("1000.00", 1000.0),
        (".5", 0.5),
        ("0.5", 0.5),
        ("1/2", 0.5),
        ("3/4 cup", 0.75),
        ("1/2.", 0.5),
        ("-$5", -5.0),
        ("$-5", -5.0),
        ("$ 5", 5.0),
        ("£12.50", 12.5),
        ("€3", 3.0),
        ("(-3)", -3.0),
        ("5-3", 3.0),
        ("8 - 3", 3.0),
        ("72.", 72.0),
        ("72 km/h", 72.0),
        ("4 m2", 4.0),
        ("CO2: 4", 4.0),
        ("1,2,3", 3.0),
        ("18 (9 x 2)", 18.0),
        ("(2) 18", 18.0),
        ("((4)) 5", 5.0),
        ("x (1", 1.0),
        ("1e-05", 1e-05),
        ("2.5E+3", 2500.0),
        ("-1e3", -1000.0),
        ("1e3/2", None),
        ("1e9999", None),
        ("2eggs", 2.0),
        ("3/0", None),
        ("1.5/2", None),
        ("", None),
        ("none", None),
        (None, None),
        (b"72", None),
        (True, None),
        (72, 72.0),
        (0.5, 0.5),
        (float("nan"), None),
        (float("inf"), None),
        (10**400, None),
        ("9" * 400, None),
        ("x" * (MAX_COMPLETION_CHARS + 1), None),
    ],
)
def test_parse_number(text, expected):
    assert parse_number(text) == expected


def test_find_numbers_in_order():
    assert find_numbers("Natalia sold 48/2 = 24 clips, then $1,000.50 and -3 and .5") == [24.0, 24.0, 1000.5, -3.0, 0.5]


# ---------------------------------------------------------------- never raises, stays fast

ODD_COMPLETIONS = [
    None,
    "",
    0,
    3.5,
    b"\xff\xfe",
    bytearray(b"x"),
    [],
    {},
    [None],
    [{}],
    [{"content": 5}],
    [{"role": "assistant", "content": [None]}],
    object(),
    "\x00" * 10,
    "\udcff<answer>1</answer>",
    "<answer>" * 10_000,
    "<reasoning>\n" * 9_000,
    "9" * 99_999,
    "1," * 40_000,
    "<answer>" + "3," * 40_000 + "</answer>",
    "x" * (MAX_COMPLETION_CHARS * 3),
]


@pytest.mark.parametrize("name", NAMES)
def test_odd_inputs_score_zero_quickly(name):
    fn = REWARDS[name]
    start = time.process_time()
    scores = fn(ODD_COMPLETIONS, answer=["1"] * len(ODD_COMPLETIONS))
    # CPU seconds, not wall: a pattern that backtracks catastrophically on these takes hours, not 30 s
    assert time.process_time() - start < 30.0
    assert len(scores) == len(ODD_COMPLETIONS)
    assert all(type(s) is float and 0.0 <= s <= 1.0 for s in scores)
    if name == "tool_ok":  # no odd completion holds a failed tool call: each readable one scores 1
        assert scores == [0.0 if completion_text(c) is None else 1.0 for c in ODD_COMPLETIONS]
        return
    # Only the surrogate-holding answer "1" is a readable, well-formed number, and only it and the list of
    # 3s hold each answer tag once; everything else scores 0.
    right = ODD_COMPLETIONS.index("\udcff<answer>1</answer>")
    expected = {"number": 1.0, "accuracy": 1.0, "math": 1.0, "xml_count": 0.5}.get(name, 0.0)
    assert scores[right] == expected
    assert sum(scores) == (1.0 if name == "xml_count" else expected)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("completions", [None, [], "", 5, object(), iter([strict("r", "1")]), {"content": "x"}])
def test_odd_batches(name, completions):
    scores = REWARDS[name](completions, answer="1")
    assert isinstance(scores, list) and all(s in (0.0, 1.0) for s in scores)


def test_a_bare_string_is_a_batch_of_one():
    assert xml_strict(strict("r", "1")) == [1.0]
    assert accuracy(strict("r", "1"), answer="1") == [1.0]


tag_soup = st.lists(
    st.sampled_from(
        [
            "<reasoning>",
            "</reasoning>",
            "<answer>",
            "</answer>",
            "\n",
            " ",
            "72",
            "-3",
            "$1,000",
            ".5",
            "/",
            "x",
            "\x00",
            "\udcff",
            "é",
        ]
    ),
    max_size=30,
).map("".join)
anything = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary() | tag_soup,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["role", "content", "text", "type"]), inner, max_size=3)
    ),
    max_leaves=12,
)
messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["assistant", "user"]), "content": anything | tag_soup}), max_size=3
)
completion = tag_soup | st.text() | anything | messages


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(completions=st.lists(completion, max_size=6), answer=anything)
def test_rewards_never_raise(completions, answer):
    for name, fn in REWARDS.items():
        scores = fn(completions=completions, answer=answer, prompts=None)
        assert len(scores) == len(completions), name
        assert all(type(s) is float and 0.0 <= s <= 1.0 for s in scores), name


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text() | tag_soup)
def test_parsers_never_raise(text):
    value = parse_number(text)
    assert value is None or isinstance(value, float)
    answer = extract_answer(text)
    assert answer is None or isinstance(answer, str)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    reasoning=st.text(min_size=1).filter(lambda s: s.strip() and "<" not in s and "\x00" not in s),
    value=st.integers(-(10**12), 10**12),
)
def test_any_strict_completion_with_the_right_number_gets_full_marks(reasoning, value):
    text = strict(reasoning.strip("\n"), f"{value:,}")
    scores = {name: fn([text], answer=[str(value)])[0] for name, fn in for_layout().items()}
    assert scores == {name: 1.0 for name in for_layout()} and set(for_layout()) == set(NAMES) - {
        "think_format",
        "think_count",
        *NOT_OF_ANSWERS,
    }


def test_rewards_emit_nothing(capsys):
    for fn in REWARDS.values():
        fn(ODD_COMPLETIONS + [strict("r", "1")], answer="1")
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


# ---------------------------------------------------------------- the real GSM8K data


def gsm8k_rows(gsm8k_dir: Path) -> list[dict]:
    rows = []
    for split in ("train", "test"):
        with (gsm8k_dir / f"{split}.jsonl").open(encoding="utf-8") as handle:
            rows.extend(json.loads(line) for line in handle if line.strip())
    return rows


def test_gsm8k_gold_solutions_score_full_marks(gsm8k_dir):
    from tasks.gsm8k import extract_gold

    rows = gsm8k_rows(gsm8k_dir)
    assert len(rows) == 8792
    golds = [extract_gold(row["answer"]) for row in rows]
    values = [parse_number(gold) for gold in golds]
    not_numbers = [gold for gold, value in zip(golds, values) if value is None or gold != gold.strip()]
    assert not_numbers == []
    assert all(value == float(gold) for gold, value in zip(golds, values))

    right = [strict(row["answer"].rpartition("####")[0].strip(), gold) for row, gold in zip(rows, golds)]
    for name, fn in for_layout().items():
        scores = fn(completions=right, answer=golds)
        failures = [(i, right[i]) for i, s in enumerate(scores) if s != 1.0]
        assert failures == [], f"{name}: {len(failures)} gold solutions below full marks, first {failures[:1]}"
    # The conversational form scores the same.
    assert accuracy([chat(text) for text in right], answer=golds) == [1.0] * len(rows)

    wrong = [
        strict(row["answer"].rpartition("####")[0].strip(), _another_number(gold)) for row, gold in zip(rows, golds)
    ]
    assert accuracy(wrong, answer=golds) == [0.0] * len(rows)
    assert xml_strict(wrong) == [1.0] * len(rows)


def _another_number(gold: str) -> str:
    value = float(gold)
    other = value + 1 if value == int(value) else value * 2 + 1
    # every digit written: "%g" would round 192000001 to "1.92e+08", which is the gold number itself
    return str(int(other)) if other == int(other) else repr(other)


def test_gsm8k_completion_with_units_and_commas_is_right(gsm8k_dir):
    from tasks.gsm8k import extract_gold

    rows = gsm8k_rows(gsm8k_dir)[:500]
    golds = [extract_gold(row["answer"]) for row in rows]
    decorated = [strict("r", f"${float(g):,.2f} in total") for g in golds]
    assert accuracy(decorated, answer=golds) == [1.0] * len(rows)


# ---------------------------------------------------------------- one definition of "correct"

SAME_COMPLETIONS = [
    ("<answer>72</answer>", "72"),
    ("<answer>$1,000.00</answer>", "1000"),
    ("<answer>0.0000001</answer>", "0"),  # 1e-7 apart: a different answer, not rounding
    ("<answer>3.0000001</answer>", "3"),
    ("<answer>3.000000000001</answer>", "3"),  # within 1e-9: the same number written longer
    ("<answer>1e-7</answer>", "0.0000002"),
    ("72", "72"),  # no answer block
    ("<answer>71</answer>", "72"),
    ([{"role": "assistant", "content": "<answer>72</answer>"}], "72"),
]


def test_evaluation_and_the_accuracy_reward_agree_on_every_completion():
    from evaluation.score import score

    completions = [c for c, _ in SAME_COMPLETIONS]
    golds = [g for _, g in SAME_COMPLETIONS]
    rewarded = [s == 1.0 for s in accuracy(completions, answer=golds)]
    judged = [is_correct(c, g) for c, g in SAME_COMPLETIONS]
    assert rewarded == judged == [True, True, False, False, True, False, False, False, True]
    text_only = [(c, g) for c, g in SAME_COMPLETIONS if isinstance(c, str)]
    evaluated = score([c for c, _ in text_only], [g for _, g in text_only])
    assert evaluated["correct"] == sum(is_correct(c, g) for c, g in text_only) == 3
