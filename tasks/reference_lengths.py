"""HOW LONG a task's questions and reference solutions run, in characters: what the planner turns into the
completion cap the task needs and the length a completion is expected to run (launcher.plan.completion_lengths does the
tokens, with the model's tokenizer).

The shipped tasks' figures are constants here (GSM8K is not on every machine; a test recomputes them from the
real data where it is, and from the generator for `arithmetic`). A user's local .jsonl / .json / .csv file is
measured on its first rows with the standard library (no `datasets` import): its answers count as worked
solutions when they are long enough to hold steps; short answers (a number, a label) say nothing of how long
the reasoning runs, and the planner then takes a stated default.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

# GSM8K's calculator annotations ("<<48/2=24>>") are not text a model writes
_ANNOTATION = re.compile(r"<<[^>]*>>")
# A mean answer this long or longer holds worked steps; shorter is a final answer alone
WORKED_MIN_CHARS = 40
# At most this many rows (and bytes) of a user's file are read at plan time
SAMPLE_ROWS = 2000
SAMPLE_BYTES = 8 << 20


@dataclass(frozen=True)
class ReferenceLengths:
    """Characters of a task's questions and reference solutions (calculator annotations removed)."""

    task: str
    rows: int
    question_mean_chars: float
    answer_mean_chars: float
    answer_p99_chars: float
    worked: bool  # the answers are worked solutions (their length says how long reasoning runs)
    source: str

    def to_json(self) -> dict:
        return {
            "task": self.task,
            "rows": self.rows,
            "question_mean_chars": round(self.question_mean_chars, 1),
            "answer_mean_chars": round(self.answer_mean_chars, 1),
            "answer_p99_chars": round(self.answer_p99_chars, 1),
            "worked": self.worked,
            "source": self.source,
        }


def measure(task: str, questions: list[str], answers: list[str], source: str) -> ReferenceLengths | None:
    """The figures of a list of questions and answers; None when there are none."""
    import statistics

    answers = [_ANNOTATION.sub("", a) for a in answers if isinstance(a, str)]
    questions = [q for q in questions if isinstance(q, str)]
    if not answers:
        return None
    lengths = sorted(len(a) for a in answers)
    p99 = lengths[min(len(lengths) - 1, int(0.99 * len(lengths)))]
    mean = statistics.fmean(lengths)
    return ReferenceLengths(
        task,
        len(answers),
        statistics.fmean(len(q) for q in questions) if questions else 0.0,
        mean,
        float(p99),
        mean >= WORKED_MIN_CHARS,
        source,
    )


# The shipped tasks, measured once (tests/unit/launcher/test_planning.py recomputes them)
GSM8K = ReferenceLengths(
    "gsm8k",
    7473,
    234.5,
    247.5,
    681.0,
    True,
    "openai/gsm8k (main) train split: questions and the `answer` solutions without their "
    "<<...>> calculator annotations",
)
ARITHMETIC = ReferenceLengths(
    "arithmetic",
    5000,
    60.0,
    17.6,
    19.0,
    False,
    "the generated arithmetic problems (tasks.arithmetic, 5,000 rows of seed 0 at the "
    "default level): one-line solutions",
)
SHIPPED = {"gsm8k": GSM8K, "arithmetic": ARITHMETIC}

