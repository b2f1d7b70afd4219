"""The supervisor: attempts in child processes, OOM read and explained, shrink then fall back, resume,
signals, and nothing lost.

The policy tests run a small fake child (tests/support/fake_child.py: writes outcome.json and checkpoints like the
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
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from contract import failure
from contract import oom as oom
from contract.attempt import attempt_environment, estimate_from_env
from contract.environment import ENV_ESTIMATE_GIB
from contract.errors import UsageError
from launcher.card.detect import GpuInfo, Machine
from launcher.plan.choose import make_plan
from launcher.plan.request import PlanRequest
from launcher.run.attempts import AttemptRecord, read_attempts, server_failure_result
from launcher.run.child import attempt_command
from launcher.run.fallback import adjust_vllm_share, decide, next_profile, shrink_batch, shrink_for, shrink_optimizer
from launcher.run.request import RunRequest
from launcher.run.supervise import supervise
from profiles.load import load_profile, profile_from_dict
from support import cli
from support.fake_runs import CPU_SETTINGS, FAKE_CHILD
from support.waiting import finish, wait_until

ROOT = Path(__file__).resolve().parents[3]
DATA = Path(__file__).resolve().parents[3] / "tests" / "data" / "oom"
CPU_MACHINE = Machine(gpus=[], message="test machine: no GPU", host_ram_gib=24.0, host_free_gib=20.0)


def card(total: float, free: float | None = None) -> Machine:
    gpu = GpuInfo(
        name=f"{total:g} GiB test card",
        total_gib=total,
        free_gib=total if free is None else free,
        used_gib=0.0,
        compute_capability=(8, 9),
        driver=None,
        cuda_driver=None,
        index=0,
        source="what-if",
    )
    return Machine(gpus=[gpu], message=f"test card: {total:g} GiB", host_ram_gib=64.0, host_free_gib=60.0)


CPU_BASE = dict(
    **CPU_SETTINGS,
    max_steps=4,
    save_steps=2,
    eval_samples=0,
)


def cpu_profile(
    name: str, ladder: int, generations: int = 8, completion: int = 128, batch: int = 8, accumulation: int = 1, **extra
):
    data = dict(
        CPU_BASE,
        name=name,
        ladder=ladder,
        num_generations=generations,
        max_completion_length=completion,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=accumulation,
        **extra,
    )
    return profile_from_dict(data, f"<test {name}>")


def gpu_profile(name: str, ladder: int, model: str = "Qwen/Qwen3-4B", **extra):
    data = dict(
        name=name,
        ladder=ladder,
        model=model,
        device="cuda",
        max_seq_length=2048,
        max_prompt_length=256,
        max_completion_length=1024,
        num_generations=4,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=1,
        gpu_memory_utilization=0.5,
        dataset="arithmetic",
        max_steps=10,
        save_steps=5,
    )
    data.update(extra)
    return profile_from_dict(data, f"<test {name}>")


def report(name: str) -> oom.OomReport:
    return oom.read_oom((DATA / name).read_text())


def run(plan, tmp_path, monkeypatch, behaviour: dict, resume: bool = False, overrides=()):
    """Supervise with the fake child; returns (exit code, attempt records, console text)."""
    monkeypatch.setenv("FAKE_CHILD_PLAN", json.dumps(behaviour))
    out = io.StringIO()
    code = supervise(
        plan,
        RunRequest(tmp_path / "out", overrides=tuple(overrides), resume=resume),
        child_command=FAKE_CHILD,
        console=Console(file=out, width=200, highlight=False),
    )
    runs = sorted((tmp_path / "out").glob("run-*"))
    records = read_attempts(runs[-1]) if runs else []
    return code, records, out.getvalue()


def run_folder(tmp_path: Path) -> Path:
    return sorted((tmp_path / "out").glob("run-*"))[-1]


def in_run(tmp_path: Path, value: str) -> Path:
    """A path of attempts.jsonl (relative to the run folder) on this disk."""
    return run_folder(tmp_path) / value


def call_of(record: dict, tmp_path: Path) -> dict:
    return json.loads((in_run(tmp_path, record["attempt_dir"]) / "call.json").read_text())


# ---------------------------------------------------------------------------------------------------
# Shrinks (pure)


def test_shrink_halves_batch_and_keeps_effective_batch():
    p = cpu_profile("a", 1, batch=8, accumulation=1)
    new, changes, text = shrink_batch(p)
    assert (new.per_device_train_batch_size, new.gradient_accumulation_steps) == (4, 2)
    assert new.name == "a" and new.effective_batch == 8
    assert changes == {"per_device_train_batch_size": [8, 4], "gradient_accumulation_steps": [1, 2]}
    assert text == (
        "halving per_device_train_batch_size 8 -> 4, gradient_accumulation_steps 1 -> 2, effective batch kept at 8"
    )


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
    # logits and backward on a GPU: the fit solver shrinks by the OOM's shortfall (tests/unit/launcher/test_fit.py holds how)
    for name in ("torch_logits_gib.txt", "torch_backward_mib.txt"):
        new, changes, text = shrink_for(p, report(name), machine)
        assert text.startswith("solver: ") and changes
        assert (new.num_generations, new.effective_batch) == (p.num_generations, p.effective_batch)
    assert shrink_for(p, report("torch_optimizer.txt"), machine)[1] == {"optim": ["adamw_torch", "adamw_8bit"]}
    assert shrink_for(p, report("torch_generation_mib.txt"), machine)[0] is None
    assert shrink_for(p, report("torch_model_load.txt"), machine)[0] is None
    assert shrink_for(p, report("host_cpu_alloc.txt"), machine)[0] is None
    assert shrink_optimizer(gpu_profile("g8", 1, optim="adamw_8bit"))[0] is None


def test_vllm_share_lowered_to_what_was_free():
    p = gpu_profile("g", 1, gpu_memory_utilization=0.7)
    new, changes, text = adjust_vllm_share(p, report("vllm_free_memory.txt"), card(24, free=5.5))
    # (5.21 free - 0.5 headroom) / 23.55 total = 0.20
    assert changes == {"gpu_memory_utilization": [0.7, 0.2]}
    assert text == "lowering gpu_memory_utilization 0.7 -> 0.2"
    assert new.per_device_train_batch_size == 4


def test_vllm_share_is_not_moved_under_standby():
    # Unsloth overrides gpu_memory_utilization under standby: a moved share would retry an identical engine
    for name in ("vllm_free_memory.txt", "vllm_kv_cache.txt"):
        p = gpu_profile("g", 1, gpu_memory_utilization=0.5, vllm_standby=True)
        new, changes, text = adjust_vllm_share(p, report(name), card(24, free=23.0))
        assert new is None and changes == {}
        assert "Unsloth sets vLLM's share itself" in text


def test_vllm_share_not_lowered_below_what_vllm_needs():
    # a 14B model's 4-bit weights do not fit in 0.2 x 24 GiB: the estimator says vLLM cannot start
    p = gpu_profile("big", 1, model="Qwen/Qwen3-14B", gpu_memory_utilization=0.7)
    new, changes, text = adjust_vllm_share(p, report("vllm_free_memory.txt"), card(24, free=5.5))
    assert new is None
    assert text.startswith("at 0.20 the estimate says vLLM cannot start")


def test_vllm_share_raised_when_kv_cache_too_small_and_the_card_has_room():
    p = gpu_profile("g", 1, gpu_memory_utilization=0.3)
    new, changes, text = adjust_vllm_share(p, report("vllm_kv_cache.txt"), card(24))
    # 0.3 x 24 = 7.2 GiB + (0.57 missing + 0.25) = 8.02 GiB -> 0.3342 -> 0.34
    assert changes == {"gpu_memory_utilization": [0.3, 0.34]}
    assert text == "raising gpu_memory_utilization 0.3 -> 0.34"
    # the same refusal on a card with little free memory: the estimate does not allow it
    assert adjust_vllm_share(p, report("vllm_kv_cache.txt"), card(24, free=4.0))[0] is None


def test_next_profile_skips_tried_unfit_and_those_estimated_above_a_failure():
    profiles = [
        cpu_profile("a", 1),
        cpu_profile("a-twin", 2),
        cpu_profile("b", 3, generations=4, completion=64, batch=4),
    ]
    plan = make_plan(PlanRequest(profiles, CPU_MACHINE))
    est_a = plan.candidates[0].estimate.total_gib
    d = next_profile(plan, "a", {"a"}, (est_a, "a"))
    assert d.action == "next" and d.profile.name == "b"
    assert d.skipped == [
        f"skipping a-twin: estimated {est_a:.2f} GiB, not below the {est_a:.2f} GiB of a, which ran out of memory"
    ]
    assert next_profile(plan, "b", {"a", "b"}, None).action == "stop"


def test_decide_shrinks_once_per_profile_then_falls_back():
    plan = make_plan(
        PlanRequest([cpu_profile("a", 1), cpu_profile("b", 2, generations=4, completion=64, batch=4)], CPU_MACHINE)
    )
    a = plan.candidates[0].profile
    first = decide(plan, a, "oom", report("torch_logits_gib.txt"), set(), {"a"}, None)
    assert first.action == "shrink" and first.profile.per_device_train_batch_size == 4
    second = decide(plan, first.profile, "oom", report("torch_logits_gib.txt"), {"a"}, {"a"}, None)
    assert second.action == "next" and second.profile.name == "b"
    fallback_gib = plan.candidates[1].estimate.total_gib
    assert second.text == f"a was already shrunk once; falling back to b (estimated {fallback_gib:.2f} GiB)"
    unsupported = decide(plan, a, "unsupported", None, set(), {"a"}, None)
    assert unsupported.action == "next" and unsupported.text.startswith("the architecture cannot be loaded")


def test_attempt_environment_sets_expandable_segments_on_cuda_except_under_standby():
    plain = gpu_profile("g", 1)
    assert attempt_environment(plain, {})["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    kept = attempt_environment(plain, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"})
    assert kept["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:False"
    merged = attempt_environment(plain, {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"})
    assert merged["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:128,expandable_segments:True"
    # a cpu attempt has no CUDA allocator to configure: a user's setting passes, nothing is added
    assert "PYTORCH_CUDA_ALLOC_CONF" not in attempt_environment(cpu_profile("a", 1), {})
    standby = gpu_profile("s", 1, vllm_standby=True)
    env = attempt_environment(standby, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "GRPO_INJECT_OOM": "s"})
    assert "PYTORCH_CUDA_ALLOC_CONF" not in env
    assert env["UNSLOTH_VLLM_STANDBY"] == "1"
    assert env["GRPO_INJECT_OOM"] == "s"  # passes through unchanged


def test_a_cpu_attempts_openmp_threads_spin_briefly_unless_the_user_says_otherwise():
    assert attempt_environment(cpu_profile("a", 1), {})["GOMP_SPINCOUNT"] == "1000"
    assert attempt_environment(cpu_profile("a", 1), {"GOMP_SPINCOUNT": "50"})["GOMP_SPINCOUNT"] == "50"
    assert "GOMP_SPINCOUNT" not in attempt_environment(gpu_profile("g", 1), {})


# ---------------------------------------------------------------------------------------------------
# Runs with the fake child


def ladder():
    return [
        cpu_profile("a", 1),
        cpu_profile("b", 2, generations=4, completion=64, batch=4),
        cpu_profile("c", 3, generations=2, completion=32, batch=2),
    ]


def test_oom_then_shrink_then_ok(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("GRPO_INJECT_OOM", raising=False)
    plan = make_plan(PlanRequest(ladder(), CPU_MACHINE))
    code, records, out = run(
        plan, tmp_path, monkeypatch, {"a": {"do": "oom", "text": "torch_logits_gib.txt", "oom_if_batch_above": 4}}
    )
    assert code == 0
    assert [(r["profile"], r["status"]) for r in records] == [("a", "oom"), ("a", "ok")]
    assert records[0]["oom"]["site"] == "logits/log-probs"
    assert records[0]["oom"]["shortfall_gib"] == 3.29
    assert records[1]["shrink"] == {"per_device_train_batch_size": [8, 4], "gradient_accumulation_steps": [1, 2]}
    assert records[1]["settings"]["per_device_train_batch_size"] == 4
    assert (
        "attempt 1: a OOM in logits/log-probs (asked 6.01 GiB, 2.72 GiB free): halving "
        "per_device_train_batch_size 8 -> 4, gradient_accumulation_steps 1 -> 2, effective batch kept at 8" in out
    )
    # the shrunk profile is written in the attempt's folder under the same name, and the child got it
    shrunk = yaml.safe_load((in_run(tmp_path, records[1]["attempt_dir"]) / "profile.yaml").read_text())
    assert (shrunk["name"], shrunk["per_device_train_batch_size"], shrunk["gradient_accumulation_steps"]) == ("a", 4, 2)
    call = call_of(records[1], tmp_path)
    attempt_dir = in_run(tmp_path, records[1]["attempt_dir"])
    assert call["argv"][:5] == [
        "attempt",
        "--profile",
        str(attempt_dir / "profile.yaml"),
        "--attempt-dir",
        str(attempt_dir),
    ]
    assert call["PYTORCH_CUDA_ALLOC_CONF"] is None  # a cpu attempt: no CUDA allocator settings added
    assert records[1]["env"] == {"PYTORCH_CUDA_ALLOC_CONF": None, "GRPO_INJECT_OOM": None}
    assert call["pgid"] != os.getpgid(0)  # its own process group: a terminal's Ctrl-C reaches the supervisor only
    # nothing deleted: both attempts' folders and the plan stay
    run_dir = run_folder(tmp_path)
    assert records[0]["attempt_dir"] == "attempt-01-a"  # relative: the run folder may be moved
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "attempt-01-a",
        "attempt-02-a",
        "attempts.jsonl",
        "final",
        "plan.json",
    ]
    assert json.loads((run_dir / "plan.json").read_text())["chosen"] == "a"


def test_each_attempt_gets_the_estimate_its_record_holds(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_ESTIMATE_GIB, "99.5")  # a figure from elsewhere must not reach the child
    plan = make_plan(PlanRequest(ladder(), CPU_MACHINE))
    code, records, _out = run(
        plan, tmp_path, monkeypatch, {"a": {"do": "oom", "text": "torch_logits_gib.txt", "oom_if_batch_above": 4}}
    )
    assert code == 0 and len(records) == 2
    assert records[0]["estimate_gib"] == plan.candidates[0].estimate.total_gib
    for record in records:
        given = call_of(record, tmp_path)[ENV_ESTIMATE_GIB]
        assert record["estimate_gib"] is not None
        # what the trainer reads back is the very figure of attempts.jsonl
        assert estimate_from_env({ENV_ESTIMATE_GIB: given}) == record["estimate_gib"]


def test_attempt_record_keeps_every_key_of_attempts_jsonl():
    # issue 30 adds the plan's predicted seconds per step and the measured ones beside it; issue 41 the
    # lengths re-planned from the previous attempt's answers and this attempt's measured lengths
    keys = [
        "attempt",
        "profile",
        "status",
        "steps",
        "started",
        "duration_s",
        "exit_code",
        "attempt_dir",
        "resumed_from",
        "checkpoint",
        "shrink",
        "estimate_gib",
        "peak_gib",
        "probe",
        "predicted_step_s",
        "step_s",
        "timing",
        "stopped_by",
        "oom",
        "error",
        "decided",
        "env",
        "settings",
        "replanned",
        "lengths",
    ]
    record = AttemptRecord(attempt=1, profile="a", status="oom", oom=report("torch_logits_gib.txt").to_dict())
    assert list(record.to_dict()) == keys
    again = AttemptRecord.from_dict({**record.to_dict(), "future": {"peak_gib": 1.0}})
    assert again.report.site == "logits/log-probs" and again.report.shortfall_gib == pytest.approx(3.29)
    assert again.to_dict()["future"] == {"peak_gib": 1.0}  # a key this version does not know is kept


def test_oom_everywhere_exits_3_with_the_table(tmp_path, monkeypatch):
    plan = make_plan(PlanRequest(ladder(), CPU_MACHINE))
    every = {name: {"do": "oom", "text": "torch_logits_gib.txt"} for name in ("a", "b", "c")}
    code, records, out = run(plan, tmp_path, monkeypatch, every)
    assert code == 3
    # each profile once as planned and once shrunk
    assert [(r["profile"], r["status"], bool(r["shrink"])) for r in records] == [
        ("a", "oom", False),
        ("a", "oom", True),
        ("b", "oom", False),
        ("b", "oom", True),
        ("c", "oom", False),
        ("c", "oom", True),
    ]
    assert "no profile left on the ladder" in out
    assert "attempts" in out and "│ 6 │ c" in out  # the rich table's last row
    assert "every profile that could run here ran out of memory" in out


def test_profile_estimated_above_a_failed_one_is_skipped(tmp_path, monkeypatch):
    profiles = [
        cpu_profile("a", 1, batch=1, accumulation=8),
        cpu_profile("a-twin", 2, batch=1, accumulation=8),
        cpu_profile("c", 3, generations=2, completion=32, batch=2),
    ]
    plan = make_plan(PlanRequest(profiles, CPU_MACHINE))
    code, records, out = run(plan, tmp_path, monkeypatch, {"a": {"do": "oom", "text": "torch_logits_gib.txt"}})
    assert code == 0
    assert [(r["profile"], r["status"]) for r in records] == [("a", "oom"), ("c", "ok")]
    assert "no shrink (per_device_train_batch_size is already 1: nothing to halve)" in out
    assert "skipping a-twin: estimated" in out and "of a, which ran out of memory" in out


def test_next_attempt_resumes_from_the_failed_attempts_checkpoint(tmp_path, monkeypatch):
    # batch 1 cannot shrink, so the OOM at step 3 goes to b, which has the same model and LoRA shape
    profiles = [
        cpu_profile("a", 1, batch=1, accumulation=8),
        cpu_profile("b", 2, generations=4, completion=64, batch=1, accumulation=4),
    ]
    plan = make_plan(PlanRequest(profiles, CPU_MACHINE))
    code, records, out = run(
        plan, tmp_path, monkeypatch, {"a": {"do": "oom", "text": "torch_logits_gib.txt", "at_step": 3}}
    )
    assert code == 0
    first, second = records
    assert (first["status"], first["steps"]) == ("oom", 3)
    assert first["checkpoint"] == str(Path(first["attempt_dir"]) / "checkpoint-2")
    assert second["resumed_from"] == first["checkpoint"]
    assert call_of(second, tmp_path)["argv"][-2:] == ["--resume-from", str(in_run(tmp_path, first["checkpoint"]))]
    assert (second["status"], second["steps"]) == ("ok", 4)
    assert f"resuming from {first['checkpoint']} (step 2)" in out
    assert in_run(tmp_path, first["checkpoint"]).is_dir()  # left where it was


def test_other_lora_shape_starts_fresh(tmp_path, monkeypatch):
    profiles = [
        cpu_profile("a", 1, batch=1, accumulation=8),
        cpu_profile("b", 2, generations=4, completion=64, batch=1, accumulation=4, lora_rank=8),
    ]
    plan = make_plan(PlanRequest(profiles, CPU_MACHINE))
    code, records, _ = run(
        plan, tmp_path, monkeypatch, {"a": {"do": "oom", "text": "torch_logits_gib.txt", "at_step": 3}}
    )
    assert code == 0
    assert records[1]["resumed_from"] is None
    assert "--resume-from" not in call_of(records[1], tmp_path)["argv"]


def test_unsupported_goes_to_the_next_profile_without_shrinking(tmp_path, monkeypatch):
    plan = make_plan(PlanRequest(ladder(), CPU_MACHINE))
    code, records, out = run(plan, tmp_path, monkeypatch, {"a": {"do": "unsupported", "text": "vllm_unsupported.txt"}})
    assert code == 0
    assert [(r["profile"], r["status"]) for r in records] == [("a", "unsupported"), ("b", "ok")]
    assert records[0]["oom"] is None
    assert "the architecture cannot be loaded; falling back to b" in out


def test_error_stops_with_exit_1(tmp_path, monkeypatch):
    plan = make_plan(PlanRequest(ladder(), CPU_MACHINE))
    code, records, out = run(plan, tmp_path, monkeypatch, {"a": {"do": "error"}})
    assert code == 1
    assert [(r["profile"], r["status"]) for r in records] == [("a", "error")]
    assert "not falling back" in out


def test_sigkill_the_kernel_reports_is_read_as_host_ram_and_falls_back_without_shrink(tmp_path, monkeypatch):
    counts = iter([0, 1])  # the cgroup's OOM-kill count before and after the attempt: the kernel killed it
    monkeypatch.setattr(failure, "oom_kill_count", lambda: next(counts, 1))
    plan = make_plan(PlanRequest(ladder(), CPU_MACHINE))
    code, records, out = run(plan, tmp_path, monkeypatch, {"a": {"do": "sigkill"}})
    assert code == 0
    assert records[0]["status"] == "oom" and records[0]["exit_code"] == -9
    assert records[0]["oom"]["kind"] == "host_ram"
    assert [r["profile"] for r in records] == ["a", "b"]
    assert "out of host RAM" in out and "no shrink (host RAM ran out" in out


def test_plain_sigkill_is_not_called_host_oom_and_still_gets_its_line(tmp_path, monkeypatch):
    monkeypatch.setattr(failure, "oom_kill_count", lambda: 0)  # the kernel counts no OOM kill
    monkeypatch.setattr(failure, "_dmesg_names", lambda pid: False)
    plan = make_plan(PlanRequest(ladder(), CPU_MACHINE))
    code, records, out = run(plan, tmp_path, monkeypatch, {"a": {"do": "sigkill"}})
    assert code == 1
    assert [(r["profile"], r["status"], r["exit_code"]) for r in records] == [("a", "error", -9)]
    assert records[0]["oom"] is None
    assert "killed by SIGKILL (the kernel reports no out-of-memory kill" in records[0]["error"]
    assert "host RAM" not in out


def test_sigkill_with_no_word_from_the_kernel_says_cause_unknown(tmp_path, monkeypatch):
    monkeypatch.setattr(failure, "oom_kill_count", lambda: None)
    monkeypatch.setattr(failure, "_dmesg_names", lambda pid: None)
    plan = make_plan(PlanRequest(ladder(), CPU_MACHINE))
    code, records, _out = run(plan, tmp_path, monkeypatch, {"a": {"do": "sigkill"}})
    assert code == 1 and records[0]["status"] == "error"
    assert records[0]["error"].startswith("killed by SIGKILL (cause unknown")


def test_oom_read_from_output_when_the_child_wrote_no_outcome(tmp_path, monkeypatch):
    plan = make_plan(PlanRequest(ladder(), CPU_MACHINE))
    code, records, _ = run(
        plan,
        tmp_path,
        monkeypatch,
        {"a": {"do": "oom_silent", "text": "torch_backward_mib.txt", "oom_if_batch_above": 4}},
    )
    assert code == 0
    assert records[0]["status"] == "oom" and records[0]["oom"]["site"] == "backward"
    assert records[0]["oom"]["asked_gib"] == 0.375
    log = (in_run(tmp_path, records[0]["attempt_dir"]) / "train.log").read_text()
    assert "Tried to allocate 384.00 MiB" in log


def test_vllm_refusal_reported_as_error_is_treated_as_oom(tmp_path, monkeypatch):
    # outcome.json says error; its text is vLLM's start-up refusal: the supervisor reads it as an OOM
    plan = make_plan(PlanRequest(ladder(), CPU_MACHINE))
    code, records, _ = run(plan, tmp_path, monkeypatch, {"a": {"do": "error", "text": "vllm_kv_cache.txt"}})
    assert records[0]["status"] == "oom"
    assert records[0]["oom"]["vllm_problem"] == oom.VLLM_SHARE_TOO_SMALL


def test_nothing_fits_exits_3_before_any_attempt(tmp_path, monkeypatch):
    tiny_machine = Machine(gpus=[], message="test machine: almost no RAM", host_ram_gib=1.0, host_free_gib=0.1)
    plan = make_plan(PlanRequest(ladder(), tiny_machine))
    assert plan.chosen is None
    code, records, out = run(plan, tmp_path, monkeypatch, {})
    assert code == 3 and records == []
    assert "nothing fits" in out
    for candidate in plan.candidates:  # each rung says why it was passed over
        assert f"{candidate.profile.name}: {candidate.reason.split()[0]}" in out


def _send_when_ready(tmp_path: Path, signum: int) -> threading.Thread:
    def wait_and_signal():
        wait_until(lambda: bool(list((tmp_path / "out").glob("run-*/attempt-*/ready"))), watch=[tmp_path])
        os.kill(os.getpid(), signum)  # to the supervisor (this process), as a user would

    thread = threading.Thread(target=wait_and_signal, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_is_forwarded_child_saves_and_run_exits_130(tmp_path, monkeypatch, signum):
    plan = make_plan(PlanRequest(ladder(), CPU_MACHINE))
    thread = _send_when_ready(tmp_path, signum)
    code, records, out = run(plan, tmp_path, monkeypatch, {"a": {"do": "wait_signal", "at_step": 2}})
    thread.join(timeout=5)
    assert code == 130
    assert [(r["profile"], r["status"], r["steps"]) for r in records] == [("a", "interrupted", 3)]
    attempt_dir = in_run(tmp_path, records[0]["attempt_dir"])
    # exactly one, forwarded as SIGTERM (a SIGINT in the attempt's first imports would end it with a traceback)
    assert json.loads((attempt_dir / "signals.json").read_text()) == [int(signal.SIGTERM)]
    assert (attempt_dir / "adapter").is_dir()
    assert "train --resume" in out
    assert signal.getsignal(signal.SIGTERM) is not None  # handlers restored after the run


def test_resume_continues_the_latest_run_from_its_checkpoint(tmp_path, monkeypatch):
    plan = make_plan(PlanRequest(ladder(), CPU_MACHINE))
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
    assert "already finished ok at step 6" in out and "--set max_steps=N, N above 6" in out.replace("\n", " ")
    # ... nor has one asked for no more steps than it trained
    code, records, out = run(plan, tmp_path, monkeypatch, {}, resume=True, overrides=["max_steps=5"])
    assert code == 0 and len(records) == 2 and "nothing to resume" in out


def test_a_finished_run_trains_on_when_resumed_with_more_steps(tmp_path, monkeypatch):
    plan = make_plan(PlanRequest(ladder(), CPU_MACHINE))
    code, records, _ = run(plan, tmp_path, monkeypatch, {}, overrides=["max_steps=4"])
    assert code == 0 and [(r["status"], r["steps"]) for r in records] == [("ok", 4)]
    # the --set was once ignored ("nothing to resume", exit 0): it now continues from the last checkpoint
    code, records, out = run(plan, tmp_path, monkeypatch, {}, resume=True, overrides=["max_steps=7"])
    assert code == 0 and len(list((tmp_path / "out").glob("run-*"))) == 1
    assert [(r["attempt"], r["status"], r["steps"]) for r in records] == [(1, "ok", 4), (2, "ok", 7)]
    assert records[1]["resumed_from"] == records[0]["checkpoint"] and records[1]["settings"]["max_steps"] == 7
    assert "trained on from step 4 to max_steps 7" in records[1]["decided"]
    # a --set that changes the shape cannot continue the checkpoint: refused, as for any resume
    with pytest.raises(UsageError, match="lora_rank"):
        run(plan, tmp_path, monkeypatch, {}, resume=True, overrides=["max_steps=9", "lora_rank=4"])


def test_resume_after_an_unrecorded_oom_takes_the_decision(tmp_path, monkeypatch):
    plan = make_plan(PlanRequest(ladder(), CPU_MACHINE))
    run(plan, tmp_path, monkeypatch, {"a": {"do": "oom", "text": "torch_logits_gib.txt"}, "b": {"do": "error"}})
    # the run stopped at b's error; resume re-runs b (the last attempt) from the start
    code, records, out = run(plan, tmp_path, monkeypatch, {}, resume=True)
    assert code == 0
    assert [(r["profile"], r["status"]) for r in records][-1] == ("b", "ok")


def test_resume_without_a_run_is_a_usage_error(tmp_path, monkeypatch):
    with pytest.raises(UsageError, match="no run-\\* folder"):
        run(make_plan(PlanRequest(ladder(), CPU_MACHINE)), tmp_path, monkeypatch, {}, resume=True)


# ---------------------------------------------------------------------------------------------------
# Several processes and the vLLM server (launcher.run.distributed): accelerate's command, a fake server


def test_attempt_command_is_the_plain_script_on_one_gpu_and_accelerate_on_several(tmp_path, monkeypatch):
    monkeypatch.delenv("GRPO_NUM_MACHINES", raising=False)
    train = str(ROOT / "train.py")
    one = cpu_profile("one", 1)
    args = ["attempt", "--profile", str(tmp_path / "one" / "profile.yaml"), "--attempt-dir", str(tmp_path / "one")]
    assert attempt_command(one, tmp_path / "one", None) == [sys.executable, train, *args]
    assert attempt_command(one, tmp_path / "one", None, FAKE_CHILD) == [*FAKE_CHILD, *args]
    assert not (tmp_path / "one" / "accelerate.yaml").exists()

    two = cpu_profile("two", 1, num_gpus=2, gradient_checkpointing="true")
    folder = tmp_path / "two"
    args = [
        "attempt",
        "--profile",
        str(folder / "profile.yaml"),
        "--attempt-dir",
        str(folder),
        "--resume-from",
        "ck/checkpoint-2",
    ]
    launcher = ["-m", "accelerate.commands.launch", "--config_file", str(folder / "accelerate.yaml")]
    assert attempt_command(two, folder, "ck/checkpoint-2") == [sys.executable, *launcher, train, *args]
    # the test override replaces the interpreter and the script, accelerate's arguments stay
    assert attempt_command(two, folder, "ck/checkpoint-2", FAKE_CHILD) == [
        FAKE_CHILD[0],
        *launcher,
        FAKE_CHILD[1],
        *args,
    ]
    assert yaml.safe_load((folder / "accelerate.yaml").read_text())["num_processes"] == 2


def test_two_processes_are_launched_through_accelerate(tmp_path, monkeypatch):
    for name in ("GRPO_NUM_MACHINES", "CUDA_VISIBLE_DEVICES", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    plan = make_plan(PlanRequest([cpu_profile("pair", 1, num_gpus=2, gradient_checkpointing="true")], CPU_MACHINE))
    assert plan.chosen is not None and plan.chosen.num_gpus == 2
    code, records, out = run(plan, tmp_path, monkeypatch, {})
    assert code == 0, out
    assert [(r["profile"], r["status"], r["steps"]) for r in records] == [("pair", "ok", 4)]
    folder = in_run(tmp_path, records[0]["attempt_dir"])
    calls = [json.loads((folder / name).read_text()) for name in ("call.json", "call-rank1.json")]
    assert [(c["RANK"], c["WORLD_SIZE"]) for c in calls] == [("0", "2"), ("1", "2")]
    assert all(c["GRPO_TRAIN_NO_UNSLOTH"] == "1" for c in calls)  # launch_env's environment reached both
    assert (folder / "outcome.json").is_file() and (folder / "outcome-rank1.json").is_file()
    assert yaml.safe_load((folder / "accelerate.yaml").read_text())["num_processes"] == 2
    assert in_run(tmp_path, records[0]["checkpoint"]) == folder / "checkpoint-4"


# Stands in for `trl vllm-serve` (tests/support/fake_vllm_server.py): answers /health on GRPO_VLLM_PORT, after writing
# its pid; given a text file, prints it and exits 1 (a failed start); "wait": loads for a minute, then gives up.
FAKE_SERVER = [sys.executable, str(Path(__file__).resolve().parents[3] / "tests" / "support" / "fake_vllm_server.py")]


def server_plan():
    p = load_profile(ROOT / "profiles" / "multi-2x24gb-llama3.1-8b.yaml", ["max_steps=4", "save_steps=2"])
    gpus = [GpuInfo(f"24 GiB card {i}", 24.0, 24.0, 0.0, (8, 9), None, None, i, "what-if") for i in range(2)]
    plan = make_plan(
        PlanRequest([p], Machine(gpus=gpus, message="2 test cards", host_ram_gib=64.0, host_free_gib=60.0))
    )
    assert plan.chosen is not None and plan.chosen.uses_vllm_server
    return plan


@pytest.fixture
def server_pids(tmp_path):
    """The file the fake servers write their pids to; any still running at the end is killed (a failing
    test must not leave one behind)."""
    pids = tmp_path / "server.pids"
    yield pids
    for pid in (int(line) for line in (pids.read_text().split() if pids.exists() else [])):
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)


def run_with_server(tmp_path, monkeypatch, behaviour: dict, server_text: str | None = None):
    for name in ("GRPO_NUM_MACHINES", "GRPO_VLLM_HOST", "GRPO_SERVER_NODE"):
        monkeypatch.delenv(name, raising=False)
    from launcher.card.topology import free_port

    monkeypatch.setenv("GRPO_VLLM_PORT", str(free_port()))  # TRL's 8000 may be taken by another run here
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("FAKE_CHILD_PLAN", json.dumps(behaviour))
    pids = tmp_path / "server.pids"  # the server_pids fixture's file
    command = [*FAKE_SERVER, "--pid-file", str(pids)]
    if server_text == "wait":
        command.append("--hang")
    elif server_text:
        command += ["--fail-with", str(DATA / server_text)]
    out = io.StringIO()
    code = supervise(
        server_plan(),
        RunRequest(tmp_path / "out"),
        child_command=FAKE_CHILD,
        server_command=command,
        console=Console(file=out, width=200, highlight=False),
    )
    records = read_attempts(sorted((tmp_path / "out").glob("run-*"))[-1])
    started = [int(line) for line in pids.read_text().split()] if pids.exists() else []
    return code, records, out.getvalue(), started


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_server_mode_starts_the_server_before_the_child_and_stops_it_after(tmp_path, monkeypatch, server_pids):
    code, records, out, servers = run_with_server(tmp_path, monkeypatch, {})
    assert code == 0, out
    assert [r["status"] for r in records] == ["ok"]
    call = call_of(records[0], tmp_path)
    assert call["server_health"] == 200  # the server answered before the child started
    assert call["GRPO_TRAIN_NO_UNSLOTH"] == "1"
    # the child's command went through accelerate, its server port is the one the server listened on
    assert call["argv"][:3] == [
        "attempt",
        "--profile",
        str(in_run(tmp_path, records[0]["attempt_dir"]) / "profile.yaml"),
    ]
    assert (in_run(tmp_path, records[0]["attempt_dir"]) / "accelerate.yaml").is_file()
    assert "serving" in (in_run(tmp_path, records[0]["attempt_dir"]) / "vllm-server.log").read_text()
    assert len(servers) == 1 and gone(servers[0])
    assert "vLLM server ready at http://127.0.0.1:" + call["GRPO_VLLM_PORT"] in out


def test_server_is_stopped_when_the_attempt_fails(tmp_path, monkeypatch, server_pids):
    code, records, out, servers = run_with_server(tmp_path, monkeypatch, {"multi-2x24gb-llama3.1-8b": {"do": "error"}})
    assert code == 1
    assert [r["status"] for r in records] == ["error"]
    assert call_of(records[0], tmp_path)["server_health"] == 200
    assert len(servers) == 1 and gone(servers[0])


def test_a_server_that_runs_out_of_memory_is_an_oom_attempt(tmp_path, monkeypatch, server_pids):
    code, records, out, servers = run_with_server(tmp_path, monkeypatch, {}, server_text="vllm_kv_cache.txt")
    assert code == 3
    first = records[0]
    assert (first["status"], first["steps"], first["exit_code"], first["checkpoint"]) == ("oom", 0, None, None)
    assert first["oom"]["kind"] == oom.KIND_VLLM
    assert first["error"].startswith("the vLLM server exited with status 1 before it answered")
    # no training process ran in any attempt, and every server that was started is gone
    assert not any((in_run(tmp_path, r["attempt_dir"]) / "call.json").exists() for r in records)
    assert len(servers) == len(records) and all(gone(pid) for pid in servers)


def test_a_server_that_fails_otherwise_is_an_error(tmp_path, monkeypatch, server_pids):
    code, records, out, servers = run_with_server(tmp_path, monkeypatch, {}, server_text="not_oom.txt")
    assert code == 1
    assert [(r["status"], r["oom"]) for r in records] == [("error", None)]
    assert not (in_run(tmp_path, records[0]["attempt_dir"]) / "call.json").exists()


def test_a_signal_while_the_server_loads_stops_it_and_the_run(tmp_path, monkeypatch, server_pids):
    def signal_when_started():
        wait_until(lambda: server_pids.exists() and bool(server_pids.read_text().strip()), watch=[tmp_path])
        os.kill(os.getpid(), signal.SIGTERM)  # to the supervisor (this process), as a user would

    thread = threading.Thread(target=signal_when_started, daemon=True)
    thread.start()
    code, records, out, servers = run_with_server(tmp_path, monkeypatch, {}, server_text="wait")
    thread.join(timeout=5)
    assert code == 130
    assert [(r["status"], r["oom"]) for r in records] == [("interrupted", None)]
    assert records[0]["error"] == "stopped by SIGTERM while the vLLM server was starting"
    assert not (in_run(tmp_path, records[0]["attempt_dir"]) / "call.json").exists()
    assert len(servers) == 1 and gone(servers[0])


def test_server_failure_result_reads_the_servers_words():
    text = "the vLLM server exited with status 1 before it answered http://h:1/health; end of log:\n"
    oom_text = text + (DATA / "vllm_free_memory.txt").read_text()
    result = server_failure_result(oom_text, "a/checkpoint-6", 12.345, interrupted=False)
    assert (result.status, result.steps, result.checkpoint, result.duration_s) == ("oom", 6, None, 12.35)
    assert result.report.vllm_problem == oom.VLLM_SHARE_TOO_LARGE
    assert result.error == "the vLLM server exited with status 1 before it answered http://h:1/health; end of log:"
    assert (
        server_failure_result(text + (DATA / "vllm_unsupported.txt").read_text(), None, 1.0, interrupted=False).status
        == "unsupported"
    )
    assert server_failure_result(text + "ValueError: bad flag", None, 1.0, interrupted=False).status == "error"
    stopped = server_failure_result(oom_text, None, 1.0, interrupted=True)
    assert (stopped.status, stopped.report) == ("interrupted", None)


# ---------------------------------------------------------------------------------------------------
# End to end: the real trainer on CPU through train.py

# Short runs: two steps, no evaluation, a small training set (each attempt is a fresh process: ~15 s on 2 cores)
E2E_SETTINGS = ["--set", "max_steps=2", "--set", "save_steps=1", "--set", "eval_samples=0", "--set", "train_samples=32"]


def train_py(tmp_path: Path, *args: str, env_extra: dict | None = None):
    env = dict(os.environ, **(env_extra or {}))
    env.pop("FAKE_CHILD_PLAN", None)
    return cli.train_py("--auto", "--output-dir", str(tmp_path / "out"), *E2E_SETTINGS, *args, env=env)


def e2e_records(tmp_path: Path) -> list[dict]:
    runs = sorted((tmp_path / "out").glob("run-*"))
    return read_attempts(runs[-1])


def test_e2e_injected_oom_shrinks_falls_back_and_resumes_from_the_checkpoint(tmp_path):
    # 8gen OOMs at its second step as planned and again shrunk (the injection names the profile), then 4gen
    # trains on from the first attempt's checkpoint. (An OOM before any checkpoint, on every rung:
    # tests/e2e/test_ledger_runs.py's poisoning sequence.)
    done = train_py(tmp_path, "--set", "max_steps=3", env_extra={"GRPO_INJECT_OOM": "cpu-tiny-8gen@2"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = e2e_records(tmp_path)
    statuses = [(r["profile"], r["status"]) for r in records]
    assert statuses == [("cpu-tiny-8gen", "oom"), ("cpu-tiny-8gen", "oom"), ("cpu-tiny-4gen", "ok")]
    first, second, last = records
    assert first["oom"]["site"] == "logits/log-probs"
    assert (first["steps"], first["checkpoint"].rsplit("/", 1)[-1]) == (1, "checkpoint-1")
    batch = load_profile(ROOT / "profiles" / "cpu-tiny-8gen.yaml").per_device_train_batch_size
    assert second["shrink"] == {
        "per_device_train_batch_size": [batch, batch // 2],
        "gradient_accumulation_steps": [1, 2],
    }
    assert second["resumed_from"] == first["checkpoint"] and last["resumed_from"] == first["checkpoint"]
    assert last["steps"] == 3  # the global step went on
    assert (in_run(tmp_path, last["attempt_dir"]) / "adapter").is_dir()
    assert f"halving per_device_train_batch_size {batch} -> {batch // 2}" in done.stdout


def test_e2e_unsupported_architecture_goes_to_the_next_profile(tmp_path):
    # a test ladder whose first rung is a local model folder with an architecture nothing can load
    model_dir = tmp_path / "model-unknown"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["MambaByteForCausalLM"],
                "model_type": "mambabyte",
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "intermediate_size": 256,
                "vocab_size": 512,
                "tie_word_embeddings": True,
            }
        )
    )
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
        ("cpu-unknown-arch", "unsupported"),
        ("cpu-tiny-4gen", "ok"),
    ]


def test_e2e_two_processes_through_the_supervisor(tmp_path):
    profile = yaml.safe_load((ROOT / "profiles" / "cpu-tiny-4gen.yaml").read_text())
    profile.update(name="cpu-tiny-pair", num_gpus=2, max_steps=2, save_steps=2, eval_samples=0, train_samples=32)
    path = tmp_path / "cpu-tiny-pair.yaml"
    path.write_text(yaml.safe_dump(profile))
    env = dict(os.environ)
    for name in ("FAKE_CHILD_PLAN", "GRPO_INJECT_OOM", "GRPO_NUM_MACHINES", "CUDA_VISIBLE_DEVICES"):
        env.pop(name, None)
    done = cli.train_py("--profile", str(path), "--output-dir", str(tmp_path / "out"), env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = e2e_records(tmp_path)
    assert [(r["profile"], r["status"], r["steps"]) for r in records] == [("cpu-tiny-pair", "ok", 2)]
    folder = in_run(tmp_path, records[0]["attempt_dir"])
    assert json.loads((folder / "outcome-rank1.json").read_text())["status"] == "ok"
    assert (folder / "adapter" / "adapter_config.json").is_file() and (folder / "summary.json").is_file()
    assert done.stdout.count("attempt 'cpu-tiny-pair' done:") == 1  # rank 0 alone reports


def test_e2e_sigterm_saves_and_exits_130(tmp_path):
    env = dict(os.environ)
    env.pop("FAKE_CHILD_PLAN", None)
    proc = cli.start_train_py(
        "--auto",
        "--output-dir",
        str(tmp_path / "out"),
        "--set",
        "max_steps=200",
        "--set",
        "save_steps=100",
        "--set",
        "eval_samples=0",
        "--set",
        "train_samples=32",
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    for line in proc.stdout:  # wait until the trainer reports a finished step ("[NAME] step 1/200 ...")
        lines.append(line)
        if re.search(r"\] step \d+/200", line):
            break
    proc.send_signal(signal.SIGTERM)
    rest, _ = finish(proc)
    output = "".join(lines) + rest
    assert proc.returncode == 130, output[-3000:]
    records = e2e_records(tmp_path)
    assert [r["status"] for r in records] == ["interrupted"]
    assert records[0]["steps"] >= 1
    assert (in_run(tmp_path, records[0]["attempt_dir"]) / "adapter").is_dir()
    assert "train --resume" in output
