"""The ledger: what a machine measured, kept across runs and read back by the planner."""

from __future__ import annotations

import json
import multiprocessing

import pytest

from launcher.memory import ledger
from launcher.card.detect import GpuInfo, Machine
from launcher.oom.read import read_oom
from launcher.profile.load import load_profile

PROFILES = "profiles"


def _card(name="NVIDIA L4", total=22.5, free=22.0):
    gpu = GpuInfo(name=name, total_gib=total, free_gib=free, used_gib=total - free, compute_capability=(8, 9),
                  driver="580.1", cuda_driver="13.0", index=0, source="nvml")
    return Machine(gpus=[gpu], message="", host_ram_gib=64.0, host_free_gib=60.0)


def _cpu(ram=24.0):
    return Machine(gpus=[], message="no GPU", host_ram_gib=ram, host_free_gib=ram - 2)


@pytest.fixture
def gpu_profile():
    return load_profile(f"{PROFILES}/gpu-24gb-llama3.1-8b.yaml")


@pytest.fixture
def cpu_profile():
    return load_profile(f"{PROFILES}/cpu-tiny-8gen.yaml")


def test_fingerprint_follows_memory_keys_only(gpu_profile):
    assert ledger.fingerprint(gpu_profile) == ledger.fingerprint(gpu_profile.replace(learning_rate=1e-4, seed=7))
    assert ledger.fingerprint(gpu_profile) != ledger.fingerprint(
        gpu_profile.replace(max_completion_length=gpu_profile.max_completion_length // 2))
    # the order of target_modules does not change the shape
    reordered = gpu_profile.replace(target_modules=list(reversed(gpu_profile.target_modules)))
    assert ledger.fingerprint(gpu_profile) == ledger.fingerprint(reordered)


def test_success_is_a_measurement_on_the_same_machine_only(tmp_path, gpu_profile):
    path = tmp_path / "ledger.jsonl"
    ledger.append(ledger.make_entry(gpu_profile, _card(), status="ok", peak_gib=17.25), path)
    entries = ledger.read(path)
    found = ledger.measured_for(entries, gpu_profile, _card(free=10.0))  # free memory is not identity
    assert found is not None and found.peak_gib == 17.25 and found.runs == 1 and found.need_gib == 17.25
    assert ledger.measured_for(entries, gpu_profile, _card(name="NVIDIA A10G")) is None
    assert ledger.measured_for(entries, gpu_profile, _card(total=40.0)) is None
    halved = gpu_profile.replace(per_device_train_batch_size=gpu_profile.per_device_train_batch_size // 2,
                                 gradient_accumulation_steps=gpu_profile.gradient_accumulation_steps * 2)
    assert ledger.measured_for(entries, halved, _card()) is None


def test_oom_gives_a_lower_bound(tmp_path, gpu_profile):
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
            "of 22.05 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 20.90 GiB "
            "memory in use.")
    report = read_oom(text)
    assert ledger.oom_lower_bound(report) == pytest.approx(22.90)
    path = tmp_path / "ledger.jsonl"
    ledger.append(ledger.make_entry(gpu_profile, _card(), status="oom", oom_report=report), path)
    found = ledger.measured_for(ledger.read(path), gpu_profile, _card())
    assert found.peak_gib is None and found.oom_lower_bound_gib == pytest.approx(22.90)
    assert found.need_gib == pytest.approx(22.90)
    assert "at least 22.90 GiB" in found.text()
    # a later success with a smaller peak does not hide the bound: the larger figure is the one to plan by
    ledger.append(ledger.make_entry(gpu_profile, _card(), status="ok", peak_gib=18.0), path)
    found = ledger.measured_for(ledger.read(path), gpu_profile, _card())
    assert found.runs == 2 and found.peak_gib == 18.0 and found.need_gib == pytest.approx(22.90)


def test_damaged_lines_are_skipped_with_one_warning(tmp_path, cpu_profile):
    path = tmp_path / "ledger.jsonl"
    ledger.append(ledger.make_entry(cpu_profile, _cpu(), status="ok", peak_gib=0.6), path)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"profile": "cut sho\n')       # a crash mid-write
        handle.write("[1, 2, 3]\n")                    # valid JSON, not an entry
        handle.write("\x00\x00garbage\n")
    ledger.append(ledger.make_entry(cpu_profile, _cpu(), status="ok", peak_gib=0.7), path)
    warnings = []
    entries = ledger.read(path, warn=warnings.append)
    assert [e.peak_gib for e in entries] == [0.6, 0.7]
    assert len(warnings) == 1 and "skipped 3 damaged line(s)" in warnings[0] and "line 2, 3, 4" in warnings[0]


def _append_many(args):
    path, worker, count = args
    from launcher.profile.load import load_profile as load

    profile = load("profiles/cpu-tiny-8gen.yaml")
    machine = _cpu()
    for i in range(count):
        entry = ledger.make_entry(profile, machine, status="ok", peak_gib=worker + i / 1000)
        entry.vllm = {"padding": "x" * 3000}  # lines longer than a pipe buffer must not interleave either
        ledger.append(entry, path)


def test_concurrent_appends_lose_nothing(tmp_path):
    path = tmp_path / "ledger.jsonl"
    workers, count = 4, 60
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        pool.map(_append_many, [(path, w, count) for w in range(workers)])
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == workers * count
    peaks = sorted(json.loads(line)["peak_gib"] for line in lines)
    assert peaks == sorted(w + i / 1000 for w in range(workers) for i in range(count))


def test_accuracy_rows_compare_estimate_and_peak(tmp_path, cpu_profile):
    from launcher.memory.estimate import estimate

    path = tmp_path / "ledger.jsonl"
    est = estimate(cpu_profile)
    for peak in (0.5, 0.55):
        ledger.append(ledger.make_entry(cpu_profile, _cpu(), status="ok", estimate=est, peak_gib=peak), path)
    (row,) = ledger.accuracy_rows(ledger.read(path))
    assert row["runs"] == 2 and row["peak_gib"] == 0.55
    assert row["estimate_gib"] == pytest.approx(est.total_gib, abs=1e-4)
    assert row["ratio"] == pytest.approx(0.55 / row["estimate_gib"], abs=1e-3)
    assert row["machine"] == "CPU (24 GiB RAM)"


def test_missing_ledger_is_empty(tmp_path, monkeypatch):
    monkeypatch.delenv("GRPO_TRAIN_LEDGER")
    monkeypatch.setenv("GRPO_TRAIN_CACHE", str(tmp_path / "nowhere"))
    assert ledger.read() == []
    assert ledger.ledger_path() == tmp_path / "nowhere" / "ledger.jsonl"


def test_ledger_report_tells_two_shapes_of_one_profile_apart():
    from launcher.memory.ledger import shape_text

    assert shape_text({"per_device_train_batch_size": 8, "num_generations": 8, "max_completion_length": 48,
                       "lora_rank": 16}) == "8 / 8 / 48 r16"
    assert shape_text({"per_device_train_batch_size": 4, "num_generations": 8, "max_completion_length": 48,
                       "lora_rank": 0}) == "4 / 8 / 48 full"
    assert shape_text({}) == "? / ? / ? full"
