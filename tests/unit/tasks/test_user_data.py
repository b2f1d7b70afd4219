"""The user's own data through `datasets`: files, folders, a hub id, column mapping and refusals."""

from __future__ import annotations

import json

import pytest

from contract.errors import UsageError
from tasks import user_data
from tasks.user_data import DataSpec, load_splits, to_rows

SYSTEM = "Answer in XML."


def _csv(path, rows, header="problem,final"):
    path.write_text(header + "\n" + "\n".join(f'"{q}",{a}' for q, a in rows) + "\n", encoding="utf-8")
    return path


def _rows(spec):
    splits = load_splits(spec)
    return {name: to_rows(records, spec, SYSTEM, name)[0] for name, records in splits.items()}


def test_csv_with_renamed_columns_holds_out_a_fixed_tenth(tmp_path):
    data = _csv(tmp_path / "mine.csv", [(f"What is {i} + {i}?", 2 * i) for i in range(40)])
    spec = DataSpec(dataset=str(data), question_field="problem", answer_field="final")
    rows = _rows(spec)
    assert len(rows["train"]) == 36 and len(rows["test"]) == 4
    train_questions = {r["prompt"][-1]["content"] for r in rows["train"]}
    assert not train_questions & {r["prompt"][-1]["content"] for r in rows["test"]}
    first = rows["train"][0]
    assert first["prompt"][0] == {"role": "system", "content": SYSTEM} and first["prompt"][1]["role"] == "user"
    assert first["answer"] == str(int(first["prompt"][1]["content"].split()[2]) * 2)
    assert _rows(spec)["test"] == rows["test"]  # the same held-out rows every time


def test_parquet_folder_with_its_own_splits_and_extra_columns(tmp_path):
    import datasets

    folder = tmp_path / "data"
    folder.mkdir()
    for split, count in (("train", 12), ("test", 3)):
        datasets.Dataset.from_list(
            [{"problem": f"{split} {i}", "solution": f"so #### {i}", "level": i % 3} for i in range(count)]
        ).to_parquet(str(folder / f"{split}.parquet"))
    spec = DataSpec(dataset=str(folder), answer_pattern=r"#### (.+)")
    rows = _rows(spec)
    assert len(rows["train"]) == 12 and len(rows["test"]) == 3
    assert rows["test"][2]["answer"] == "2" and rows["test"][2]["level"] == 2  # extra columns pass through
    assert rows["test"][0]["prompt"][-1]["content"] == "test 0"


def test_jsonl_folder_train_and_test_files(tmp_path):
    folder = tmp_path / "gsm-like"
    folder.mkdir()
    for split, count in (("train", 5), ("test", 2)):
        (folder / f"{split}.jsonl").write_text(
            "".join(json.dumps({"question": f"q{i}", "answer": f"{i}"}) + "\n" for i in range(count))
        )
    rows = _rows(DataSpec(dataset=str(folder)))
    assert [len(rows["train"]), len(rows["test"])] == [5, 2]


def test_a_test_word_in_a_file_name_is_not_a_split(tmp_path):
    data = tmp_path / "contest_problems.jsonl"
    data.write_text("".join(json.dumps({"question": f"q{i}", "answer": str(i)}) + "\n" for i in range(60)))
    rows = _rows(DataSpec(dataset=str(data)))
    assert len(rows["test"]) == 6 and len(rows["train"]) == 54


def test_chat_prompts_pass_through(tmp_path):
    data = tmp_path / "chat.jsonl"
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    data.write_text("".join(json.dumps({"prompt": prompt, "answer": "4"}) + "\n" for _ in range(10)))
    rows = _rows(DataSpec(dataset=str(data)))
    assert rows["train"][0]["prompt"] == prompt and rows["train"][0]["answer"] == "4"


def test_empty_system_prompt_means_no_system_turn(tmp_path):
    data = _csv(tmp_path / "d.csv", [("q", 1)] * 10, header="question,answer")
    spec = DataSpec(dataset=str(data))
    records = load_splits(spec)["train"]
    rows, _ = to_rows(records, spec, "", "train")
    assert [m["role"] for m in rows[0]["prompt"]] == ["user"]


