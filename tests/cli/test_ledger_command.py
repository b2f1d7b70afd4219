"""The `ledger` and `calibrate` commands as a user types them: what the ledger says, forgetting, and what calibrate would probe."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launcher.memory.ledger import record as ledger_record
from launcher.memory.ledger import store as ledger_store
from launcher.memory.ledger import weigh as ledger_weigh
from profiles.load import load_profile
from support.cli import train_py
from support.ledger_machines import cpu as _cpu
from support.ledger_machines import dated_entry as _entry

L4 = "profiles/gpu-24gb-llama3.1-8b.yaml"


@pytest.fixture
def l4():
    return load_profile(L4)


def _train(args, ledger_path: Path, **env):
    full = dict(os.environ, GRPO_TRAIN_LEDGER=str(ledger_path), **env)
    return train_py(*args, env=full)


def test_wrongly_typed_lines_never_stop_the_plan_nor_the_report(tmp_path):
    path = tmp_path / "ledger.jsonl"
    eight = load_profile("profiles/cpu-tiny-8gen.yaml")
    good = json.loads(ledger_record.make_entry(eight, _cpu(), status="ok", peak_gib=0.6).to_json())
    path.write_text(
        "\n".join(json.dumps({**good, **bad}) for bad in ({"peak_gib": "big"}, {"date": 5}, {"peak_gib": -1.0})) + "\n"
    )
    for args in (["--auto", "--dry-run", "--json"], ["--ledger"], ["--ledger", "--json"]):
        done = _train(args, path)
        assert done.returncode in (0, 3), (args, done.stderr)  # a plan: 0 or 3, never 1 with a traceback
        assert (
            "Traceback" not in done.stderr
            and done.stderr.count("skipped 3 damaged line(s)") + done.stdout.count("skipped 3 damaged line(s)") == 1
        ), (args, done.stdout, done.stderr)


def test_ledger_json_gives_each_record_its_effect(tmp_path):
    path = tmp_path / "ledger.jsonl"
    eight = load_profile("profiles/cpu-tiny-8gen.yaml")
    ledger_store.append(_entry(eight, _cpu(), days_ago=ledger_weigh.MAX_AGE_DAYS + 5, status="ok", peak_gib=0.9), path)
    ledger_store.append(_entry(eight, _cpu(), days_ago=1, status="ok", peak_gib=0.6), path)
    done = _train(["--ledger", "--json"], path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["path"] == str(path) and report["max_age_days"] == ledger_weigh.MAX_AGE_DAYS
    effects = [(r["peak_gib"], r["counts"], r["effect"]) for r in report["records"]]
    # whichever machine runs the test, each record says what it does here
    assert [e[0] for e in effects] == [0.9, 0.6] and all(isinstance(e[2], str) and e[2] for e in effects)
    table = _train(["--ledger"], path)
    assert table.returncode == 0 and "effect" in table.stdout and "--forget" in table.stdout


def test_forget_on_the_command_line(tmp_path):
    path = tmp_path / "ledger.jsonl"
    eight = load_profile("profiles/cpu-tiny-8gen.yaml")
    ledger_store.append(_entry(eight, _cpu(), status="ok", peak_gib=0.6), path)
    missing = _train(["--forget", "nosuch"], path)
    assert missing.returncode == 2 and "it holds: cpu-tiny-8gen" in missing.stderr
    mixed = _train(["--forget", "cpu-tiny-8gen", "--auto"], path)
    assert (
        mixed.returncode == 2
        and "--forget asks for `ledger` and --auto for `train`" in mixed.stderr
        and ledger_store.read(path)
    )
    done = _train(["--forget", "cpu-tiny-8gen"], path)
    assert done.returncode == 0 and "forgot 1 record(s)" in done.stdout and ledger_store.read(path) == []
    gone = _train(["--forget", "all"], tmp_path / "never.jsonl")
    assert gone.returncode == 0 and "nothing to forget" in gone.stdout


def test_calibrate_dry_run_says_what_it_would_probe(tmp_path):
    path = tmp_path / "ledger.jsonl"
    done = _train(["--calibrate", "--dry-run", "--json"], path)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["calibrate"] and set(plan["calibrate"]) <= {c["profile"] for c in plan["candidates"]}
    text = _train(["--calibrate", "--dry-run"], path)
    assert text.returncode == 0 and "\ncalibrate would probe" in text.stdout and not path.exists()
    both = _train(["--calibrate", "--resume"], path)
    assert both.returncode == 2 and "--calibrate asks for `calibrate` and --resume for `train`" in both.stderr


def test_calibrate_refuses_a_ledger_it_cannot_write_before_any_probe(tmp_path):
    path = tmp_path / "ledger.jsonl"
    path.mkdir()
    done = _train(["--calibrate", "--output-dir", str(tmp_path / "out")], path)
    assert done.returncode == 2 and "cannot write the ledger" in done.stderr
    assert not list((tmp_path / "out").glob("calibrate-*"))


def test_calibrate_with_injection_and_no_ledger_of_its_own_is_refused(tmp_path):
    env = dict(os.environ, GRPO_INJECT_OOM="cpu-tiny-8gen", GRPO_TRAIN_CACHE=str(tmp_path / "cache"))
    env.pop("GRPO_TRAIN_LEDGER", None)
    done = train_py("--calibrate", "--output-dir", str(tmp_path / "out"), env=env)
    assert done.returncode == 2 and "an injected OOM is no measurement" in done.stderr
    assert not (tmp_path / "cache" / "ledger.jsonl").exists()
