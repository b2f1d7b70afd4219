"""The ledger: what a machine measured, kept across runs and read back by the planner."""

from __future__ import annotations

import json

import pytest

from contract.oom import read_oom
from launcher.memory.ledger import record as ledger_record
from launcher.memory.ledger import store as ledger_store
from launcher.memory.ledger import weigh as ledger_weigh
from profiles.load import load_profile
from support.ledger_machines import card as _card
from support.ledger_machines import cpu as _cpu

PROFILES = "profiles"


@pytest.fixture
def gpu_profile():
    return load_profile(f"{PROFILES}/gpu-24gb-llama3.1-8b.yaml")


@pytest.fixture
def cpu_profile():
    return load_profile(f"{PROFILES}/cpu-tiny-8gen.yaml")


def test_fingerprint_follows_memory_keys_only(gpu_profile):
    assert ledger_store.fingerprint(gpu_profile) == ledger_store.fingerprint(
        gpu_profile.replace(learning_rate=1e-4, seed=7)
    )
    assert ledger_store.fingerprint(gpu_profile) != ledger_store.fingerprint(
        gpu_profile.replace(max_completion_length=gpu_profile.max_completion_length // 2)
    )
    # the order of target_modules does not change the shape
    reordered = gpu_profile.replace(target_modules=list(reversed(gpu_profile.target_modules)))
    assert ledger_store.fingerprint(gpu_profile) == ledger_store.fingerprint(reordered)


def test_success_is_a_measurement_on_the_same_machine_only(tmp_path, gpu_profile):
    path = tmp_path / "ledger.jsonl"
    ledger_store.append(ledger_record.make_entry(gpu_profile, _card(), status="ok", peak_gib=17.25), path)
    entries = ledger_store.read(path)
    found = ledger_weigh.measured_for(entries, gpu_profile, _card(free=10.0))  # free memory is not identity
    assert found is not None and found.peak_gib == 17.25 and found.runs == 1 and found.need_gib == 17.25
    assert ledger_weigh.measured_for(entries, gpu_profile, _card(name="NVIDIA A10G")) is None
    assert ledger_weigh.measured_for(entries, gpu_profile, _card(total=40.0)) is None
    halved = gpu_profile.replace(
        per_device_train_batch_size=gpu_profile.per_device_train_batch_size // 2,
        gradient_accumulation_steps=gpu_profile.gradient_accumulation_steps * 2,
    )
    assert ledger_weigh.measured_for(entries, halved, _card()) is None


def test_oom_gives_a_lower_bound(tmp_path, gpu_profile):
    text = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
        "of 22.05 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 20.90 GiB "
        "memory in use."
    )
    report = read_oom(text)
    assert ledger_record.oom_lower_bound(report) == pytest.approx(22.90)
    path = tmp_path / "ledger.jsonl"
    ledger_store.append(ledger_record.make_entry(gpu_profile, _card(), status="oom", oom_report=report), path)
    found = ledger_weigh.measured_for(ledger_store.read(path), gpu_profile, _card())
    assert found.peak_gib is None and found.oom_lower_bound_gib == pytest.approx(22.90)
    assert found.need_gib == pytest.approx(22.90)
    assert "at least 22.90 GiB" in found.text()
    # 22.05 total - 1.10 free - 20.90 held by this process: nothing else held the card
    assert found.others_gib == pytest.approx(0.05, abs=1e-3)


def test_damaged_lines_are_skipped_with_one_warning(tmp_path, cpu_profile):
    path = tmp_path / "ledger.jsonl"
    ledger_store.append(ledger_record.make_entry(cpu_profile, _cpu(), status="ok", peak_gib=0.6), path)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"profile": "cut sho\n')  # a crash mid-write
        handle.write("[1, 2, 3]\n")  # valid JSON, not an entry
        handle.write("\x00\x00garbage\n")
    ledger_store.append(ledger_record.make_entry(cpu_profile, _cpu(), status="ok", peak_gib=0.7), path)
    warnings = []
    entries = ledger_store.read(path, warn=warnings.append)
    assert [e.peak_gib for e in entries] == [0.6, 0.7]
    assert len(warnings) == 1 and "skipped 3 damaged line(s)" in warnings[0]
    assert "line 2: not JSON" in warnings[0] and "line 3: not a JSON object" in warnings[0]


