"""Files that never end or never open are refused, and what is read is bounded: a ledger or an OOM text that
is a device (/dev/zero) or a FIFO gets exit 2 naming it, where planning and explain-oom used to wait forever;
a ledger or a log larger than the bound is read from its end, and says so."""

from __future__ import annotations

import json
import os

import pytest

from commands import main
from launcher.memory.ledger import store
from support.cli import train_py

REPO_OOM = "tests/data/oom/torch_logits_gib.txt"


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_ledger_that_is_no_regular_file_is_refused(kind, fifo):
    path = "/dev/zero" if kind == "device" else str(fifo)
    done = train_py("plan", "--json", GRPO_TRAIN_LEDGER=path)
    assert done.returncode == 2 and "GRPO_TRAIN_LEDGER" in done.stderr and "regular file" in done.stderr


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_explain_oom_of_a_file_that_is_no_regular_file_is_refused(kind, fifo):
    path = "/dev/zero" if kind == "device" else str(fifo)
    done = train_py("explain-oom", path)
    assert done.returncode == 2 and path in done.stderr and "regular file" in done.stderr


def test_a_ledger_past_the_bound_is_read_from_its_end(tmp_path, monkeypatch):
    path = tmp_path / "ledger.jsonl"
    record = {"profile": "x", "fingerprint": "f", "device": "cpu", "peak_gib": 1.0}
    junk = "x" * 200 + "\n"
    path.write_text(junk * 50 + json.dumps(record) + "\n")
    monkeypatch.setattr(store, "MAX_LEDGER_BYTES", 2000)
    said = []
    store.read_lines(path, said.append)
    assert any("read its last" in text for text in said)


def test_explain_oom_of_a_long_log_reads_its_end(tmp_path, monkeypatch, capsys):
    from commands import explain_oom

    log = tmp_path / "train.log"
    log.write_text("step line\n" * 10_000 + open(REPO_OOM).read())
    monkeypatch.setattr(explain_oom, "MAX_TEXT_BYTES", 4096)
    assert main(["explain-oom", str(log)]) == 0
    captured = capsys.readouterr()
    assert "GiB" in captured.out and "last" in captured.err
