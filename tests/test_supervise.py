"""The supervisor: attempts in child processes, OOM read and explained, shrink then fall back, resume,
signals, and nothing lost.

The policy tests run a small fake child (tests/fake_child.py: writes outcome.json and checkpoints like the
trainer) because a GPU OOM cannot happen here; the plans are the real planner's, on a machine described
without a driver. The slow tests at the end run the real trainer on CPU through `python train.py --auto`.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from launcher import oom
from launcher.errors import UsageError
from launcher.gpu import GpuInfo, Machine
from launcher.plan import make_plan
from launcher.profiles import profile_from_dict
from launcher.supervise import (child_env, decide, next_profile, read_attempts, shrink_batch,
                                shrink_for, shrink_optimizer, shrink_vllm, supervise)

ROOT = Path(__file__).resolve().parents[1]
FAKE_CHILD = [sys.executable, str(Path(__file__).resolve().parent / "fake_child.py")]
DATA = Path(__file__).resolve().parent / "data" / "oom"
CPU_MACHINE = Machine(gpus=[], message="test machine: no GPU", host_ram_gib=24.0, host_free_gib=20.0)


def card(total: float, free: float | None = None) -> Machine:
    gpu = GpuInfo(name=f"{total:g} GiB test card", total_gib=total, free_gib=total if free is None else free,
                  used_gib=0.0, compute_capability=(8, 9), driver=None, cuda_driver=None, index=0, source="what-if")
    return Machine(gpus=[gpu], message=f"test card: {total:g} GiB", host_ram_gib=64.0, host_free_gib=60.0)


CPU_BASE = dict(device="cpu", model="tiny", fast_inference=False, load_in_4bit=False, optim="adamw_torch",
                dataset="arithmetic", max_seq_length=256, max_prompt_length=128, max_steps=4, save_steps=2,
                eval_samples=0)


def cpu_profile(name: str, ladder: int, generations: int = 8, completion: int = 128, batch: int = 8,
                accumulation: int = 1, **extra):
    data = dict(CPU_BASE, name=name, ladder=ladder, num_generations=generations, max_completion_length=completion,
                per_device_train_batch_size=batch, gradient_accumulation_steps=accumulation, **extra)
    return profile_from_dict(data, f"<test {name}>")


def gpu_profile(name: str, ladder: int, model: str = "Qwen/Qwen3-4B", **extra):
    data = dict(name=name, ladder=ladder, model=model, device="cuda", max_seq_length=2048, max_prompt_length=256,
                max_completion_length=1024, num_generations=4, per_device_train_batch_size=4,
                gradient_accumulation_steps=1, gpu_memory_utilization=0.5, dataset="arithmetic", max_steps=10,
                save_steps=5)
    data.update(extra)
    return profile_from_dict(data, f"<test {name}>")


def report(name: str) -> oom.OomReport:
    return oom.read_oom((DATA / name).read_text())


def run(plan, tmp_path, monkeypatch, behaviour: dict, resume: bool = False, overrides=()):
    """Supervise with the fake child; returns (exit code, attempt records, console text)."""
    monkeypatch.setenv("FAKE_CHILD_PLAN", json.dumps(behaviour))
    out = io.StringIO()
    code = supervise(plan, output_dir=tmp_path / "out", overrides=list(overrides), resume=resume,
                     child_command=FAKE_CHILD, console=Console(file=out, width=200, highlight=False))
    runs = sorted((tmp_path / "out").glob("run-*"))
    records = read_attempts(runs[-1]) if runs else []
    return code, records, out.getvalue()


def call_of(record: dict) -> dict:
    return json.loads((Path(record["attempt_dir"]) / "call.json").read_text())


# ---------------------------------------------------------------------------------------------------
# Shrinks (pure)

def test_shrink_halves_batch_and_keeps_effective_batch():
    p = cpu_profile("a", 1, batch=8, accumulation=1)
    new, changes, text = shrink_batch(p)
    assert (new.per_device_train_batch_size, new.gradient_accumulation_steps) == (4, 2)
    assert new.name == "a" and new.effective_batch == 8
    assert changes == {"per_device_train_batch_size": [8, 4], "gradient_accumulation_steps": [1, 2]}
    assert text == ("halving per_device_train_batch_size 8 -> 4, gradient_accumulation_steps 1 -> 2, "
                    "effective batch kept at 8")


def test_shrink_odd_batch_divides_by_its_smallest_factor():
    p = cpu_profile("a", 1, generations=3, batch=3, accumulation=2)
    new, changes, text = shrink_batch(p)
    assert (new.per_device_train_batch_size, new.gradient_accumulation_steps) == (1, 6)
    assert text.startswith("dividing by 3 per_device_train_batch_size 3 -> 1")


def test_batch_of_one_cannot_shrink():
    new, changes, text = shrink_batch(cpu_profile("a", 1, batch=1, accumulation=8))
    assert new is None and changes == {}
    assert text == "per_device_train_batch_size is already 1: nothing to halve"


def test_site_picks_the_shrink():
    p = gpu_profile("g", 1, optim="adamw_torch")
    machine = card(24)
    assert shrink_for(p, report("torch_logits_gib.txt"), machine)[1] == {
        "per_device_train_batch_size": [4, 2], "gradient_accumulation_steps": [1, 2]}
    assert shrink_for(p, report("torch_backward_mib.txt"), machine)[0].per_device_train_batch_size == 2
    assert shrink_for(p, report("torch_optimizer.txt"), machine)[1] == {"optim": ["adamw_torch", "adamw_8bit"]}
    assert shrink_for(p, report("torch_generation_mib.txt"), machine)[0] is None
    assert shrink_for(p, report("torch_model_load.txt"), machine)[0] is None
    assert shrink_for(p, report("host_cpu_alloc.txt"), machine)[0] is None
    assert shrink_optimizer(gpu_profile("g8", 1, optim="adamw_8bit"))[0] is None


def test_vllm_share_lowered_to_what_was_free():
    p = gpu_profile("g", 1, gpu_memory_utilization=0.7)
    new, changes, text = shrink_vllm(p, report("vllm_free_memory.txt"), card(24, free=5.5))
    # (5.21 free - 0.5 headroom) / 23.55 total = 0.20
    assert changes == {"gpu_memory_utilization": [0.7, 0.2]}
    assert text == "lowering gpu_memory_utilization 0.7 -> 0.2"
    assert new.per_device_train_batch_size == 4


def test_vllm_share_not_lowered_below_what_vllm_needs():
    # a 14B model's 4-bit weights do not fit in 0.2 x 24 GiB: the estimator says vLLM cannot start
    p = gpu_profile("big", 1, model="Qwen/Qwen3-14B", gpu_memory_utilization=0.7)
    new, changes, text = shrink_vllm(p, report("vllm_free_memory.txt"), card(24, free=5.5))
    assert new is None
    assert text.startswith("at 0.20 the estimate says vLLM cannot start")


def test_vllm_share_raised_when_kv_cache_too_small_and_the_card_has_room():
    p = gpu_profile("g", 1, gpu_memory_utilization=0.3)
    new, changes, text = shrink_vllm(p, report("vllm_kv_cache.txt"), card(24))
    # 0.3 x 24 = 7.2 GiB + (0.57 missing + 0.25) = 8.02 GiB -> 0.3342 -> 0.34
    assert changes == {"gpu_memory_utilization": [0.3, 0.34]}
    assert text == "raising gpu_memory_utilization 0.3 -> 0.34"
    # the same refusal on a card with little free memory: the estimate does not allow it
    assert shrink_vllm(p, report("vllm_kv_cache.txt"), card(24, free=4.0))[0] is None


def test_next_profile_skips_tried_unfit_and_those_estimated_above_a_failure():
    profiles = [cpu_profile("a", 1), cpu_profile("a-twin", 2), cpu_profile("b", 3, generations=4, completion=64,
                                                                             batch=4)]
    plan = make_plan(profiles, CPU_MACHINE)
    est_a = plan.candidates[0].estimate.total_gib
    d = next_profile(plan, "a", {"a"}, (est_a, "a"))
    assert d.action == "next" and d.profile.name == "b"
    assert d.skipped == [f"skipping a-twin: estimated {est_a:.2f} GiB, not below the {est_a:.2f} GiB of a, "
                         "which ran out of memory"]
    assert next_profile(plan, "b", {"a", "b"}, None).action == "stop"


def test_decide_shrinks_once_per_profile_then_falls_back():
    plan = make_plan([cpu_profile("a", 1), cpu_profile("b", 2, generations=4, completion=64, batch=4)],
                     CPU_MACHINE)
    a = plan.candidates[0].profile
    first = decide(plan, a, "oom", report("torch_logits_gib.txt"), set(), {"a"}, None)
    assert first.action == "shrink" and first.profile.per_device_train_batch_size == 4
    second = decide(plan, first.profile, "oom", report("torch_logits_gib.txt"), {"a"}, {"a"}, None)
    assert second.action == "next" and second.profile.name == "b"
    assert second.text == "a was already shrunk once; falling back to b (estimated %.2f GiB)" % (
        plan.candidates[1].estimate.total_gib)
    unsupported = decide(plan, a, "unsupported", None, set(), {"a"}, None)
    assert unsupported.action == "next" and unsupported.text.startswith("the architecture cannot be loaded")


def test_child_env_sets_expandable_segments_except_under_standby():
    plain = cpu_profile("a", 1)
    assert child_env(plain, {})["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    kept = child_env(plain, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"})
    assert kept["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:False"
    merged = child_env(plain, {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"})
    assert merged["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:128,expandable_segments:True"
    standby = gpu_profile("s", 1, vllm_standby=True)
    env = child_env(standby, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "GRPO_INJECT_OOM": "s"})
    assert "PYTORCH_CUDA_ALLOC_CONF" not in env
    assert env["UNSLOTH_VLLM_STANDBY"] == "1"
    assert env["GRPO_INJECT_OOM"] == "s"  # passes through unchanged


# ---------------------------------------------------------------------------------------------------
# Runs with the fake child

def ladder():
    return [cpu_profile("a", 1), cpu_profile("b", 2, generations=4, completion=64, batch=4),
            cpu_profile("c", 3, generations=2, completion=32, batch=2)]


def test_oom_then_shrink_then_ok(tmp_path, monkeypatch):
    plan = make_plan(ladder(), CPU_MACHINE)
    code, records, out = run(plan, tmp_path, monkeypatch,
                             {"a": {"do": "oom", "text": "torch_logits_gib.txt", "oom_if_batch_above": 4}})
    assert code == 0
    assert [(r["profile"], r["status"]) for r in records] == [("a", "oom"), ("a", "ok")]
    assert records[0]["oom"]["site"] == "logits/log-probs"
    assert records[0]["oom"]["shortfall_gib"] == 3.29
    assert records[1]["shrink"] == {"per_device_train_batch_size": [8, 4], "gradient_accumulation_steps": [1, 2]}
    assert records[1]["settings"]["per_device_train_batch_size"] == 4
    assert "attempt 1: a OOM in logits/log-probs (asked 6.01 GiB, 2.72 GiB free): halving " \
           "per_device_train_batch_size 8 -> 4, gradient_accumulation_steps 1 -> 2, effective batch kept at 8" in out
    # the shrunk profile is written in the attempt's folder under the same name, and the child got it
    shrunk = yaml.safe_load((Path(records[1]["attempt_dir"]) / "profile.yaml").read_text())
    assert (shrunk["name"], shrunk["per_device_train_batch_size"], shrunk["gradient_accumulation_steps"]) == ("a", 4, 2)
    call = call_of(records[1])
    assert call["argv"][:4] == ["--profile", str(Path(records[1]["attempt_dir"]) / "profile.yaml"),
                                "--attempt-dir", records[1]["attempt_dir"]]
    assert call["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert call["pgid"] != os.getpgid(0)  # its own process group: a terminal's Ctrl-C reaches the supervisor only
    # nothing deleted: both attempts' folders and the plan stay
    run_dir = Path(records[0]["attempt_dir"]).parent
    assert sorted(p.name for p in run_dir.iterdir()) == ["attempt-01-a", "attempt-02-a", "attempts.jsonl", "plan.json"]
    assert json.loads((run_dir / "plan.json").read_text())["chosen"] == "a"


def test_oom_everywhere_exits_3_with_the_table(tmp_path, monkeypatch):
    plan = make_plan(ladder(), CPU_MACHINE)
    every = {name: {"do": "oom", "text": "torch_logits_gib.txt"} for name in ("a", "b", "c")}
    code, records, out = run(plan, tmp_path, monkeypatch, every)
    assert code == 3
    # each profile once as planned and once shrunk
    assert [(r["profile"], r["status"], bool(r["shrink"])) for r in records] == [
        ("a", "oom", False), ("a", "oom", True), ("b", "oom", False), ("b", "oom", True),
        ("c", "oom", False), ("c", "oom", True)]
    assert "no profile left on the ladder" in out
    assert "attempts" in out and "│ 6 │ c" in out  # the rich table's last row
    assert "every profile that could run here ran out of memory" in out


def test_profile_estimated_above_a_failed_one_is_skipped(tmp_path, monkeypatch):
    profiles = [cpu_profile("a", 1, batch=1, accumulation=8), cpu_profile("a-twin", 2, batch=1, accumulation=8),
                cpu_profile("c", 3, generations=2, completion=32, batch=2)]
    plan = make_plan(profiles, CPU_MACHINE)
    code, records, out = run(plan, tmp_path, monkeypatch, {"a": {"do": "oom", "text": "torch_logits_gib.txt"}})
    assert code == 0
    assert [(r["profile"], r["status"]) for r in records] == [("a", "oom"), ("c", "ok")]
    assert "no shrink (per_device_train_batch_size is already 1: nothing to halve)" in out
    assert "skipping a-twin: estimated" in out and "of a, which ran out of memory" in out


def test_next_attempt_resumes_from_the_failed_attempts_checkpoint(tmp_path, monkeypatch):
    # batch 1 cannot shrink, so the OOM at step 3 goes to b, which has the same model and LoRA shape
    profiles = [cpu_profile("a", 1, batch=1, accumulation=8),
                cpu_profile("b", 2, generations=4, completion=64, batch=1, accumulation=4)]
    plan = make_plan(profiles, CPU_MACHINE)
    code, records, out = run(plan, tmp_path, monkeypatch,
                             {"a": {"do": "oom", "text": "torch_logits_gib.txt", "at_step": 3}})
    assert code == 0
    first, second = records
    assert (first["status"], first["steps"]) == ("oom", 3)
    assert first["checkpoint"] == str(Path(first["attempt_dir"]) / "checkpoint-2")
    assert second["resumed_from"] == first["checkpoint"]
    assert call_of(second)["argv"][-2:] == ["--resume-from", first["checkpoint"]]
    assert (second["status"], second["steps"]) == ("ok", 4)
    assert f"resuming from {first['checkpoint']} (step 2)" in out
    assert (Path(first["attempt_dir"]) / "checkpoint-2").is_dir()  # left where it was


def test_other_lora_shape_starts_fresh(tmp_path, monkeypatch):
    profiles = [cpu_profile("a", 1, batch=1, accumulation=8),
                cpu_profile("b", 2, generations=4, completion=64, batch=1, accumulation=4, lora_rank=8)]
    plan = make_plan(profiles, CPU_MACHINE)
    code, records, _ = run(plan, tmp_path, monkeypatch,
                           {"a": {"do": "oom", "text": "torch_logits_gib.txt", "at_step": 3}})
    assert code == 0
    assert records[1]["resumed_from"] is None
    assert "--resume-from" not in call_of(records[1])["argv"]


def test_unsupported_goes_to_the_next_profile_without_shrinking(tmp_path, monkeypatch):
    plan = make_plan(ladder(), CPU_MACHINE)
    code, records, out = run(plan, tmp_path, monkeypatch,
                             {"a": {"do": "unsupported", "text": "vllm_unsupported.txt"}})
    assert code == 0
    assert [(r["profile"], r["status"]) for r in records] == [("a", "unsupported"), ("b", "ok")]
    assert records[0]["oom"] is None
    assert "the architecture cannot be loaded; falling back to b" in out


def test_error_stops_with_exit_1(tmp_path, monkeypatch):
    plan = make_plan(ladder(), CPU_MACHINE)
    code, records, out = run(plan, tmp_path, monkeypatch, {"a": {"do": "error"}})
    assert code == 1
    assert [(r["profile"], r["status"]) for r in records] == [("a", "error")]
    assert "not falling back" in out


def test_sigkill_is_read_as_host_ram_and_falls_back_without_shrink(tmp_path, monkeypatch):
    plan = make_plan(ladder(), CPU_MACHINE)
    code, records, out = run(plan, tmp_path, monkeypatch, {"a": {"do": "sigkill"}})
    assert code == 0
    assert records[0]["status"] == "oom" and records[0]["exit_code"] == -9
    assert records[0]["oom"]["kind"] == "host_ram"
    assert [r["profile"] for r in records] == ["a", "b"]
    assert "out of host RAM" in out and "no shrink (host RAM ran out" in out


def test_oom_read_from_output_when_the_child_wrote_no_outcome(tmp_path, monkeypatch):
    plan = make_plan(ladder(), CPU_MACHINE)
    code, records, _ = run(plan, tmp_path, monkeypatch,
                           {"a": {"do": "oom_silent", "text": "torch_backward_mib.txt", "oom_if_batch_above": 4}})
    assert code == 0
    assert records[0]["status"] == "oom" and records[0]["oom"]["site"] == "backward"
    assert records[0]["oom"]["asked_gib"] == 0.375
    log = (Path(records[0]["attempt_dir"]) / "train.log").read_text()
    assert "Tried to allocate 384.00 MiB" in log


def test_vllm_refusal_reported_as_error_is_treated_as_oom(tmp_path, monkeypatch):
    # outcome.json says error; its text is vLLM's start-up refusal: the supervisor reads it as an OOM
    plan = make_plan(ladder(), CPU_MACHINE)
    code, records, _ = run(plan, tmp_path, monkeypatch, {"a": {"do": "error", "text": "vllm_kv_cache.txt"}})
    assert records[0]["status"] == "oom"
    assert records[0]["oom"]["vllm_problem"] == oom.VLLM_SHARE_TOO_SMALL


def test_nothing_fits_exits_3_before_any_attempt(tmp_path, monkeypatch):
    tiny_machine = Machine(gpus=[], message="test machine: almost no RAM", host_ram_gib=1.0, host_free_gib=0.1)
    plan = make_plan(ladder(), tiny_machine)
    assert plan.chosen is None
    code, records, out = run(plan, tmp_path, monkeypatch, {})
    assert code == 3 and records == []
    assert "nothing fits" in out


def _send_when_ready(tmp_path: Path, signum: int) -> threading.Thread:
    def wait_and_signal():
        deadline = time.time() + 60
        while time.time() < deadline:
            if list((tmp_path / "out").glob("run-*/attempt-*/ready")):
                os.kill(os.getpid(), signum)  # to the supervisor (this process), as a user would
                return
            time.sleep(0.05)

    thread = threading.Thread(target=wait_and_signal, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_is_forwarded_child_saves_and_run_exits_130(tmp_path, monkeypatch, signum):
    plan = make_plan(ladder(), CPU_MACHINE)
    thread = _send_when_ready(tmp_path, signum)
    code, records, out = run(plan, tmp_path, monkeypatch, {"a": {"do": "wait_signal", "at_step": 2}})
    thread.join(timeout=5)
    assert code == 130
    assert [(r["profile"], r["status"], r["steps"]) for r in records] == [("a", "interrupted", 3)]
    attempt_dir = Path(records[0]["attempt_dir"])
    assert json.loads((attempt_dir / "signals.json").read_text()) == [int(signum)]  # exactly one, forwarded
    assert (attempt_dir / "adapter").is_dir()
    assert "--auto --resume" in out
    assert signal.getsignal(signal.SIGTERM) is not None  # handlers restored after the run


def test_resume_continues_the_latest_run_from_its_checkpoint(tmp_path, monkeypatch):
    plan = make_plan(ladder(), CPU_MACHINE)
    thread = _send_when_ready(tmp_path, signal.SIGTERM)
    code, records, _ = run(plan, tmp_path, monkeypatch, {"a": {"do": "wait_signal", "at_step": 2}})
    thread.join(timeout=5)
    assert code == 130
    code, records, out = run(plan, tmp_path, monkeypatch, {}, resume=True, overrides=["max_steps=6"])
    assert code == 0
    assert len(list((tmp_path / "out").glob("run-*"))) == 1  # the same run folder
    assert [(r["attempt"], r["profile"], r["status"]) for r in records] == [(1, "a", "interrupted"), (2, "a", "ok")]
    assert records[1]["resumed_from"] == records[0]["checkpoint"]
    assert records[1]["steps"] == 6 and records[1]["settings"]["max_steps"] == 6
    # a finished run has nothing left to resume
    code, records, out = run(plan, tmp_path, monkeypatch, {}, resume=True)
    assert code == 0 and len(records) == 2
    assert "already finished ok" in out


def test_resume_after_an_unrecorded_oom_takes_the_decision(tmp_path, monkeypatch):
    plan = make_plan(ladder(), CPU_MACHINE)
    run(plan, tmp_path, monkeypatch, {"a": {"do": "oom", "text": "torch_logits_gib.txt"},
                                      "b": {"do": "error"}})
    # the run stopped at b's error; resume re-runs b (the last attempt) from the start
    code, records, out = run(plan, tmp_path, monkeypatch, {}, resume=True)
    assert code == 0
    assert [(r["profile"], r["status"]) for r in records][-1] == ("b", "ok")


def test_resume_without_a_run_is_a_usage_error(tmp_path, monkeypatch):
    with pytest.raises(UsageError, match="no run-\\* folder"):
        run(make_plan(ladder(), CPU_MACHINE), tmp_path, monkeypatch, {}, resume=True)


# ---------------------------------------------------------------------------------------------------
# End to end: the real trainer on CPU through train.py

# Short runs: two steps, no evaluation, a small training set (each attempt is a fresh process: ~15 s on 2 cores)
E2E_SETTINGS = ["--set", "max_steps=2", "--set", "save_steps=1", "--set", "eval_samples=0",
                "--set", "train_samples=32"]


def train_py(tmp_path: Path, *args: str, env_extra: dict | None = None, timeout: int = 600):
    env = dict(os.environ, **(env_extra or {}))
    env.pop("FAKE_CHILD_PLAN", None)
    return subprocess.run([sys.executable, str(ROOT / "train.py"), "--auto", "--output-dir", str(tmp_path / "out"),
                           *E2E_SETTINGS, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


def e2e_records(tmp_path: Path) -> list[dict]:
    runs = sorted((tmp_path / "out").glob("run-*"))
    return read_attempts(runs[-1])


@pytest.mark.slow
def test_e2e_injected_oom_falls_back_and_ends_ok(tmp_path):
    done = train_py(tmp_path, env_extra={"GRPO_INJECT_OOM": "cpu-tiny-8gen"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = e2e_records(tmp_path)
    statuses = [(r["profile"], r["status"]) for r in records]
    # 8gen OOMs as planned and again shrunk (the injection names the profile), then 4gen trains
    assert statuses == [("cpu-tiny-8gen", "oom"), ("cpu-tiny-8gen", "oom"), ("cpu-tiny-4gen", "ok")]
    assert records[0]["oom"]["site"] == "logits/log-probs"
    assert records[1]["shrink"] == {"per_device_train_batch_size": [8, 4], "gradient_accumulation_steps": [1, 2]}
    assert (Path(records[2]["attempt_dir"]) / "adapter").is_dir()
    assert "halving per_device_train_batch_size 8 -> 4" in done.stdout


@pytest.mark.slow
def test_e2e_oom_everywhere_exits_3(tmp_path):
    done = train_py(tmp_path, env_extra={"GRPO_INJECT_OOM": "cpu-tiny-8gen,cpu-tiny-4gen"})
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-3000:]
    assert [r["status"] for r in e2e_records(tmp_path)] == ["oom"] * 4
    assert "attempts" in done.stdout and "no profile left on the ladder" in done.stdout


@pytest.mark.slow
def test_e2e_oom_after_a_checkpoint_resumes_there(tmp_path):
    done = train_py(tmp_path, "--set", "max_steps=3", env_extra={"GRPO_INJECT_OOM": "cpu-tiny-8gen@2"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = e2e_records(tmp_path)
    first, second = records[0], records[1]
    assert (first["status"], first["steps"]) == ("oom", 1)
    assert first["checkpoint"].endswith("checkpoint-1")
    assert second["resumed_from"] == first["checkpoint"]
    assert records[-1]["status"] == "ok" and records[-1]["steps"] == 3  # the global step went on


@pytest.mark.slow
def test_e2e_unsupported_architecture_goes_to_the_next_profile(tmp_path):
    # a test ladder whose first rung is a local model folder with an architecture nothing can load
    model_dir = tmp_path / "model-unknown"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({
        "architectures": ["MambaByteForCausalLM"], "model_type": "mambabyte", "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 256,
        "vocab_size": 512, "tie_word_embeddings": True}))
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    for src in ("cpu-tiny-4gen.yaml",):
        (profiles / src).write_text((ROOT / "profiles" / src).read_text())
    unknown = yaml.safe_load((ROOT / "profiles" / "cpu-tiny-8gen.yaml").read_text())
    unknown.update(name="cpu-unknown-arch", model=str(model_dir), ladder=1)
    (profiles / "cpu-unknown-arch.yaml").write_text(yaml.safe_dump(unknown))
    done = train_py(tmp_path, "--profiles-dir", str(profiles))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert [(r["profile"], r["status"]) for r in e2e_records(tmp_path)] == [
        ("cpu-unknown-arch", "unsupported"), ("cpu-tiny-4gen", "ok")]


@pytest.mark.slow
def test_e2e_sigterm_saves_and_exits_130(tmp_path):
    env = dict(os.environ)
    env.pop("FAKE_CHILD_PLAN", None)
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), "--auto", "--output-dir", str(tmp_path / "out"),
                             "--set", "max_steps=200", "--set", "save_steps=100", "--set", "eval_samples=0",
                             "--set", "train_samples=32"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env)
    lines = []
    for line in proc.stdout:  # wait until the trainer reports a finished step ("[NAME] step 1/200 ...")
        lines.append(line)
        if re.search(r"\] step \d+/200", line):
            break
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=300)
    output = "".join(lines) + rest
    assert proc.returncode == 130, output[-3000:]
    records = e2e_records(tmp_path)
    assert [r["status"] for r in records] == ["interrupted"]
    assert records[0]["steps"] >= 1
    assert (Path(records[0]["attempt_dir"]) / "adapter").is_dir()
    assert "--auto --resume" in output
