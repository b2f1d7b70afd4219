"""A user's data in shapes that used to cost minutes or say the wrong thing: a table thousands of columns wide
(refused before `datasets` reads it, naming the fix), empty questions (said as empty questions, not as
unreadable answers with Python's None), and a folder whose splits are in two formats (read, each its own way)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contract.errors import UsageError
from profiles.load import load_profile
from tasks import check_data, data_checks, load_task

REPO = Path(__file__).resolve().parents[3]
CPU = REPO / "profiles" / "cpu-tiny-8gen.yaml"


def profile_for(data: Path):
    return load_profile(CPU, [f"dataset={data}"])


@pytest.fixture(autouse=True)
def fresh_sources():
    """tasks keeps what it read per source; each test reads its own files afresh."""
    import tasks

    tasks._SOURCES.clear()
    yield
    tasks._SOURCES.clear()


def test_a_table_too_wide_is_refused_before_datasets_reads_it(tmp_path, monkeypatch):
    import datasets

    columns = ["question", "answer"] + [f"c{i}" for i in range(1998)]
    path = tmp_path / "wide.csv"
    path.write_text(
        ",".join(columns)
        + "\n"
        + "".join(",".join([f"What is {r} + 1?", str(r + 1)] + ["0"] * 1998) + "\n" for r in range(100)),
        encoding="utf-8",
    )

    def never(*args, **kwargs):
        raise AssertionError("datasets was asked to read a 2,000-column table")

    monkeypatch.setattr(datasets, "load_dataset", never)
    with pytest.raises(UsageError) as refused:
        check_data(profile_for(path))
    assert "2,000 columns" in str(refused.value) and f"at most {data_checks.MAX_COLUMNS}" in str(refused.value)


def test_the_column_count_is_read_from_each_format(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps({f"k{i}": i for i in range(300)}) + "\n", encoding="utf-8")
    (tmp_path / "b.csv").write_text('question,"answer, quoted",x\n1,2,3\n', encoding="utf-8")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({f"c{i}": [1] for i in range(7)}), tmp_path / "c.parquet")
    assert data_checks.column_count(tmp_path / "a.jsonl") == 300
    assert data_checks.column_count(tmp_path / "b.csv") == 3
    assert data_checks.column_count(tmp_path / "c.parquet") == 7


def test_empty_questions_are_said_to_be_empty_questions(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text(
        "question,answer\n" + "".join(f"{'' if i % 4 == 0 else f'What is {i} + 1?'},{i + 1}\n" for i in range(20)),
        encoding="utf-8",
    )
    with pytest.raises(UsageError) as refused:
        check_data(profile_for(path))
    text = str(refused.value)
    assert "5 of 20 rows (25%; rows 1, 5, 9, 13, 17 of the file" in text and "5 have an empty 'question' cell" in text
    assert "None" not in text and "cannot be read from column" not in text
    assert "fill the 'question' cells" in text


def test_unreadable_answers_are_still_said_so_without_a_none_pattern(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text(
        "question,answer\n" + "".join(f"What is {i} + 1?,{'' if i % 4 == 0 else i + 1}\n" for i in range(20)),
        encoding="utf-8",
    )
    with pytest.raises(UsageError) as refused:
        check_data(profile_for(path))
    text = str(refused.value)
    assert "rows 1, 5, 9, 13, 17 of the file" in text and "the answer of 5 cannot be read from column 'answer'" in text
    assert "None" not in text


def test_a_few_empty_questions_are_dropped_and_counted_apart(tmp_path):
    path = tmp_path / "few.csv"
    path.write_text(
        "question,answer\n" + "".join(f"{'' if i == 3 else f'What is {i} + 1?'},{i + 1}\n" for i in range(40)),
        encoding="utf-8",
    )
    assert check_data(profile_for(path)).endswith("1 question empty (dropped)")


def test_a_folder_with_splits_in_two_formats_is_read(tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "train.jsonl").write_text(
        "".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n" for i in range(30)),
        encoding="utf-8",
    )
    (folder / "test.csv").write_text(
        "question,answer\n" + "".join(f"What is {i} + 2?,{i + 2}\n" for i in range(10)), encoding="utf-8"
    )
    profile = profile_for(folder)
    assert check_data(profile) == "30 training rows, 10 test rows"
    assert load_task(profile, "test", limit=1)[0]["answer"] == "2"


def test_a_split_in_two_formats_is_refused_with_the_fix(tmp_path):
    folder = tmp_path / "split"
    folder.mkdir()
    (folder / "train.jsonl").write_text(json.dumps({"question": "q", "answer": "1"}) + "\n", encoding="utf-8")
    (folder / "train-2.csv").write_text("question,answer\nq,1\n", encoding="utf-8")
    with pytest.raises(UsageError, match="the train split is in more than one format.*fix:"):
        check_data(profile_for(folder))
