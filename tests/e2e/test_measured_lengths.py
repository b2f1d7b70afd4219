"""The answers measured before the plan is trusted, end to end on CPU through `python train.py train`: the CPU
default's length probe, its cut share per step and summary.json's completion_lengths; and the tiny model's variant
that writes long answers (`model: tiny-long`, a rung of a ladder: a cap written in a --profile file is pinned),
whose first attempt is cut at the cap and re-planned, the next attempt training at the new cap, and the next plan
reading the measured lengths from the ledger; and the same answers at a cap the user pinned (written in the
--profile file, or --set), which trains as it is and records what the answers call for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from support.cli import train_py

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "profiles" / "cpu-tiny-8gen.yaml"
QUICK = {"max_steps": 2, "save_steps": 100, "eval_samples": 4, "train_samples": 256}


def profile_file(tmp_path: Path, **changes) -> Path:
    data = {**yaml.safe_load(DEFAULT.read_text()), **QUICK, **changes}
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_train(tmp_path: Path, profile: Path, tiny_cache: Path, *extra: str, ladder: bool = False):
    """`train --profile FILE` (and `extra` arguments), or with `ladder` the file as the one rung of a profiles
    folder: a cap written in a --profile file is pinned (never re-planned), a rung's is the plan's."""
    ledger = tmp_path / "ledger.jsonl"
    if ladder:
        folder = tmp_path / "ladder"
        folder.mkdir(exist_ok=True)
        (folder / profile.name).write_text(profile.read_text())
    done = train_py(
        "train",
        *(("--profiles-dir", str(tmp_path / "ladder")) if ladder else ("--profile", str(profile))),
        "--output-dir",
        str(tmp_path / "out"),
        *extra,
        GRPO_TRAIN_CACHE=str(tiny_cache),
        GRPO_TRAIN_LEDGER=str(ledger),
        OMP_NUM_THREADS="1",
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    run = sorted((tmp_path / "out").glob("run-*"))[-1]
    records = [json.loads(line) for line in (run / "attempts.jsonl").read_text().splitlines()]
    return run, records, done


def summary(run: Path, record: dict) -> dict:
    return json.loads((run / record["attempt_dir"] / "summary.json").read_text())


def test_the_cpu_defaults_answers_are_measured_and_fit_its_cap(tmp_path, tiny_cache):
    run, records, done = run_train(tmp_path, profile_file(tmp_path), tiny_cache)
    assert [r["status"] for r in records] == ["ok"]
    probe = records[0]["lengths"]
    assert probe["source"] == "probe" and probe["samples"] == 24 and probe["cap"] == 48
    assert probe["p95"] < 48 and probe["switches"] == {"enable_thinking": False}
    # the plan's estimate for the task (its reference solutions x2.5) expects 39 tokens; the tiny model writes about
    # 21: said, and kept for the next plan, but no re-plan (the cap holds the answers)
    assert "x the 39 expected" in probe["overruled"]
    lengths = summary(run, records[0])["completion_lengths"]
    assert lengths["planned_cap"] == 48 and lengths["planned_expected"] == 39 and lengths["source"] == "probe"
    assert lengths["measured_p95"] == probe["p95"] and lengths["cut_share"] == probe["cut_share"]
    rows = [json.loads(line) for line in (run / records[0]["attempt_dir"] / "metrics.jsonl").read_text().splitlines()]
    assert all(isinstance(r["cut_share"], float) and 0.0 <= r["cut_share"] <= 1.0 for r in rows)
    assert "length probe: 24 answers sampled at the cap of 48 tokens" in done.stdout


def test_long_answers_replan_the_cap_end_to_end(tmp_path, tiny_cache):
    profile = profile_file(tmp_path, name="cpu-tiny-long", model="tiny-long", expected_completion_length=0)
    run, records, done = run_train(tmp_path, profile, tiny_cache, ladder=True)
    statuses = [r["status"] for r in records]
    # cut at 48, then (at most twice a run) at each doubled cap until the answers end within it
    assert statuses in (["replanned", "ok"], ["replanned", "replanned", "ok"]), statuses
    first, second, last = records[0], records[1], records[-1]
    assert first["steps"] == 0 and first["lengths"]["p95"] == 48 and 0.5 < first["lengths"]["cut_share"] < 1
    assert second["replanned"]["max_completion_length"] == [48, 96]
    assert last["steps"] == QUICK["max_steps"] and last["settings"]["max_completion_length"] in (96, 192)
    lengths = summary(run, last)["completion_lengths"]
    assert lengths["planned_cap"] == last["settings"]["max_completion_length"]
    assert lengths["measured_p95"] < lengths["planned_cap"] and lengths["source"] == "probe"
    assert "stopping before training to re-plan the cap" in done.stdout
    # the next plan reads the answers this machine measured
    again = train_py("plan", "--json", "--profile", str(profile), GRPO_TRAIN_LEDGER=str(tmp_path / "ledger.jsonl"))
    notes = json.loads(again.stdout)["notes"]
    assert any("lengths of tiny-long on arithmetic" in n and "(measured on this machine)" in n for n in notes), notes


@pytest.mark.parametrize("pinned_by", ["file", "set"])
def test_a_pinned_cap_is_held_and_what_the_answers_call_for_is_recorded(tmp_path, tiny_cache, pinned_by):
    """`--profile FILE` runs as written, and a --set is the user's: answers cut at a cap pinned either way never
    re-plan it; the attempt trains at it, warns, and keeps what the answers call for with the measurement."""
    written = 48 if pinned_by == "file" else "auto"  # auto: the plan would derive it, but for the --set
    profile = profile_file(tmp_path, name="cpu-tiny-long", model="tiny-long", max_completion_length=written)
    extra = ("--set", "max_completion_length=48") if pinned_by == "set" else ()
    run, records, done = run_train(tmp_path, profile, tiny_cache, *extra)
    assert [r["status"] for r in records] == ["ok"]
    record = records[0]
    assert record["settings"]["max_completion_length"] == 48 and record["steps"] == QUICK["max_steps"]
    # the tiny-long answers are cut at 48 (as in the re-planned run above): they call for twice the cap
    assert record["lengths"]["p95"] == 48 and record["lengths"]["held"] == {"max_completion_length": [48, 96]}
    lengths = summary(run, record)["completion_lengths"]
    assert lengths["planned_cap"] == 48 and lengths["held"] == record["lengths"]["held"]
    assert "reaches the cap of 48" in lengths["overruled"]
    assert "training at the cap of 48 tokens as it is" in done.stdout
    assert "stopping before training to re-plan the cap" not in done.stdout
