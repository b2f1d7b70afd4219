"""The GPU measurement kit (benchmarks/gpu_check.py) end to end on the CPU, against the tiny architecture,
so that it cannot rot between the runs on real cards; and `train.py --calibrate --random-weights`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# two or three probe processes and a supervised two-rung run, each importing the trainer: minutes when busy
KIT_TIMEOUT_S = 1500


def _env(tmp_path: Path) -> dict:
    env = dict(os.environ)
    env["GRPO_TRAIN_CACHE"] = str(tmp_path / "cache")
    env["GRPO_TRAIN_LEDGER"] = str(tmp_path / "ledger.jsonl")
    env["HF_HUB_OFFLINE"] = "1"  # nothing is downloaded: this proves it
    for key in ("GRPO_INJECT_OOM", "GRPO_RANDOM_WEIGHTS", "GRPO_PROBE_ONLY"):
        env.pop(key, None)
    return env


@pytest.mark.slow
def test_the_kit_runs_end_to_end_on_the_cpu(tmp_path):
    out = tmp_path / "gpu"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--out-dir", str(out),
                           "--work-dir", str(tmp_path / "work")], cwd=REPO, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=KIT_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    report = json.loads((out / "cpu.json").read_text(encoding="utf-8"))
    table = (out / "cpu.md").read_text(encoding="utf-8")
    ran = [row for row in report["probes"] if row["status"] == "ok"]
    assert {row["path"] for row in ran} == set(report["paths"]) and "trl+peft" in report["paths"]
    for row in ran:
        assert row["architecture"] == "tiny" and row["probe"]["random_weights"] is True
        measured, estimate = row["measured"], row["estimate"]
        assert measured["peak_gib"] > 0 and measured["held_gib"] > 0 and estimate["total_gib"] > 0
        assert 0.2 < row["measured_over_estimate"] < 5
        assert f"| tiny | {row['path']} | float32 |" in table
    # the plain path trained through transformers + PEFT, Unsloth's through Unsloth
    assert {row["path"]: row["backend"] for row in ran}.get("trl+peft") == "transformers"
    oom = report["oom_fallback"]
    assert oom["status"] == "ok" and oom["oom_read"] and oom["fell_back_and_finished"], oom
    assert [a["status"] for a in oom["attempts"]][0] == "oom" and oom["attempts"][-1]["status"] == "ok"
    assert "## Out of memory, read and fallen back from" in table


@pytest.mark.slow
def test_calibrate_on_random_weights_feeds_the_ledger_marked(tmp_path):
    env = _env(tmp_path)
    done = subprocess.run([sys.executable, str(REPO / "train.py"), "--calibrate", "--random-weights",
                           "--output-dir", str(tmp_path / "out")], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=KIT_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # what it did, from its structured record (the terminal's text wraps with the clone's path length)
    (folder,) = (tmp_path / "out").glob("calibrate-*")
    summary = json.loads((folder / "calibration.json").read_text(encoding="utf-8"))
    assert summary["random_weights"] is True and summary["exit_code"] == 0
    assert summary["recorded"] == len(summary["probes"]) > 0
    entries = [json.loads(line) for line in Path(env["GRPO_TRAIN_LEDGER"]).read_text().splitlines() if line]
    assert entries and all(e["probe"]["random_weights"] is True and e["peak_gib"] > 0 for e in entries)
    # built offline beside the tiny model, not the warm-started tiny model itself
    assert any(p.name.startswith("random-tiny-") for p in (tmp_path / "cache").iterdir())


def test_random_weights_only_with_calibrate(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "train.py"), "--auto", "--random-weights",
                           "--output-dir", str(tmp_path)], cwd=REPO, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "--random-weights only applies to --calibrate" in done.stderr


def test_random_architecture_follows_the_catalogue(tmp_path):
    from profiles.catalog import resolve
    from tiny_model.random_weights import config_kwargs, model_type

    gemma = resolve("unsloth/gemma-3-4b-it")
    assert model_type(gemma) == "gemma3_text"  # the text decoder of the multimodal entry
    kwargs = config_kwargs(resolve("Qwen/Qwen2.5-7B-Instruct"), 152064, 4096)
    assert (kwargs["hidden_size"], kwargs["num_hidden_layers"], kwargs["num_key_value_heads"]) == (3584, 28, 4)
    assert kwargs["tie_word_embeddings"] is False


def test_a_catalogue_architecture_is_built_offline_from_its_facts(tmp_path):
    # the smallest real shape, cut to two layers' worth of checking: the folder loads as that architecture
    from transformers import AutoConfig

    from tiny_model.random_weights import build_key, config_kwargs, model_type

    from profiles.catalog import resolve

    arch = resolve("Qwen/Qwen3-0.6B")
    config = AutoConfig.for_model(model_type(arch), **config_kwargs(arch, arch.vocab, 4096))
    assert (config.model_type, config.hidden_size, config.head_dim, config.vocab_size) == ("qwen3", 1024, 128,
                                                                                         151936)
    assert build_key(arch, "bfloat16", 4096) != build_key(arch, "float32", 4096)
