"""A .csv file whose columns are separated by `;` (a spreadsheet saved in a locale with decimal commas), a tab or
`|` is read as the columns it holds, by every reader of the user's data: the rows, the column count, and the
planner's sample of answers."""

from __future__ import annotations

import pytest

from tasks.csv_delimiter import delimiter, delimiter_of
from tasks.data_checks import column_count
from tasks.reference_lengths import reference_lengths
from tasks.user_data import DataSpec, load_splits, to_rows

QUESTIONS = [(f"What is {i},5 + 1?", f"{i + 1},5") for i in range(20)]  # decimal commas, as such locales write


def table(path, separator: str, rows=QUESTIONS, header=("question", "answer")):
    lines = [separator.join(header)] + [separator.join(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "text, expected",
    [
        ("question;answer\nWhat is 1,5 + 1?;2,5\nWhat is 2 + 2?;4\n", ";"),
        ("question\tanswer\nHow, and why?\t3\nWhen?\t4\n", "\t"),
        ("question|answer\nq1|1\nq2|2\n", "|"),
        ('question,answer\n"a; b; c",1\n"d; e",2\n', ","),  # the semicolons are inside quoted values
        ("question,answer\nWhat is 3 | 4?,1\nWhat is 5 | 6?,2\n", ","),
        ("question\nq1\nq2\n", ","),  # one column: nothing to tell, as `datasets` reads it
        ("", ","),
    ],
    ids=["semicolon", "tab", "pipe", "semicolons-quoted", "pipes-in-values", "one-column", "empty"],
)
def test_the_delimiter_is_told_from_the_first_lines(text, expected):
    assert delimiter_of(text) == expected


def test_a_line_cut_at_the_sniffs_end_does_not_change_the_answer():
    text = "question;answer\n" + "What is 1,5 + 1?;2,5\n" * 2000
    assert len(text) > 16 * 1024 and delimiter_of(text) == ";"


@pytest.mark.parametrize("separator", [";", "\t", "|"], ids=["semicolon", "tab", "pipe"])
def test_a_csv_not_separated_by_commas_gives_its_rows(tmp_path, separator):
    data = table(tmp_path / "mine.csv", separator)
    assert delimiter(data) == separator and column_count(data) == 2
    spec = DataSpec(dataset=str(data))
    splits = load_splits(spec)
    rows, _dropped = to_rows(splits["train"] + splits["test"], spec, "", "train")
    assert len(rows) == 20
    assert {(r["prompt"][-1]["content"], r["answer"]) for r in rows} == set(QUESTIONS)


def test_a_folder_of_semicolon_splits_is_read(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    table(folder / "train.csv", ";", QUESTIONS[:15])
    table(folder / "test.csv", ";", QUESTIONS[15:])
    splits = load_splits(DataSpec(dataset=str(folder)))
    assert [len(splits["train"]), len(splits["test"])] == [15, 5]
    assert splits["test"][0] == {"question": "What is 15,5 + 1?", "answer": "16,5"}


def test_the_planners_sample_of_answers_reads_a_semicolon_csv(tmp_path):
    data = table(tmp_path / "mine.csv", ";")
    lengths = reference_lengths(str(data))
    assert lengths is not None and lengths.rows == 20
    assert lengths.question_mean_chars == pytest.approx(sum(len(q) for q, _ in QUESTIONS) / 20)
