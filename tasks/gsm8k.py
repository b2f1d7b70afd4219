"""GSM8K: loading its rows and reading the gold answer (the prompt is built in tasks.prompts).

Rows come from the Hugging Face hub (`openai/gsm8k`, config `main`) when online, or from the local Hugging
Face cache when offline. `datasets` is imported only when the cache alone does not serve. Local files in
GSM8K's shape go through tasks.user_data like any other data of the user's.
"""

from __future__ import annotations

import os
from pathlib import Path

from contract.errors import UsageError

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


def load_gsm8k(split: str = "train") -> list[dict]:
    """GSM8K rows {question, answer_text, answer} for split ("train" or "test"): the hub dataset openai/gsm8k
    (config main), read from the local Hugging Face cache when it is there and downloaded otherwise; with
    HF_HUB_OFFLINE=1 only the cache is used. UsageError when neither works. (A local copy in GSM8K's
    shape is the user's own data: `dataset: path/to/train.jsonl` with `answer_pattern: '#### (.+)'`.)
    """
    if split not in SPLITS:
        raise UsageError(f"unknown GSM8K split {split!r}; use one of {', '.join(SPLITS)}")
    return _load_from_hub(split)


def _offline() -> bool:
    return any(
        os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


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
            raise UsageError(
                f"{HUB_ID} ({HUB_CONFIG}, {split}) row {index}: unexpected content ({error}); "
                "the cached copy may be damaged: delete it and download again"
            ) from None
    return rows


def _read_hub_cache(split: str) -> list[dict] | None:
    """The split's parquet file from the hub cache, read without any network call; None when absent."""
    try:
        from huggingface_hub import snapshot_download

        folder = snapshot_download(
            HUB_ID, repo_type="dataset", allow_patterns=[f"{HUB_CONFIG}/{split}-*"], local_files_only=True
        )
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
    hint = (
        "run once with network access to fill the Hugging Face cache, or set `dataset:` to a JSONL file "
        'with "question" and "answer" and answer_pattern \'#### (.+)\' (or `arithmetic` for generated problems)'
    )
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
