"""`calibrate` stops like a training run and says only what is so: a signal to its process group is forwarded
to the probe running, what was measured is kept, and it exits 130; a full disk is found before the first probe
(or costs the figure it could not keep, said so, never a torn line), and a calibration that recorded nothing
never ends with "recorded". Each probe is tests/support/fake_child.py through tests/support/calibrate_harness.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.memory.ledger import store as ledger_store
from support.waiting import finish

REPO = Path(__file__).resolve().parents[2]
HARNESS = [sys.executable, str(REPO / "tests" / "support" / "calibrate_harness.py")]


def start(tmp_path: Path, behaviour: dict, ledger: Path | None = None) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / "out"
    env = dict(
        os.environ, FAKE_CHILD_PLAN=json.dumps(behaviour), GRPO_TRAIN_LEDGER=str(ledger or tmp_path / "ledger.jsonl")
    )
    env.pop("GRPO_INJECT_OOM", None)
    proc = subprocess.Popen(
        [*HARNESS, str(out)],
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return proc, out


def wait_for(proc: subprocess.Popen, found) -> None:
    """Until `found()` holds; bounded by the harness's progress: it fails the test if the harness ended first."""
    while not found():
        assert proc.poll() is None, "the calibration ended before the expected point: " + proc.stdout.read()[-3000:]
        time.sleep(0.05)


def summary(out: Path) -> dict:
    (folder,) = out.glob("calibrate-*")
    return json.loads((folder / "calibration.json").read_text(encoding="utf-8"))


def ledger_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


@pytest.mark.parametrize("signals", [[signal.SIGINT, signal.SIGINT], [signal.SIGTERM]], ids=["two-sigint", "sigterm"])
def test_a_signal_to_the_process_group_stops_it_keeping_what_was_measured(tmp_path, signals):
    proc, out = start(tmp_path, {"a": {"do": "ok"}, "b": {"do": "wait_signal"}})
    wait_for(proc, lambda: list(out.glob("calibrate-*/probe-02-b/ready")))
    for signum in signals:
        os.killpg(proc.pid, signum)  # as a terminal's Ctrl-C pressed twice, or a job scheduler, does
    output, _ = finish(proc)
    assert proc.returncode == 130, output[-3000:]
    result = summary(out)
    assert result["exit_code"] == 130 and result["recorded"] == 1
    assert [(row["profile"], row["status"], row["recorded"]) for row in result["probes"]] == [
        ("a", "ok", True),
        ("b", "interrupted", False),
    ]
    (folder,) = out.glob("calibrate-*")
    # forwarded, as SIGTERM whichever came (a SIGINT in an attempt's first imports ends it with a traceback)
    assert json.loads((folder / "probe-02-b" / "signals.json").read_text())[0] == int(signal.SIGTERM)
    assert [(e["profile"], e["status"], e["peak_gib"]) for e in ledger_lines(tmp_path / "ledger.jsonl")] == [
        ("a", "probe-ok", 0.42)
    ]


def test_every_probe_failing_is_exit_1_and_nothing_is_said_recorded(tmp_path):
    proc, out = start(tmp_path, {"a": {"do": "error"}, "b": {"do": "error"}})
    output, _ = finish(proc)
    assert proc.returncode == 1
    result = summary(out)
    assert result["recorded"] == 0 and [row["status"] for row in result["probes"]] == ["error", "error"]
    assert ledger_lines(tmp_path / "ledger.jsonl") == []
    from commands.calibrate import calibration_verdict

    assert calibration_verdict(1, result["probes"]).startswith("nothing was recorded")


def test_a_full_disk_is_found_before_the_first_probe(tmp_path, small_disk):
    ledger = small_disk / "ledger.jsonl"
    with open(small_disk / "filler", "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError:
            pass
    proc, out = start(tmp_path, {}, ledger)
    output, _ = finish(proc)
    assert proc.returncode == 2 and "cannot write the ledger" in output and "free some space" in output
    assert not list(out.glob("calibrate-*/probe-*"))


def test_a_disk_that_fills_during_the_calibration_costs_the_figure_said_so(tmp_path, small_disk):
    ledger = small_disk / "ledger.jsonl"
    ledger.write_text("")
    proc, out = start(tmp_path, {"a": {"do": "ok", "fill_disk": str(small_disk / "filler")}}, ledger)
    output, _ = finish(proc)
    assert proc.returncode == 1, output[-3000:]
    result = summary(out)
    assert result["recorded"] == 0 and not any(row["recorded"] for row in result["probes"])
    assert "not recorded" in result["probes"][0]["verdict"]
    assert ledger.read_bytes() == b""  # no torn line


def test_an_append_cut_short_by_a_full_disk_leaves_no_torn_line(tmp_path, small_disk):
    path = small_disk / "ledger.jsonl"
    entry = ledger_store.Entry(
        profile="p",
        fingerprint="f" * 16,
        machine={"device": "cpu", "name": "cpu"},
        status="ok",
        peak_gib=1.0,
        settings={"padding": "x" * 3000},
        date="2025-01-01T00:00:00",
    )
    ledger_store.append(entry, path)
    with open(small_disk / "filler", "wb", buffering=0) as handle:
        try:
            while path.stat().st_size and True:
                handle.write(b"\0" * 1024)
        except OSError:
            pass
    size = path.stat().st_size
    with pytest.raises(OSError):
        ledger_store.append(entry, path)
    assert path.stat().st_size == size and len(ledger_store.read(path)) == 1