# Worked solutions of grade-school maths problems, written for this project in the way a model answers them:
# what a tokenizer's characters per token are measured on when its files are on the machine (profiles.tokenizer).
WORKED_SAMPLE = "\n".join(
    (
        "Each box holds 12 pencils and the teacher buys 7 boxes, so she has 12 * 7 = 84 pencils. She gives 3 "
        "pencils to each of her 25 students, which takes 3 * 25 = 75 pencils. She has 84 - 75 = 9 pencils left.",
        "The train covers 150 kilometres in 2.5 hours, so its speed is 150 / 2.5 = 60 kilometres per hour. In 4 "
        "hours at that speed it travels 60 * 4 = 240 kilometres.",
        "Maria earns $18 an hour and works 6 hours on Monday and 9 hours on Tuesday. That is 6 + 9 = 15 hours, "
        "so she earns 15 * 18 = $270. After paying $45 for the bus she keeps 270 - 45 = $225.",
        "A quarter of the 64 apples are green: 64 / 4 = 16 green apples. Half of the rest are red: (64 - 16) / "
        "2 = 24 red apples. The remaining 64 - 16 - 24 = 24 apples are yellow.",
        "The shop sells a jacket for $80 and gives a 15% discount, which is 80 * 0.15 = $12 off. The jacket costs "
        "80 - 12 = $68. Two jackets cost 68 * 2 = $136.",
        "Tom reads 35 pages a day. After 6 days he has read 35 * 6 = 210 pages of his 320-page book, so 320 - "
        "210 = 110 pages remain, which take him 110 / 35 = 3.14, so 4 more days.",
        "The garden is 14 metres long and 9 metres wide, so its area is 14 * 9 = 126 square metres. A bag of "
        "seed covers 18 square metres, so 126 / 18 = 7 bags are needed.",
        "Liam had 3 times as many stickers as Noah, who had 42. Liam had 3 * 42 = 126 stickers. After giving "
        "away 19, he has 126 - 19 = 107 stickers. Together they have 107 + 42 = 149 stickers.",
    )
)


def reference_lengths(dataset: str, answer_field: str = "", question_field: str = "") -> ReferenceLengths | None:
    """The figures of a profile's data: a shipped task's constants (whose solutions always count, however
    short), or the first rows of a local
    .jsonl / .json / .csv file (its answer and question columns as the profile names them, else the first of
    the usual names); None for anything else (a hub dataset, parquet, a folder, an unreadable file)."""
    if dataset in SHIPPED:
        return SHIPPED[dataset]
    path = Path(dataset).expanduser()
    if path.suffix.lower() not in (".jsonl", ".json", ".csv") or not path.is_file():
        return None
    import csv

    try:
        rows = _first_rows(path)
    except (OSError, ValueError, csv.Error, UnicodeDecodeError):
        return None
    if not rows:
        return None
    from tasks.data_spec import ANSWER_FIELDS, QUESTION_FIELDS

    def column(named: str, usual) -> str | None:
        if named:
            return named
        return next((name for name in usual if name in rows[0]), None)

    answer, question = column(answer_field, ANSWER_FIELDS), column(question_field, QUESTION_FIELDS)
    if answer is None:
        return None
    return measure(
        str(path),
        [str(r.get(question, "")) for r in rows if question],
        [str(r[answer]) for r in rows if r.get(answer) is not None],
        f"the first {len(rows):,} rows of {path.name}",
    )


def _first_rows(path: Path) -> list[dict]:
    with open(path, "rb") as handle:
        data = handle.read(SAMPLE_BYTES)
    text = data.decode("utf-8", errors="strict" if len(data) < SAMPLE_BYTES else "ignore")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        import csv

        from tasks.csv_delimiter import delimiter_of

        lines = text.splitlines()
        if len(data) == SAMPLE_BYTES:
            lines = lines[:-1]  # the last line may be cut
        rows = csv.DictReader(lines[: SAMPLE_ROWS + 1], delimiter=delimiter_of(text))
        return [row for row in rows][:SAMPLE_ROWS]
    if suffix == ".json" and len(data) < SAMPLE_BYTES:
        loaded = json.loads(text)
        rows = (
            loaded
            if isinstance(loaded, list)
            else next((v for v in loaded.values() if isinstance(v, list)), [])
            if isinstance(loaded, dict)
            else []
        )
        return [r for r in rows[:SAMPLE_ROWS] if isinstance(r, dict)]
    out = []
    for line in text.splitlines()[:SAMPLE_ROWS]:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            out.append(row)
    return out
