"""HOW MANY training rows a source has, read from metadata at plan time (tasks.size): parquet footers, a folder's
files as `datasets` splits them, the Hugging Face caches' dataset_info.json and dataset cards, and GSM8K's
published size under its hub name; and every way that metadata can be missing or broken gives None with the
reason, never a crash."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tasks import size
from tasks.size import GSM8K_TRAIN_ROWS, train_rows

try:
    import pyarrow.parquet as pq
except ImportError:  # the parquet cases need it; the rest do not
    pq = None
needs_pyarrow = pytest.mark.skipif(pq is None, reason="pyarrow is not installed")


@pytest.fixture(autouse=True)
def empty_caches(tmp_path, monkeypatch):
    """Both Hugging Face caches under tmp_path, empty: nothing of this machine's caches is read."""
    for name in ("HF_DATASETS_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return tmp_path / "hf"


def parquet(path: Path, rows: int) -> Path:
    import pyarrow as pa

    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({"question": [f"q{i}" for i in range(rows)], "answer": [str(i) for i in range(rows)]})
    pq.write_table(table, path, row_group_size=max(1, rows // 3))
    return path


def jsonl(path: Path, rows: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"question": str(i), "answer": str(i)}) + "\n" for i in range(rows)))
    return path


def test_gsm8k_by_its_hub_name_is_known_offline():
    assert train_rows("openai/gsm8k") == (GSM8K_TRAIN_ROWS, "openai/gsm8k: GSM8K's train split")
    assert train_rows("openai/gsm8k", config="main")[0] == 7473
    assert train_rows("openai/gsm8k", config="socratic", split="test")[0] == 1319
    assert train_rows("openai/gsm8k", 500) == (500, "train_samples 500 of 7,473")
    rows, why = train_rows("openai/gsm8k", config="mian")
    assert rows is None and "no configuration 'mian'" in why and "main" in why


@needs_pyarrow
def test_a_parquet_file_is_counted_from_its_footer(tmp_path, monkeypatch):
    path = parquet(tmp_path / "mine.parquet", 41)
    # the rows themselves are never read: only the footer
    monkeypatch.setattr(pq, "read_table", lambda *a, **k: pytest.fail("read the rows"))
    assert train_rows(str(path)) == (41, "mine.parquet's parquet footer")


def test_a_folder_sums_the_files_of_its_train_split(tmp_path):
    folder = tmp_path / "data"
    jsonl(folder / "train.jsonl", 30)
    jsonl(folder / "test.jsonl", 7)
    (folder / "README.md").write_text("notes")
    rows, why = train_rows(str(folder))
    assert rows == 30 and why == "data: 1 train file (its lines)"
    assert train_rows(str(folder), split="test")[0] == 7


@needs_pyarrow
def test_sharded_parquet_in_a_folder_as_the_hub_lays_it_out(tmp_path):
    folder = tmp_path / "shards"
    parquet(folder / "data" / "train-00000-of-00002.parquet", 10)
    parquet(folder / "data" / "train-00001-of-00002.parquet", 15)
    parquet(folder / "data" / "test-00000-of-00001.parquet", 4)
    assert train_rows(str(folder)) == (25, "shards: 2 train files (their footers)")


def test_split_folders_and_split_names_are_read_as_datasets_reads_them(tmp_path):
    by_folder = tmp_path / "by-folder"
    jsonl(by_folder / "train" / "a.jsonl", 3)
    jsonl(by_folder / "train" / "b.jsonl", 4)
    jsonl(by_folder / "eval" / "c.jsonl", 100)
    assert train_rows(str(by_folder))[0] == 7
    by_name = tmp_path / "by-name"
    jsonl(by_name / "my_train_part1.jsonl", 5)
    jsonl(by_name / "trainer_notes.jsonl", 50)  # 'trainer' does not name the train split
    jsonl(by_name / "my_test.jsonl", 9)
    assert train_rows(str(by_name))[0] == 5
    unnamed = tmp_path / "unnamed"  # no split named: every file is training data
    jsonl(unnamed / "a.jsonl", 2)
    (unnamed / "b.csv").write_text("question,answer\n1,1\n2,2\n")
    rows, why = train_rows(str(unnamed))
    assert rows is None and "more than one format" in why
    (unnamed / "b.csv").unlink()
    jsonl(unnamed / "nested" / "c.jsonl", 3)
    jsonl(unnamed / ".hidden" / "d.jsonl", 1000)  # hidden, as `datasets` skips it
    assert train_rows(str(unnamed))[0] == 5


def test_a_cached_hub_dataset_is_read_from_its_dataset_info(empty_caches):
    info = empty_caches / "datasets" / "some-org___my_data" / "default" / "0.0.0" / "abc123" / "dataset_info.json"
    info.parent.mkdir(parents=True)
    info.write_text(json.dumps({"splits": {"train": {"name": "train", "num_examples": 1234}, "test": {}}}))
    rows, why = train_rows("some-org/MyData")  # the datasets cache spells the name in snake case
    assert rows == 1234 and "datasets cache" in why
    rows, why = train_rows("some-org/MyData", split="validation")
    assert rows is None and "no 'validation' split" in why


