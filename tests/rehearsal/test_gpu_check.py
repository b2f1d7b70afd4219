"""The GPU measurement kit (`train.py gpu-check`, measure/) end to end on the CPU, against the tiny architecture,
so that it cannot rot between the runs on real cards; and `train.py --calibrate --random-weights`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from support.cli import start_train_py, train_py
from support.waiting import finish


def _env(tmp_path: Path) -> dict:
    env = dict(os.environ)
    env["GRPO_TRAIN_CACHE"] = str(tmp_path / "cache")
    env["GRPO_TRAIN_LEDGER"] = str(tmp_path / "ledger.jsonl")
    env["HF_HUB_OFFLINE"] = "1"  # nothing is downloaded: this proves it
    for key in ("GRPO_INJECT_OOM", "GRPO_RANDOM_WEIGHTS", "GRPO_PROBE_ONLY"):
        env.pop(key, None)
    return env


def _kit(*args, env=None):
    return train_py("gpu-check", *args, env=env)


@pytest.mark.parametrize(
    "option, value",
    [
        ("--budget-s", "inf"),
        ("--budget-s", "1e308"),
        ("--budget-s", "nan"),
        ("--budget-s", "-5"),
        ("--budget-s", "84"),  # under MIN_BUDGET_S: not one probe could run, every row would say "not run"
        ("--probe-timeout-s", "inf"),
        ("--probe-timeout-s", "abc"),
    ],
)
def test_a_time_that_is_not_a_finite_number_of_seconds_is_refused_up_front(tmp_path, option, value):
    done = _kit(option, value, "--out-dir", tmp_path / "out")
    assert done.returncode == 2 and option in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()  # refused before anything was written


@pytest.mark.parametrize("option", ["--out-dir", "--work-dir"])
def test_a_folder_option_naming_a_file_is_refused_before_any_probe(tmp_path, option):
    a_file = tmp_path / "report.md"
    a_file.write_text("mine\n")
    done = _kit(option, a_file, *(["--out-dir", tmp_path / "out"] if option == "--work-dir" else []))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{option} {a_file}: this is a file, not a folder" in done.stderr and "fix:" in done.stderr
    assert a_file.read_text() == "mine\n"


def test_other_bad_options_are_refused_up_front(tmp_path):
    for args, words in (
        (["--probe-timeout-s", "500", "--budget-s", "300"], "longer than --budget-s"),
        (["--models", "no-such-model"], "no catalogue architecture"),
        (["--work-dir", tmp_path / "same", "--out-dir", tmp_path / "same"], "is --out-dir too"),
    ):
        done = _kit(*args)
        assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr, done.stderr
    # through the CLI command too
    done = train_py("gpu-check", "--budget-s", "inf")
    assert done.returncode == 2 and "--budget-s" in done.stderr


def _h100():
    from launcher.card.detect import GpuInfo, Machine

    gpu = GpuInfo(
        name="NVIDIA H100 80GB HBM3",
        total_gib=79.2,
        free_gib=78.7,
        used_gib=0.5,
        compute_capability=(9, 0),
        driver="580",
        cuda_driver="13.0",
        index=0,
        source="what-if",
    )
    return Machine(gpus=[gpu], message="", host_ram_gib=128.0, host_free_gib=120.0)


def test_unsloths_path_runs_first_over_the_shipped_rungs_architectures_then_plain_trl():
    from measure.cases import DEFAULT_GPU_CASES, plan_cases

    cases = plan_cases(_h100(), unsloth=True, bitsandbytes=True, models=None)
    order = [(c["path"], c["architecture"].rpartition("/")[2], c["precision"]) for c in cases]
    shipped = [(name.rpartition("/")[2], precision) for name, precision in DEFAULT_GPU_CASES]
    assert [(a, p) for path, a, p in order if path == "unsloth"] == shipped  # the spread of sizes first
    assert [path for path, _, _ in order] == ["unsloth"] * 4 + ["trl+peft"] * 4
    names = {a for _, a, _ in order}
    # the shipped rungs' families: a 0.5B, a 3B, Llama-3.1-8B in 4-bit, Qwen2.5-14B in 16-bit
    assert {"Qwen2.5-0.5B-Instruct", "Llama-3.2-3B-Instruct", "Llama-3.1-8B-Instruct", "Qwen2.5-14B-Instruct"} <= names
    assert ("unsloth", "Llama-3.1-8B-Instruct", "4-bit") in order and (
        "unsloth",
        "Qwen2.5-14B-Instruct",
        "16-bit",
    ) in order
    assert all(c["missing"] is None and c["fits"] for c in cases) and {c["optim"] for c in cases} == {"adamw_8bit"}
    # every case keeps the overrides it was built from: the refit rebuilds the profile from them
    assert all(f"model={c['architecture']}" in c["settings"] for c in cases)


def test_models_picks_architectures_each_in_both_precisions():
    from measure.cases import plan_cases

    cases = plan_cases(_h100(), unsloth=True, bitsandbytes=True, models=["Qwen3-0.6B"])
    assert [(c["path"], c["precision"]) for c in cases] == [
        ("unsloth", "16-bit"),
        ("unsloth", "4-bit"),
        ("trl+peft", "16-bit"),
        ("trl+peft", "4-bit"),
    ]


def test_without_bitsandbytes_unsloths_gpu_path_and_4bit_wait_and_the_rest_uses_a_plain_optimizer():
    from measure.cases import plan_cases

    cases = plan_cases(_h100(), unsloth=True, bitsandbytes=False, models=["Qwen3-0.6B"])
    runnable = [(c["path"], c["precision"]) for c in cases if c["missing"] is None]
    assert runnable == [("trl+peft", "16-bit")]
    assert {c["missing"] for c in cases if c["missing"]} == {"not run (needs bitsandbytes)"}
    assert {c["optim"] for c in cases} == {"adamw_torch"}  # the 8-bit optimizers are bitsandbytes'


def test_the_random_weights_of_an_architecture_are_removed(tmp_path):
    from measure.kit import remove_random_models

    (tmp_path / "random-qwen3-0.6b-abc" / "x").mkdir(parents=True)
    (tmp_path / "tiny-model").mkdir()
    assert remove_random_models(tmp_path) == ["random-qwen3-0.6b-abc"]
    assert [p.name for p in tmp_path.iterdir()] == ["tiny-model"]


def test_the_budget_is_kept_by_the_kits_own_clock(tmp_path):
    """The schedule, on an injected clock: a probe starts only with MIN_PROBE_S left, runs at most what is left
    of the budget, and what did not start is reported as not run for time; the table is written either way."""
    from measure import kit
    from measure.processes import STOP_WORST_S

    now = [1000.0]
    given = []

    def probe(case, work, cache, timeout_s, stopper, command, lengths):
        given.append(timeout_s)
        # each probe runs to its limit and is then stopped as slowly as a stop can be
        now[0] += timeout_s + STOP_WORST_S
        return {
            "status": "ok",
            "error": None,
            "probe": {"peak_gib": 0.5, "held_before_gib": 0.4},
            "backend": "transformers",
            "seconds": timeout_s + STOP_WORST_S,
            "timeout_s": timeout_s,
            "log_tail": None,
        }

    options = kit.KitOptions(
        out_dir=tmp_path / "out",
        budget_s=110.0,
        probe_timeout_s=100.0,
        work_dir=tmp_path / "work",
        clock=lambda: now[0],
        probe=probe,
        imports={"bitsandbytes": {"imports": False}, "unsloth": {"imports": True}},
        say=lambda line: None,
    )
    (tmp_path / "out").mkdir()
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    code, report = kit.run_kit(options)
    # the kit's handlers were its own while it ran: this process (a test worker) gets its own back
    assert {signum: signal.getsignal(signum) for signum in before} == before
    # 110 s: the first probe gets min(100, 110 - the reserve); what its stop leaves is under MIN_PROBE_S
    assert given == [110.0 - kit.FINISH_RESERVE_S]
    assert [row["status"] for row in report["probes"]] == ["ok", kit.tables.NOT_RUN_TIME]
    assert report["oom_fallback"] == {"status": "not run", "why": "the budget ran out first"}
    # the slowest stop still ends inside the budget, with time to remove the weights and write the report
    assert report["runs"][-1]["seconds"] == given[0] + STOP_WORST_S <= 110.0 - 10.0
    assert report["runs"][-1]["budget_s"] == 110.0
    assert json.loads((tmp_path / "out" / "cpu.json").read_text())["probes"][1]["status"] == kit.tables.NOT_RUN_TIME
    assert code == 1  # the OOM check did not run


def _gpu_check_args(*argv):
    from commands import parser_for
    from commands.gpu_check import check_options

    args = parser_for("gpu-check").parse_args([str(a) for a in argv])
    check_options(args)
    return args


@pytest.mark.parametrize("budget", ["120", "150", "239.5"])
def test_a_budget_under_the_default_probe_timeout_is_taken_with_the_probe_timeout_cut_to_it(tmp_path, budget):
    """docs/gpu.md's short second call, and scripts/gpu-kit.sh with a short KIT_CALL_S: only --budget-s given."""
    args = _gpu_check_args("--budget-s", budget, "--out-dir", tmp_path / "out")
    assert args.budget_s == float(budget) and args.probe_timeout_s == float(budget)
    assert _gpu_check_args("--out-dir", tmp_path / "out").probe_timeout_s == 240.0  # the default, as before


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--budget-s", "119"], "--budget-s"),  # under MIN_BUDGET_S: not one probe could start after the import check
        (["--probe-timeout-s", "10"], "--probe-timeout-s"),  # a probe could not even import its libraries
        (["--probe-timeout-s", "44.9"], "--probe-timeout-s"),
        (["--probe-timeout-s", "-0"], "--probe-timeout-s"),
        (["--budget-s", "200", "--probe-timeout-s", "300"], "longer than --budget-s"),  # asked for: not cut
    ],
)
def test_a_budget_or_probe_timeout_no_probe_could_use_is_refused_up_front(tmp_path, capsys, argv, words):
    from commands import main

    code = main(["gpu-check", *argv, "--out-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and words in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()  # refused before anything was written


@pytest.mark.parametrize("probe_timeout", [None, 45.0, 60.0])
def test_at_the_floor_a_probe_runs_however_long_the_import_check_takes(tmp_path, monkeypatch, probe_timeout):
    """--budget-s at its floor (MIN_BUDGET_S), the import check taking all the time it is given and each probe and
    its stop as long as they can be: one probe still runs, for at least MIN_PROBE_S, and the kit ends in time."""
    from measure import kit
    from measure.processes import STOP_WORST_S

    now = [1000.0]
    given = []
    import_given = []

    def import_check(modules, env, timeout_s, stopper):
        import_given.append(timeout_s)
        now[0] += timeout_s  # Unsloth's import on a slow machine: cut at its limit
        return {m: {"imports": m == "bitsandbytes", "error": "its import outlasted the kit's time"} for m in modules}

    def probe(case, work, cache, timeout_s, stopper, command, lengths):
        given.append(timeout_s)
        now[0] += timeout_s + STOP_WORST_S
        return {
            "status": "ok",
            "error": None,
            "probe": {"peak_gib": 0.5, "held_before_gib": 0.4},
            "backend": "transformers",
            "seconds": timeout_s + STOP_WORST_S,
            "timeout_s": timeout_s,
            "log_tail": None,
        }

    monkeypatch.setattr(kit, "import_check", import_check)
    options = kit.KitOptions(
        out_dir=tmp_path / "out",
        budget_s=kit.MIN_BUDGET_S,
        probe_timeout_s=min(kit.PROBE_TIMEOUT_S, kit.MIN_BUDGET_S) if probe_timeout is None else probe_timeout,
        work_dir=tmp_path / "work",
        clock=lambda: now[0],
        probe=probe,
        say=lambda line: None,
    )
    (tmp_path / "out").mkdir()
    code, report = kit.run_kit(options)
    assert len(given) == 1 and given[0] >= kit.MIN_PROBE_S
    assert import_given == [kit.IMPORT_CHECK_S]  # the floor's share: the rest is one probe's and the finish's
    assert [row["status"] for row in report["probes"]].count("ok") == 1
    assert report["runs"][-1]["seconds"] <= kit.MIN_BUDGET_S - 10.0  # the weights removed and the table written


def test_calibrate_on_random_weights_feeds_the_ledger_marked(tmp_path):
    env = _env(tmp_path)
    done = train_py("--calibrate", "--random-weights", "--output-dir", tmp_path / "out", env=env)
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
    done = train_py("--auto", "--random-weights", "--output-dir", tmp_path, env=_env(tmp_path))
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

    from profiles.catalog import resolve
    from tiny_model.random_weights import build_key, config_kwargs, model_type

    arch = resolve("Qwen/Qwen3-0.6B")
    config = AutoConfig.for_model(model_type(arch), **config_kwargs(arch, arch.vocab, 4096))
    assert (config.model_type, config.hidden_size, config.head_dim, config.vocab_size) == ("qwen3", 1024, 128, 151936)
    assert build_key(arch, "bfloat16", 4096) != build_key(arch, "float32", 4096)


def test_a_probe_past_its_time_is_stopped_with_its_whole_process_group(tmp_path):
    from measure import processes

    # a child that starts a grandchild and ignores SIGINT: both must be gone once run_bounded returns
    pids = tmp_path / "pids"
    script = (
        "import os, signal, subprocess, sys, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}'); time.sleep(600)"
    )
    code, stopped = processes.run_bounded(
        [sys.executable, "-c", script], dict(os.environ), 2.0, tmp_path / "log", processes.Stopper()
    )
    assert stopped and code is not None
    for pid in map(int, pids.read_text().split()):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        # a zombie awaiting its reaper is gone too: its state says so
        state = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "Z"
        assert state == "Z", f"process {pid} still runs"


def test_a_kit_stopped_by_a_signal_leaves_its_table(tmp_path):
    import signal
    import time

    out = tmp_path / "out"
    proc = start_train_py(
        "gpu-check",
        "--out-dir",
        out,
        "--work-dir",
        tmp_path / "work",
        "--budget-s",
        "900",
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # the first table is written once the card and the libraries are known, before the first probe
    while not (out / "cpu.json").is_file() and proc.poll() is None:
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = finish(proc)
    assert proc.returncode == 130, err[-3000:]
    report = json.loads((out / "cpu.json").read_text(encoding="utf-8"))
    assert report["probes"] and all(
        row["status"] in ("ok", "interrupted", "not run (stopped)", "not run (time budget)") for row in report["probes"]
    ), [row["status"] for row in report["probes"]]