# one run writing the ledger: `count` lines of a profile, their peaks counting up from `first` by 0.001, each padded
# with `padding` characters (a line longer than a pipe buffer must not interleave either)
_WRITER = """
import sys
from pathlib import Path
from launcher.memory.ledger import record, store
from profiles.load import load_profile
from support.ledger_machines import cpu
path, profile, machine = Path(sys.argv[1]), load_profile(sys.argv[2]), cpu()
first, count, padding = float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
for i in range(count):
    entry = record.make_entry(profile, machine, status="ok", peak_gib=first + i / 1000)
    if padding:
        entry.vllm = {"padding": "x" * padding}
    store.append(entry, path)
"""


def test_concurrent_appends_lose_nothing(tmp_path):
    from support.at_once import run_at_once

    path = tmp_path / "ledger.jsonl"
    workers, count = 4, 60
    run_at_once(_WRITER, [[path, "profiles/cpu-tiny-8gen.yaml", w, count, 3000] for w in range(workers)])
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == workers * count
    peaks = sorted(json.loads(line)["peak_gib"] for line in lines)
    assert peaks == sorted(w + i / 1000 for w in range(workers) for i in range(count))


def test_accuracy_rows_compare_estimate_and_peak(tmp_path, cpu_profile):
    from launcher.memory.estimate import estimate

    path = tmp_path / "ledger.jsonl"
    est = estimate(cpu_profile)
    for peak in (0.5, 0.55):
        ledger_store.append(
            ledger_record.make_entry(cpu_profile, _cpu(), status="ok", estimate=est, peak_gib=peak), path
        )
    (row,) = ledger_weigh.accuracy_rows(ledger_store.read(path))
    assert row["runs"] == 2 and row["peak_gib"] == 0.55
    assert row["estimate_gib"] == pytest.approx(est.total_gib, abs=1e-4)
    assert row["ratio"] == pytest.approx(0.55 / row["estimate_gib"], abs=1e-3)
    assert row["machine"] == "CPU (24 GiB RAM)"


def test_missing_ledger_is_empty(tmp_path, monkeypatch):
    monkeypatch.delenv("GRPO_TRAIN_LEDGER")
    monkeypatch.setenv("GRPO_TRAIN_CACHE", str(tmp_path / "nowhere"))
    assert ledger_store.read() == []
    assert ledger_store.ledger_path() == tmp_path / "nowhere" / "ledger.jsonl"


def test_ledger_report_tells_two_shapes_of_one_profile_apart():
    from launcher.memory.ledger.weigh import shape_text

    assert (
        shape_text(
            {"per_device_train_batch_size": 8, "num_generations": 8, "max_completion_length": 48, "lora_rank": 16}
        )
        == "8 / 8 / 48 r16"
    )
    assert (
        shape_text(
            {"per_device_train_batch_size": 4, "num_generations": 8, "max_completion_length": 48, "lora_rank": 0}
        )
        == "4 / 8 / 48 full"
    )
    assert shape_text({}) == "? / ? / ? full"


def _line(profile, where, **fields) -> str:
    data = json.loads(ledger_record.make_entry(profile, where, status="ok", peak_gib=0.6).to_json())
    data.update(fields)
    return json.dumps(data) + "\n"


