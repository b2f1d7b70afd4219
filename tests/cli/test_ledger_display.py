"""`ledger` with records nobody should have to trust: a display field of the wrong type or a name holding rich
markup is skipped or shown as plain text (never a traceback, in the listing and in --json); a ledger that is a
symbolic link loop or leads nowhere is refused by name (listing and --forget); a ledger of many thousand
records lists the newest ones (its length does not grow with the file), --json every one."""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from commands.ledger import MAX_SHOWN, print_ledger
from contract.errors import UsageError
from launcher.card.detect import Machine
from launcher.memory.ledger import store as ledger_store
from launcher.memory.ledger.weigh import ledger_report, shape_text
from support import cli

CPU = Machine(gpus=[], message="test", host_ram_gib=24.0, host_free_gib=20.0)
GOOD = {
    "profile": "p",
    "fingerprint": "0123456789abcdef",
    "machine": {"device": "cpu", "name": "cpu", "total_gib": 24},
    "status": "ok",
    "estimate_gib": 1.0,
    "components": {},
    "peak_gib": 0.9,
    "measure": "process RSS",
    "settings": {"per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 64, "lora_rank": 16},
    "versions": {},
    "date": "2026-01-01T10:00:00",
}


def ledger_with(tmp_path: Path, *records: dict) -> Path:
    path = tmp_path / "ledger.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def train_py(*args: str, ledger: Path) -> subprocess.CompletedProcess:
    return cli.train_py(*args, env=dict(os.environ, GRPO_TRAIN_LEDGER=str(ledger)))


@pytest.mark.parametrize(
    "change, why",
    [
        ({"measure": 5}, "measure is 5"),
        ({"machine": {"device": "cpu", "name": ["a"], "total_gib": 24}}, "machine name is list"),
        ({"machine": {"device": "cpu", "name": "cpu", "total_gib": [1]}}, "machine total_gib is list"),
        ({"machine": {"device": "cpu", "name": "cpu", "total_gib": True}}, "machine total_gib is True"),
        ({"profile": "x" * 300}, "profile is"),
        ({"oom_kind": {"a": 1}}, "oom_kind is dict"),
    ],
)
def test_a_display_field_of_the_wrong_type_is_a_skipped_line_in_both_listings(tmp_path, change, why):
    path = ledger_with(tmp_path, GOOD, {**GOOD, **change})
    for args in (["ledger"], ["ledger", "--json"]):
        done = train_py(*args, ledger=path)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    report = ledger_report(CPU, path, warn=lambda text: None)
    assert len(report["records"]) == 1 and [s["line"] for s in report["skipped_lines"]] == [2]
    assert why in report["skipped_lines"][0]["why"]


def test_names_holding_rich_markup_are_shown_as_written(tmp_path):
    path = ledger_with(tmp_path, {**GOOD, "profile": "[/bold]x", "status": "[red]y"})
    out = io.StringIO()
    assert print_ledger(CPU, path, console=Console(file=out, width=300, highlight=False)) == 0
    assert "[/bold]x" in out.getvalue() and "[red]y" in out.getvalue()
    done = train_py("ledger", "--json", ledger=path)
    assert done.returncode == 0 and json.loads(done.stdout)["records"][0]["profile"] == "[/bold]x"


def test_settings_of_the_wrong_type_show_as_unknown():
    assert (
        shape_text(
            {"per_device_train_batch_size": "[/]", "num_generations": True, "max_completion_length": 64, "lora_rank": 0}
        )
        == "? / ? / 64 full"
    )
    assert shape_text({"lora_rank": [16]}) == "? / ? / ? r?"


@pytest.mark.parametrize("kind", ["loop", "dangling"])
def test_a_ledger_link_that_leads_nowhere_is_refused_by_name(tmp_path, kind):
    link = tmp_path / "ledger.jsonl"
    if kind == "loop":
        other = tmp_path / "other"
        link.symlink_to(other)
        other.symlink_to(link)
    else:
        link.symlink_to(tmp_path / "gone" / "ledger.jsonl")
    for args in (["ledger", "--forget", "all"], ["ledger"], ["ledger", "--json"]):
        done = train_py(*args, ledger=link)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert str(link) in done.stderr and "symbolic link" in done.stderr and "fix:" in done.stderr
    with pytest.raises(UsageError, match="symbolic link"):
        ledger_store.check_writable(link)


def test_an_output_dir_that_is_a_link_loop_is_refused(tmp_path):
    from launcher.run.folder import check_output_dir

    loop = tmp_path / "out"
    (tmp_path / "b").symlink_to(loop)
    loop.symlink_to(tmp_path / "b")
    with pytest.raises(UsageError, match="loops back on itself"):
        check_output_dir(loop)
    with pytest.raises(UsageError, match="loops back on itself"):
        check_output_dir(loop / "runs")


def test_a_long_ledger_lists_the_newest_records_and_json_lists_all(tmp_path):
    def lines_for(count: int) -> tuple[int, str]:
        records = [
            {**GOOD, "fingerprint": f"{i % 300:016x}", "date": f"2026-01-01T10:{i // 60 % 60:02d}:{i % 60:02d}"}
            for i in range(count)
        ]
        path = ledger_with(tmp_path, *records)
        out = io.StringIO()
        print_ledger(CPU, path, console=Console(file=out, width=300, highlight=False))
        return len(out.getvalue().splitlines()), out.getvalue()

    short, _ = lines_for(1000)
    long, text = lines_for(3000)
    assert short == long  # what is shown does not grow with the file
    assert f"{3000 - MAX_SHOWN} older records not shown" in text and f"{300 - MAX_SHOWN} shapes" in text
    assert len(ledger_report(CPU, tmp_path / "ledger.jsonl")["records"]) == 3000


def test_a_resumed_runs_attempts_table_shows_damaged_records_without_a_traceback():
    # attempts.jsonl is read back on --resume; its fields are shown as data, a wrong type as '?'
    from launcher.run.attempts import AttemptRecord
    from launcher.run.narrate import attempts_table

    record = AttemptRecord.from_dict(
        {
            "attempt": "[b]",
            "profile": "[/bold]x",
            "status": "[/red]",
            "steps": [1],
            "settings": {"gpu_memory_utilization": "x", "fast_inference": True},
            "peak_gib": "big",
            "duration_s": "long",
            "shrink": {"a": 5},
        }
    )
    out = io.StringIO()
    Console(file=out, width=300).print(attempts_table([record]))
    text = out.getvalue()
    assert "[/bold]x" in text and "[/red]" in text and "?" in text