def test_missing_column_names_the_columns_there(tmp_path):
    data = _csv(tmp_path / "d.csv", [("q", 1)] * 10, header="text,result")
    spec = DataSpec(dataset=str(data))
    with pytest.raises(UsageError, match=r"no question column.*columns: text, result.*set question_field"):
        to_rows(load_splits(spec)["train"], spec, SYSTEM, "train")
    spec = DataSpec(dataset=str(data), question_field="text", answer_field="answer_col")
    with pytest.raises(UsageError, match=r"no column 'answer_col' \(columns: text, result\)"):
        to_rows(load_splits(spec)["train"], spec, SYSTEM, "train")


def test_bad_json_line_is_named(tmp_path):
    data = tmp_path / "broken.jsonl"
    data.write_text('{"question": "a", "answer": "1"}\n{"question": "b", "answer": \n{"question": "c"}\n')
    with pytest.raises(UsageError, match=r"broken.jsonl: cannot be read \(line 2: "):
        load_splits(DataSpec(dataset=str(data)))


def test_unreadable_answers_are_counted_then_refused(tmp_path):
    records = [{"question": f"q{i}", "answer": f"#### {i}" if i % 20 else "no marker"} for i in range(40)]
    spec = DataSpec(dataset="x.jsonl", answer_pattern=r"#### (.+)")
    rows, dropped = to_rows(records, spec, SYSTEM, "train")
    assert dropped == 2 and len(rows) == 38  # 5% unreadable: dropped and counted
    records = [{"question": f"q{i}", "answer": "#### 1" if i % 2 else "?"} for i in range(40)]
    with pytest.raises(UsageError, match=r"20 of 40 rows \(50%; rows 1, 3, 5, 7, 9, \.\.\. of the file"):
        to_rows(records, spec, SYSTEM, "train")


@pytest.mark.parametrize("pattern, message", [("(unclosed", "not a regular expression"), ("####", "needs a group")])
def test_bad_answer_pattern(pattern, message):
    with pytest.raises(UsageError, match=message):
        user_data.gold_reader(DataSpec(dataset="x", answer_pattern=pattern))


def test_sources_that_are_not_data(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(UsageError, match="unknown file type '.txt'"):
        user_data.source_kind(str(tmp_path / "notes.txt"))
    with pytest.raises(UsageError, match="no such file or folder, and not a hub id"):
        user_data.source_kind(str(tmp_path / "missing.jsonl"))
    assert user_data.source_kind("openai/gsm8k") == "hub"


def test_hub_id_offline_without_cache_says_how_to_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf" / "datasets"))
    # the libraries read these variables when first imported: a worker that imported them earlier online
    # would wait on the network (an attempt sets them before anything imports them)
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UsageError) as info:
        load_splits(DataSpec(dataset="someone/not-cached"))
    text = str(info.value)
    assert "not in the local Hugging Face cache" in text and "HF_DATASETS_OFFLINE=1" in text
    assert "\n" not in text


def test_hub_id_goes_through_datasets_with_config_and_splits(monkeypatch):
    import datasets

    calls = []

    def fake_load_dataset(path, name=None, **kwargs):  # the network boundary: nothing else is faked
        calls.append((path, name))
        return datasets.DatasetDict(
            {
                "training": datasets.Dataset.from_list([{"problem": f"p{i}", "answer": str(i)} for i in range(20)]),
                "validation": datasets.Dataset.from_list([{"problem": "v", "answer": "7"}]),
            }
        )

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    spec = DataSpec(dataset="org/name", dataset_config="cfg", train_split="training", test_split="validation")
    rows = _rows(spec)
    assert calls == [("org/name", "cfg")]
    assert len(rows["train"]) == 20 and rows["test"][0]["answer"] == "7"
    with pytest.raises(UsageError, match=r"no split 'train' \(splits there: training, validation\)"):
        load_splits(DataSpec(dataset="org/name"))
