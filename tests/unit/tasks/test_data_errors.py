"""Your own data as a careless or unlucky user has it: empty cells, number columns read as floats, a held-out
split that catches the few bad rows, UTF-16 / Latin-1 files, a CSV with only its header, an empty JSONL, a
JSON file that wraps its rows in {"data": [...]}, a hub id without network. Each is either read right or
refused naming the file's own rows and the fix that fits its cause."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import tasks
from contract.errors import ProfileError, UsageError
from profiles.load import profile_from_dict
from support.waiting import run_to_end
from tasks.user_data import DataSpec, load_splits

REPO = Path(__file__).resolve().parents[3]
HELD_OUT_ROWS_OF_40 = [2, 16, 24, 26]  # the seeded tenth of a 40-row file, as positions in the file


def csv_file(path: Path, answers: list) -> Path:
    lines = ["question,answer"] + [f"What is {i} + 1?,{'' if a is None else a}" for i, a in enumerate(answers)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def own(path: Path, **keys):
    return profile_from_dict({"dataset": str(path), "eval_samples": 10, **keys}, "<test>")


def test_a_few_empty_answers_are_judged_over_the_whole_file(tmp_path):
    # 3 of 40 empty (7.5%), one of them in the 4 held-out rows: 1 of 4 there, but the file is what counts
    answers = [i + 1 for i in range(40)]
    for row in (HELD_OUT_ROWS_OF_40[0], 10, 30):
        answers[row] = None
    found = tasks.check_data(own(csv_file(tmp_path / "some.csv", answers)))
    assert found == "34 training rows, 3 test rows, 3 answers unreadable (dropped)"


def test_too_many_empty_answers_name_the_files_rows(tmp_path):
    answers = [i + 1 for i in range(40)]
    empty = [HELD_OUT_ROWS_OF_40[1], 3, 5, 7, 9]
    for row in empty:
        answers[row] = None
    with pytest.raises(UsageError) as info:
        tasks.check_data(own(csv_file(tmp_path / "many.csv", answers)))
    text = str(info.value)
    assert "5 of 40 rows (12%; rows 4, 6, 8, 10, 17 of the file, counted from 1 after any header)" in text, text


def test_a_number_column_read_as_floats_gives_whole_number_golds(tmp_path):
    # one empty cell makes the reader type the whole column float64: 12 arrives as 12.0
    answers = [i + 10 for i in range(40)]
    answers[5] = None
    rows = tasks.load_task(own(csv_file(tmp_path / "floats.csv", answers)), "train")
    assert rows[0]["answer"] == "10" and all("." not in row["answer"] for row in rows)


def test_an_empty_question_cell_drops_its_row(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text("question,answer\n" + "".join(f"q{i},{i}\n" if i != 7 else f",{i}\n" for i in range(40)))
    found = tasks.check_data(own(path))
    assert found.endswith("1 question empty (dropped)"), found  # an empty question, said as one


def test_question_field_equal_to_answer_field_is_refused():
    with pytest.raises(ProfileError) as info:
        profile_from_dict({"dataset": "x/y", "question_field": "text", "answer_field": "text"}, "<test>")
    assert info.value.key == "answer_field" and "both question_field and answer_field" in str(info.value)


@pytest.mark.parametrize(
    "name, content, words",
    [
        ("u16.csv", "question,answer\nq1,1\nq2,2\n".encode("utf-16"), "UTF-16 text"),
        (
            "latin.csv",
            "question,answer\ncafé,1\nq2,2\n".encode("latin-1"),
            "not UTF-8 text (byte 0xe9 on line 2: Latin-1 or Windows-1252?)",
        ),
        ("header.csv", b"question,answer\n", "it holds no rows (fix: add rows below the header line)"),
        ("empty.jsonl", b"", "the file is empty"),
        ("blank.jsonl", b"\n\n  \n", "the file is empty"),
    ],
)
def test_a_file_that_is_not_utf8_rows_says_why_and_how_to_fix_it(tmp_path, name, content, words):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(UsageError) as info:
        load_splits(DataSpec(dataset=str(tmp_path / name)))
    text = str(info.value)
    assert words in text and "\n" not in text, text
    if "UTF" in words:
        assert "save it as UTF-8" in text and "iconv" in text


def test_a_utf8_file_with_a_byte_order_mark_reads(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes("\ufeffquestion,answer\n".encode() + "".join(f"q{i},{i}\n" for i in range(20)).encode())
    assert len(load_splits(DataSpec(dataset=str(path)))["train"]) == 18


def test_json_rows_wrapped_in_a_data_key_are_read(tmp_path):
    path = tmp_path / "wrapped.json"
    path.write_text(json.dumps({"data": [{"question": f"q{i}", "answer": str(i)} for i in range(20)]}))
    splits = load_splits(DataSpec(dataset=str(path)))
    assert len(splits["train"]) == 18 and set(splits["train"][0]) == {"question", "answer"}


OFFLINE_HUB = """
import sys, time
sys.path.insert(0, {repo!r})
import tasks.data_sources as data_sources
import tasks.user_data as user_data
data_sources._hub_reachable = lambda *a, **k: False  # the network boundary: no route to the hub
started = time.monotonic()
try:
    user_data.load_splits(user_data.DataSpec(dataset="someone/not-cached"))
except Exception as exc:
    print(round(time.monotonic() - started, 1), exc)
"""


def test_a_hub_id_without_network_says_so_at_once(tmp_path, record_property):
    env = {"HF_HOME": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = run_to_end([sys.executable, "-c", OFFLINE_HUB.format(repo=str(REPO))], env=env)
    seconds, _, text = done.stdout.strip().partition(" ")
    assert "not in the local Hugging Face cache, and the hub cannot be reached from here (no network)" in text, (
        done.stdout + done.stderr[-2000:]
    )
    assert "HF_DATASETS_OFFLINE=1" in text and "Retrying" not in done.stderr
    record_property("seconds", float(seconds))  # how long is a measure; no retries of the hub is the verdict


def test_train_samples_of_a_large_file_maps_only_those_rows(tmp_path, monkeypatch):
    # a 1,000,000-row CSV held whole took 2.1 GB for a check that uses 2,000 rows; now only the question and
    # answer columns are scanned, in batches, and only the rows asked for become Python objects
    from tasks import user_data

    path = csv_file(tmp_path / "large.csv", [i + 1 for i in range(5000)])
    mapped = []
    real = user_data.to_rows
    monkeypatch.setattr(
        user_data, "to_rows", lambda records, *a, **k: mapped.append(len(records)) or real(records, *a, **k)
    )
    found = tasks.check_data(own(path, train_samples=20, eval_samples=5))
    assert found == "20 of 4,500 training rows (train_samples), 5 test rows"
    assert sorted(mapped) == [5, 20]