def test_a_hub_dataset_is_read_from_its_card_in_the_hub_cache(empty_caches, monkeypatch):
    repo = empty_caches / "hub" / "datasets--org--cards"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("f00d")
    card = repo / "snapshots" / "f00d" / "README.md"
    card.parent.mkdir(parents=True)
    card.write_text(
        "---\nlicense: mit\ndataset_info:\n- config_name: easy\n  splits:\n  - name: train\n    num_examples: 800\n"
        "- config_name: hard\n  splits:\n  - name: train\n    num_examples: 200\n---\n# Cards\n"
    )
    assert train_rows("org/cards", config="hard")[0] == 200
    rows, why = train_rows("org/cards")
    assert rows is None and "several configurations (easy, hard)" in why
    # HF_HUB_CACHE wins over HF_HOME, as huggingface_hub reads them
    monkeypatch.setenv("HF_HUB_CACHE", str(empty_caches / "elsewhere"))
    assert train_rows("org/cards", config="hard")[0] is None


def test_an_unknown_hub_dataset_is_still_unknown_and_says_why():
    rows, why = train_rows("org/never-seen")
    assert (rows, why) == (None, "org/never-seen: not in the local Hugging Face caches")


# --- hostile metadata: None with a reason, never a crash ---------------------------------------------------------


def test_an_empty_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    rows, why = train_rows(str(tmp_path / "empty"))
    assert rows is None and "holds no" in why


@needs_pyarrow
def test_a_corrupt_parquet_file(tmp_path):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"PAR1 this is not a parquet file PAR1")
    rows, why = train_rows(str(path))
    assert rows is None and "footer cannot be read" in why
    half = parquet(tmp_path / "half.parquet", 20)
    half.write_bytes(half.read_bytes()[:-30])  # cut short: the footer is gone
    assert train_rows(str(half))[0] is None
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "train.parquet").write_bytes(path.read_bytes())
    assert train_rows(str(folder))[0] is None


@pytest.mark.parametrize(
    "content, words",
    [
        ("{not json", "not readable JSON"),
        ("[1, 2]", "not readable JSON"),
        (json.dumps({"splits": {"test": {"num_examples": 5}}}), "no 'train' split"),
        (json.dumps({"splits": {"train": {"num_examples": "many"}}}), "no row count"),
        (json.dumps({"features": {}}), "lists no splits"),
    ],
)
def test_a_dataset_info_that_cannot_be_used(empty_caches, content, words):
    info = empty_caches / "datasets" / "org___bad" / "default" / "0.0.0" / "h" / "dataset_info.json"
    info.parent.mkdir(parents=True)
    info.write_text(content)
    rows, why = train_rows("org/bad")
    assert rows is None and words in why


@pytest.mark.parametrize("card", ["no header", "---\n: : [\n---\n", "---\ndataset_info: 3\n---\n", "---\n- a\n---\n"])
def test_a_dataset_card_that_cannot_be_used(empty_caches, card):
    path = empty_caches / "hub" / "datasets--org--bad" / "snapshots" / "r1" / "README.md"
    path.parent.mkdir(parents=True)
    path.write_text(card)
    assert train_rows("org/bad")[0] is None


def test_a_huge_folder_is_not_walked_to_its_end(tmp_path, monkeypatch):
    monkeypatch.setattr(size, "MAX_FOLDER_ENTRIES", 50)
    folder = tmp_path / "huge"
    folder.mkdir()
    for i in range(60):
        (folder / f"part{i:03}.jsonl").write_text('{"question": "1", "answer": "1"}\n')
    rows, why = train_rows(str(folder))
    assert rows is None and "more than 50 entries" in why
    monkeypatch.setattr(size, "MAX_FOLDER_ENTRIES", 10_000)
    monkeypatch.setattr(size, "MAX_FOLDER_FILES", 20)
    rows, why = train_rows(str(folder))
    assert rows is None and "60 train files" in why
    monkeypatch.setattr(size, "MAX_FOLDER_DEPTH", 2)
    deep = tmp_path / "deep"
    jsonl(deep / "a" / "b" / "c" / "train.jsonl", 1)
    rows, why = train_rows(str(deep))
    assert rows is None and "nested more than 2 folders deep" in why


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links here")
def test_loops_of_links(tmp_path):
    folder = tmp_path / "looped"
    jsonl(folder / "train.jsonl", 6)
    (folder / "again").symlink_to(folder, target_is_directory=True)  # the folder inside itself
    (folder / "self.jsonl").symlink_to(folder / "self.jsonl")  # a file link to itself
    assert train_rows(str(folder))[0] == 6
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    rows, why = train_rows(str(loop))
    assert rows is None and "cannot be read" in why
