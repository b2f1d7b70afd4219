"""GSM8K: loading its rows and reading the gold answer (the prompt is built in tasks.prompts).

Rows come from the Hugging Face hub (`openai/gsm8k`, config `main`) when online, from the local Hugging
Face cache when offline, or from a JSONL file whose lines hold `question` and `answer`. `datasets` is
imported only when the hub or its cache is used.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from launcher.errors import UsageError
from rewards.parse import parse_number

HUB_ID = "openai/gsm8k"
HUB_CONFIG = "main"
SPLITS = ("train", "test")
GOLD_MARKER = "####"


def extract_gold(answer_text: str) -> str:
    """The gold answer of a GSM8K solution: the text after the last `####`, commas removed ("1,000" -> "1000").

    A text without `####` is taken to be the answer itself. ValueError when nothing is left.
    """
    if not isinstance(answer_text, str):
        raise ValueError(f"expected the answer as text, got {type(answer_text).__name__}")
    _, marker, tail = answer_text.rpartition(GOLD_MARKER)
    gold = (tail if marker else answer_text).replace(",", "").strip()
    if not gold:
        raise ValueError("the answer is empty after '####'" if marker else "the answer is empty")
    return gold


def read_jsonl(path: str | Path) -> list[dict]:
    """Rows {question, answer_text, answer} from a JSONL file with `question` and `answer` on each line.

    `answer` is a worked solution ending in "#### N" (GSM8K's shape) or the bare answer N. Blank lines
    are skipped. Any other problem raises UsageError naming the file, the line and the field.
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise UsageError(f"{path}: no such file (give a .jsonl file with \"question\" and \"answer\" on each line)")
    if not path.is_file():
        raise UsageError(f"{path}: not a file (give a .jsonl file with \"question\" and \"answer\" on each line)")
    rows = []
    try:
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                rows.append(_parse_line(path, number, line))
    except UnicodeDecodeError as error:
        raise UsageError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start}); "
                         "give a .jsonl file with \"question\" and \"answer\" on each line") from None
    except OSError as error:
        raise UsageError(f"{path}: cannot be read ({error.strerror or error})") from None
    if not rows:
        raise UsageError(f"{path}: no rows (each line needs a JSON object with \"question\" and \"answer\")")
    return rows


def _parse_line(path: Path, number: int, line: str) -> dict:
    where = f"{path}: line {number}"
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise UsageError(f"{where}: not valid JSON ({error.msg}); each line needs a JSON object with "
                         "\"question\" and \"answer\"") from None
    if not isinstance(record, dict):
        raise UsageError(f"{where}: expected a JSON object with \"question\" and \"answer\", "
                         f"got {type(record).__name__}")
    for field in ("question", "answer"):
        if field not in record:
            raise UsageError(f"{where}: missing field \"{field}\" (each line needs \"question\" and \"answer\")")
        if not isinstance(record[field], (str, int, float)) or isinstance(record[field], bool) \
                or not str(record[field]).strip():
            raise UsageError(f"{where}: field \"{field}\" must be non-empty text, got {record[field]!r}")
    answer_text = str(record["answer"])
    try:
        gold = extract_gold(answer_text)
    except ValueError as error:
        raise UsageError(f"{where}: field \"answer\": {error}") from None
    if parse_number(gold) is None:
        raise UsageError(f"{where}: field \"answer\" gives no number ({gold!r}); end it with \"#### <number>\"")
    return {"question": str(record["question"]), "answer_text": answer_text, "answer": gold}


def load_gsm8k(split: str = "train", path: str | Path | None = None) -> list[dict]:
    """GSM8K rows {question, answer_text, answer} for split ("train" or "test").

    With path: a folder holding `<split>.jsonl`, or one JSONL file (see _split_of_file). Without: the hub dataset openai/gsm8k
    (config main), read from the local Hugging Face cache when it is there and downloaded otherwise;
    with HF_HUB_OFFLINE=1 only the cache is used. UsageError when none of these works.
    """
    if split not in SPLITS:
        raise UsageError(f"unknown GSM8K split {split!r}; use one of {', '.join(SPLITS)}")
    if path is not None:
        folder = Path(path).expanduser()
        if folder.is_dir():
            file = folder / f"{split}.jsonl"
            if not file.is_file():
                raise UsageError(f"{folder}: no {split}.jsonl in this folder")
            return read_jsonl(file)
        return _split_of_file(folder, split)
    return _load_from_hub(split)


# A lone file keeps this share of its rows (at most HELD_OUT_MAX) out of training, as its test split.
HELD_OUT_SHARE = 10
HELD_OUT_MAX = 500


def _split_of_file(file: Path, split: str) -> list[dict]:
    """One JSONL file as a split, never scoring the model on rows it trained on: a file named for the test
    split is that split; `train.jsonl` with a `test.jsonl` beside it gives the two; any other lone file holds
    its last tenth (at most 500 rows) out of training as the test split."""
    if "test" in file.name:
        return read_jsonl(file)
    sibling = file.with_name(file.name.replace("train", "test")) if "train" in file.name else None
    if sibling is not None and sibling.is_file():
        return read_jsonl(file if split == "train" else sibling)
    rows = read_jsonl(file)
    held_out = min(len(rows) // HELD_OUT_SHARE, HELD_OUT_MAX)
    cut = len(rows) - held_out
    return rows[:cut] if split == "train" else rows[cut:]


def _offline() -> bool:
    return any(os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")
               for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def _load_from_hub(split: str) -> list[dict]:
    records = _read_hub_cache(split)
    if records is None:
        records = _read_with_datasets(split)
    rows = []
    for index, record in enumerate(records):
        try:
            question, answer_text = record["question"], record["answer"]
            rows.append({"question": question, "answer_text": answer_text, "answer": extract_gold(answer_text)})
        except (KeyError, TypeError, ValueError) as error:
            raise UsageError(f"{HUB_ID} ({HUB_CONFIG}, {split}) row {index}: unexpected content ({error}); "
                             "the cached copy may be damaged: delete it and download again") from None
    return rows


def _read_hub_cache(split: str) -> list[dict] | None:
    """The split's parquet file from the hub cache, read without any network call; None when absent."""
    try:
        from huggingface_hub import snapshot_download
        folder = snapshot_download(HUB_ID, repo_type="dataset", allow_patterns=[f"{HUB_CONFIG}/{split}-*"],
                                   local_files_only=True)
    except Exception:  # not cached (or no huggingface_hub): the datasets path decides, with its own message
        return None
    files = sorted(Path(folder, HUB_CONFIG).glob(f"{split}-*.parquet"))
    if not files:
        return None
    import pyarrow.parquet as pq  # a dependency of datasets
    records: list[dict] = []
    for file in files:
        records.extend(pq.read_table(file, columns=["question", "answer"]).to_pylist())
    return records


def _read_with_datasets(split: str) -> list[dict]:
    hint = ("run once with network access to fill the Hugging Face cache, or set `dataset:` to a JSONL file "
            "with \"question\" and \"answer\" (or `arithmetic` for generated problems)")
    try:
        import datasets
    except ImportError:
        raise UsageError(f"loading {HUB_ID} needs the `datasets` package; {hint}") from None
    try:
        data = datasets.load_dataset(HUB_ID, HUB_CONFIG, split=split)
    except Exception as error:
        mode = "offline (HF_HUB_OFFLINE)" if _offline() else "online"
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise UsageError(f"cannot load {HUB_ID} ({HUB_CONFIG}, {split}) {mode}: {first_line}; {hint}") from None
    return [{"question": row["question"], "answer": row["answer"]} for row in data]