@pytest.mark.parametrize(
    "fields, why",
    [
        ({"peak_gib": "big"}, "peak_gib is 'big'"),
        ({"date": 5}, "date is 5"),
        ({"date": "yesterday"}, "date is 'yesterday'"),
        ({"peak_gib": -0.5}, "peak_gib is -0.5"),
        ({"peak_gib": float("nan")}, "peak_gib is nan"),
        ({"oom_lower_bound_gib": float("inf")}, "oom_lower_bound_gib is inf"),
        ({"peak_gib": True}, "peak_gib is True"),
        ({"machine": "cpu"}, "machine is 'cpu'"),
        ({"fingerprint": None}, "fingerprint is None"),
        ({"settings": [1]}, "settings is [1]"),
    ],
)
def test_a_wrongly_typed_line_is_skipped_with_one_warning(tmp_path, cpu_profile, fields, why):
    path = tmp_path / "ledger.jsonl"
    path.write_text(_line(cpu_profile, _cpu(), **fields) + _line(cpu_profile, _cpu(), peak_gib=0.7), encoding="utf-8")
    warnings = []
    entries = ledger_store.read(path, warn=warnings.append)
    assert [e.peak_gib for e in entries] == [0.7]
    assert len(warnings) == 1 and "skipped 1 damaged line(s)" in warnings[0] and why in warnings[0], warnings
    found = ledger_weigh.measured_for(entries, cpu_profile, _cpu())
    assert found.peak_gib == 0.7
    # the report reads the same file without a traceback, and shows the line it skipped
    report = ledger_weigh.ledger_report(_cpu(), path, warn=lambda _text: None)
    assert report["skipped_lines"][0]["line"] == 1 and len(report["records"]) == 1


def test_forget_removes_a_profile_a_fingerprint_or_all(tmp_path, cpu_profile, gpu_profile):
    from contract.errors import UsageError

    path = tmp_path / "ledger.jsonl"
    for peak in (0.5, 0.6):
        ledger_store.append(ledger_record.make_entry(cpu_profile, _cpu(), status="ok", peak_gib=peak), path)
    ledger_store.append(ledger_record.make_entry(gpu_profile, _card(), status="ok", peak_gib=17.0), path)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"cut short\n')
    assert ledger_store.forget("cpu-tiny-8gen", path) == 2
    assert [e.profile for e in ledger_store.read(path, warn=lambda _t: None)] == [gpu_profile.name]
    assert '{"cut short' in path.read_text()  # a damaged line is not a record of that profile: kept
    with pytest.raises(UsageError, match=f"no record of that profile.*it holds: {gpu_profile.name}"):
        ledger_store.forget("cpu-tiny-8gn", path)
    assert ledger_store.forget(ledger_store.fingerprint(gpu_profile)[:6], path) == 1
    ledger_store.append(ledger_record.make_entry(cpu_profile, _cpu(), status="ok", peak_gib=0.5), path)
    assert ledger_store.forget("all", path) == 2  # the record and the damaged line
    assert path.read_text() == ""


def test_appends_while_forget_rewrites_the_file_lose_nothing(tmp_path, cpu_profile):
    """--forget replaces the file; a run appending at that moment must land its line in the new one."""
    from support.at_once import finish, start_at_once

    path = tmp_path / "ledger.jsonl"
    workers, count = 3, 40
    ledger_store.append(ledger_record.make_entry(cpu_profile, _cpu(), status="ok", peak_gib=0.5), path)
    writers = start_at_once(_WRITER, [[path, "profiles/cpu-tiny-4gen.yaml", 1 + w, count, 0] for w in range(workers)])
    forgotten = 0
    while any(writer.poll() is None for writer in writers):
        ledger_store.append(ledger_record.make_entry(cpu_profile, _cpu(), status="ok", peak_gib=0.5), path)
        forgotten += ledger_store.forget("cpu-tiny-8gen", path)
    finish(writers)
    entries = ledger_store.read(path)
    assert forgotten >= 1 and not [e for e in entries if e.profile == "cpu-tiny-8gen"]
    assert sorted(e.peak_gib for e in entries) == sorted(1 + w + i / 1000 for w in range(workers) for i in range(count))


def test_a_ledger_that_cannot_be_written_is_named_with_the_fix(tmp_path):
    from contract.errors import UsageError

    folder = tmp_path / "ledger.jsonl"
    folder.mkdir()  # a folder where the file should be: as unwritable as a read-only file, even for root
    with pytest.raises(UsageError, match="cannot write the ledger .*ledger.jsonl.*GRPO_TRAIN_LEDGER=FILE"):
        ledger_store.check_writable(folder)
    assert ledger_store.check_writable(tmp_path / "new" / "ledger.jsonl").exists()


