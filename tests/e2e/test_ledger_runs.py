"""The ledger end to end on the CPU ladder: injected OOMs never poison it, a run's measurement plans the next
run; --calibrate measures the rungs; --ledger reports them."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from support.cli import REPO, cpu_run_env, train_py

QUICK = ["--set", "max_steps=2", "--set", "save_steps=2", "--set", "eval_samples=0", "--set", "train_samples=32"]


@pytest.fixture
def shared_cache(tiny_cache, tmp_path):
    """A cache folder of this test's own holding the session's tiny models (built before any run's time limit
    starts): the default ledger these runs write is the cache folder's, and the session's cache outlives the
    test run, so a ledger left there would be the next run's starting point."""
    own = tmp_path / "cache"
    own.mkdir()
    for model in tiny_cache.glob("tiny-*"):
        if model.is_dir():
            shutil.copytree(model, own / model.name)
    return own


def _run(args, env):
    return train_py(*args, env=env)


def _env(cache: Path, ledger: Path, **extra) -> dict:
    return cpu_run_env(cache, GRPO_TRAIN_LEDGER=str(ledger), **extra)


def _attempts(output: Path) -> list[dict]:
    (run,) = sorted(output.glob("run-*"))
    return [json.loads(line) for line in (run / "attempts.jsonl").read_text().splitlines()]


def _user_env(cache: Path, **extra) -> dict:
    """A user's shell: no GRPO_TRAIN_LEDGER, so the ledger is the cache folder's own."""
    env = dict(os.environ, GRPO_TRAIN_CACHE=str(cache), **extra)
    env.pop("GRPO_TRAIN_LEDGER", None)
    if "GRPO_INJECT_OOM" not in extra:
        env.pop("GRPO_INJECT_OOM", None)
    return env


def _legacy_injected_lines(machine) -> str:
    """What older versions wrote into the default ledger for the documented fallback test: the injected CUDA
    OOM of each rung, sized to the host, as a lower bound of what the shape needs."""
    from launcher.memory.ledger import record as ledger_record
    from profiles.load import load_profile

    lines = []
    for name in ("cpu-tiny-8gen", "cpu-tiny-4gen"):
        entry = json.loads(
            ledger_record.make_entry(
                load_profile(REPO / "profiles" / f"{name}.yaml"), machine, status="oom", peak_gib=0.6
            ).to_json()
        )
        entry["oom_lower_bound_gib"] = round(machine.host_ram_gib * 0.98, 4)
        del entry["oom_kind"], entry["others_gib"]
        lines.append(json.dumps(entry) + "\n")
    return "".join(lines)