@pytest.mark.skipif(
    hasattr(__import__("os"), "geteuid") and __import__("os").geteuid() == 0, reason="root writes read-only files"
)
def test_a_read_only_ledger_is_read_but_not_written(tmp_path, cpu_profile):
    from contract.errors import UsageError

    path = tmp_path / "ledger.jsonl"
    ledger_store.append(ledger_record.make_entry(cpu_profile, _cpu(), status="ok", peak_gib=0.5), path)
    path.chmod(0o444)
    assert [e.peak_gib for e in ledger_store.read(path)] == [0.5]
    with pytest.raises(UsageError, match="cannot write the ledger"):
        ledger_store.check_writable(path)


# ---------------------------------------------------------------------------------------------------
# What an attempt writes


def _attempt(tmp_path, probe_peak=None):
    from types import SimpleNamespace

    folder = tmp_path / "attempt-01"
    folder.mkdir()
    probe = {"peak_gib": probe_peak, "seconds": 0.1} if probe_peak else None
    (folder / "outcome.json").write_text(json.dumps({"status": "oom", "probe": probe}), encoding="utf-8")
    plan = SimpleNamespace(machine=_card(), candidates=[])
    return folder, plan


_OOM_TEXT = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
    "of 22.05 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 12.90 GiB "
    "memory in use."
)


def _oom_record(text=_OOM_TEXT):
    from types import SimpleNamespace

    return SimpleNamespace(status="oom", report=read_oom(text), peak_gib=None)


def test_a_test_run_writes_no_ledger_unless_one_is_named(tmp_path, monkeypatch, gpu_profile):
    folder, plan = _attempt(tmp_path, probe_peak=11.0)
    monkeypatch.delenv("GRPO_TRAIN_LEDGER")
    monkeypatch.setenv("GRPO_TRAIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(ledger_record, "_told_test_run", False)
    environ = {"GRPO_INJECT_OOM": "someone-else"}
    warnings = []
    assert (
        ledger_record.record_attempt(gpu_profile, plan, _oom_record(), folder, warn=warnings.append, environ=environ)
        is None
    )
    assert not (tmp_path / "cache" / "ledger.jsonl").exists()
    assert len(warnings) == 1 and "GRPO_INJECT_OOM is set: this run adds nothing to the ledger" in warnings[0]


def test_an_injected_oom_is_never_a_measurement(tmp_path, gpu_profile):
    folder, plan = _attempt(tmp_path, probe_peak=11.0)
    environ = {"GRPO_INJECT_OOM": f"{gpu_profile.name}@3", "GRPO_TRAIN_LEDGER": str(tmp_path / "asked.jsonl")}
    entry = ledger_record.record_attempt(gpu_profile, plan, _oom_record(), folder, environ=environ)
    # the probe that got through before the injected step is a measurement (torch's peak, planned with the CUDA
    # context added, as the estimate counts it); the OOM is not
    from launcher.memory.parts import CUDA_CONTEXT_GIB

    assert entry.status == "probe-ok" and entry.oom_lower_bound_gib is None
    assert entry.peak_gib == pytest.approx(11.0 + CUDA_CONTEXT_GIB)
    (written,) = ledger_store.read()
    assert written.oom_lower_bound_gib is None and written.succeeded


def test_a_genuine_oom_records_its_bound_and_what_others_held(tmp_path, gpu_profile):
    folder, plan = _attempt(tmp_path)
    entry = ledger_record.record_attempt(gpu_profile, plan, _oom_record(), folder, environ={})
    assert entry.status == "oom" and entry.oom_lower_bound_gib == pytest.approx(14.90)
    assert entry.oom_kind == "cuda" and entry.others_gib == pytest.approx(22.05 - 1.10 - 12.90, abs=1e-3)
    assert ledger_store.read()[0].others_gib == pytest.approx(8.05, abs=1e-3)


def test_forget_rewrites_the_file_a_link_points_to(tmp_path, cpu_profile):
    real = tmp_path / "real.jsonl"
    ledger_store.append(ledger_record.make_entry(cpu_profile, _cpu(), status="ok", peak_gib=0.5), real)
    link = tmp_path / "ledger.jsonl"
    link.symlink_to(real)
    assert ledger_store.forget("all", link) == 1
    assert link.is_symlink() and real.read_text() == ""