def test_the_poisoning_sequence_leaves_the_machine_training(tmp_path, shared_cache):
    """The fallback test, a ledger an older version poisoned with its injected OOMs, and a record that refuses
    the user's shape: `--auto` still trains, and the user's own --profile reaches its data check (exit 2)."""
    from launcher.card.detect import detect_machine
    from launcher.memory.ledger import record, store
    from profiles.load import load_profile

    default_ledger = shared_cache / "ledger.jsonl"
    first = _run(
        ["--auto", "--output-dir", str(tmp_path / "one"), *QUICK],
        _user_env(shared_cache, GRPO_INJECT_OOM="cpu-tiny-8gen,cpu-tiny-4gen"),
    )
    assert first.returncode == 3, first.stdout[-3000:] + first.stderr[-3000:]
    # every attempt OOMs at its first step, before any checkpoint: each rung as planned and shrunk, none resumes,
    # and the ladder runs out (exit 3)
    records = _attempts(tmp_path / "one")
    assert [(r["status"], r["steps"], r["resumed_from"], bool(r["shrink"])) for r in records] == [
        ("oom", 0, None, False),
        ("oom", 0, None, True),
    ] * 2
    assert [r["profile"] for r in records] == ["cpu-tiny-8gen"] * 2 + ["cpu-tiny-4gen"] * 2
    assert records[0]["oom"]["site"] == "logits/log-probs"
    assert "attempts" in first.stdout and "no profile left on the ladder" in first.stdout
    assert "GRPO_INJECT_OOM is set: this run adds nothing to the ledger" in first.stdout
    assert not default_ledger.exists() or not default_ledger.read_text().strip()

    machine = detect_machine()
    default_ledger.write_text(_legacy_injected_lines(machine), encoding="utf-8")
    plan = json.loads(_run(["--auto", "--dry-run", "--json"], _user_env(shared_cache)).stdout)
    assert plan["chosen"] == "cpu-tiny-8gen" and all(c["measured"] is None for c in plan["candidates"])
    second = _run(["--auto", "--output-dir", str(tmp_path / "two"), *QUICK], _user_env(shared_cache))
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert [(a["profile"], a["status"]) for a in _attempts(tmp_path / "two")] == [("cpu-tiny-8gen", "ok")]
    assert _attempts(tmp_path / "two")[0]["probe"]["peak_gib"] > 0  # attempts.jsonl keeps the probe's figures
    # the run's measurement is the newest record of its shape, and the one that counts
    report = json.loads(_run(["--ledger", "--json"], _user_env(shared_cache)).stdout)
    effects = [(r["profile"], r["status"], r["counts"], r["effect"]) for r in report["records"]]
    assert [e[2] for e in effects] == [False, False, True], effects
    assert "injected" in effects[0][3] and effects[2][3].startswith("counts: measured")

    # a record that refuses the shape (a measured peak far above this machine's RAM)
    eight = load_profile(REPO / "profiles" / "cpu-tiny-8gen.yaml")
    store.append(record.make_entry(eight, machine, status="ok", peak_gib=machine.host_ram_gib * 4), default_ledger)
    refused = _run(["--auto", "--dry-run"], _user_env(shared_cache))
    assert refused.returncode == 0 and "chosen: cpu-tiny-4gen" in refused.stdout
    assert "the ledger refused cpu-tiny-8gen" in refused.stdout and "--forget cpu-tiny-8gen" in refused.stdout
    # the user's own profile of that shape, with a CSV lacking the answer column: its data is read (exit 2)
    (tmp_path / "mine.csv").write_text("problem,result\n" + "".join(f"{i} plus 1?,{i + 1}\n" for i in range(20)))
    mine = (
        eight.to_yaml()
        .replace("name: cpu-tiny-8gen", "name: my-run")
        .replace("dataset: arithmetic", "dataset: mine.csv")
    )
    (tmp_path / "my.yaml").write_text(mine, encoding="utf-8")
    own = _run(
        ["--profile", str(tmp_path / "my.yaml"), "--output-dir", str(tmp_path / "three")], _user_env(shared_cache)
    )
    assert own.returncode == 2, own.stdout[-3000:] + own.stderr[-3000:]
    assert "columns: problem, result" in own.stderr
    warned = _run(["--profile", str(tmp_path / "my.yaml"), "--dry-run"], _user_env(shared_cache))
    assert warned.returncode == 0 and "warning: my-run may run out of memory: measured" in warned.stdout
    ignored = json.loads(_run(["--auto", "--dry-run", "--json", "--ignore-ledger"], _user_env(shared_cache)).stdout)
    assert all(c["measured"] is None for c in ignored["candidates"]) and ignored["chosen"] == "cpu-tiny-8gen"
    forgot = _run(["--forget", "cpu-tiny-8gen"], _user_env(shared_cache))
    assert forgot.returncode == 0 and "forgot 3 record(s)" in forgot.stdout
    default_ledger.unlink()


def test_calibrate_measures_every_rung_and_the_plan_uses_it(tmp_path, shared_cache):
    ledger = tmp_path / "ledger.jsonl"
    done = _run(["--calibrate", "--output-dir", str(tmp_path / "cal"), *QUICK], _env(shared_cache, ledger))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert sorted(e["profile"] for e in entries) == ["cpu-tiny-4gen", "cpu-tiny-8gen"]
    assert all(e["probe"]["peak_gib"] > 0 and e["peak_gib"] > 0 for e in entries)
    assert not list((tmp_path / "cal").glob("calibrate-*/probe-*/checkpoint-*"))  # probes train nothing
    plan = json.loads(_run(["--auto", "--dry-run", "--json"], _env(shared_cache, ledger)).stdout)
    assert all(c["measured"] is not None for c in plan["candidates"])
    assert plan["chosen"] == "cpu-tiny-8gen"
