"""What a measured GPU peak counts, and which figure the planner holds against the estimate.

torch's allocator peak lacks the CUDA context and memory outside torch (which the estimate counts), and under
vLLM standby it includes the sleeping KV cache (vLLM allocates it through a torch memory pool; sleeping frees
the physical memory without telling torch). The process's own use as the driver counts it (NVML) has neither
fault. The GPU boundary is stood in for: torch.cuda's memory counters and NVML's answers.
"""

from __future__ import annotations

import json
import os
import sys
import types
from types import SimpleNamespace

import pytest

from contract.attempt import MEASURE_GPU_PROCESS, MEASURE_TORCH
from launcher.card.detect import GpuInfo, Machine
from launcher.memory.ledger import record as ledger_record, store as ledger_store, weigh as ledger_weigh
from launcher.memory.parts import CUDA_CONTEXT_GIB
from profiles.load import load_profile

GIB = 1 << 30


def fake_nvml(monkeypatch, *, device_used: float, processes: dict[int, float]):
    """pynvml answering for one card: `device_used` GiB in use, `processes` {pid: GiB}. Mutable through the
    returned namespace."""
    state = SimpleNamespace(device_used=device_used, processes=processes)
    module = types.ModuleType("pynvml")
    module.nvmlInit = lambda: None
    module.nvmlDeviceGetHandleByIndex = lambda index: "card"
    module.nvmlDeviceGetMemoryInfo = lambda handle: SimpleNamespace(used=int(state.device_used * GIB),
                                                                   total=24 * GIB, free=0)
    module.nvmlDeviceGetComputeRunningProcesses = lambda handle: [
        SimpleNamespace(pid=pid, usedGpuMemory=int(gib * GIB)) for pid, gib in state.processes.items()]
    monkeypatch.setitem(sys.modules, "pynvml", module)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return state


def fake_torch_memory(monkeypatch, *, peak_reserved: float, reserved_now: float, peak_allocated: float):
    import torch

    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: int(peak_allocated * GIB))
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a: int(peak_reserved * GIB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: int(reserved_now * GIB))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: None)


def test_a_standby_peak_leaves_the_sleeping_kv_cache_out(monkeypatch):
    from trainer.memory_meter import MemoryMeter

    nvml = fake_nvml(monkeypatch, device_used=0.3, processes={})
    probe = MemoryMeter("cuda")
    # after a training step with vLLM asleep: torch's counters hold vLLM's 8 GiB KV pool, unmapped by the
    # driver; the process holds 0.6 GiB of context and libraries outside torch
    fake_torch_memory(monkeypatch, peak_reserved=18.0, reserved_now=17.0, peak_allocated=16.5)
    nvml.processes = {os.getpid(): 0.6 + 17.0 - 8.0}
    nvml.device_used = 0.3 + 9.6
    probe.sample()
    assert probe.peak_gib == pytest.approx(18.0 - 8.0 + 0.6)
    assert probe.measure == MEASURE_GPU_PROCESS
    summary = probe.summary()
    assert summary["peak_reserved_gib"] == pytest.approx(18.0)  # torch's own figure is kept beside it
    assert summary["peak_nvml_process_gib"] == pytest.approx(10.6)


def test_without_standby_the_peak_adds_what_torch_does_not_count(monkeypatch):
    from trainer.memory_meter import MemoryMeter

    fake_nvml(monkeypatch, device_used=1.0, processes={os.getpid(): 12.0 + 0.9})
    fake_torch_memory(monkeypatch, peak_reserved=14.0, reserved_now=12.0, peak_allocated=13.0)
    probe = MemoryMeter("cuda")
    probe.sample()
    assert probe.peak_gib == pytest.approx(14.0 + 0.9)  # the context and non-torch memory, as the estimate


def test_in_a_container_the_cards_use_above_the_start_stands_in(monkeypatch):
    from trainer.memory_meter import MemoryMeter

    # NVML lists the host's pid, not ours: the card's use above what it held at the start is this process
    nvml = fake_nvml(monkeypatch, device_used=2.0, processes={999999: 5.0})
    probe = MemoryMeter("cuda")
    fake_torch_memory(monkeypatch, peak_reserved=4.0, reserved_now=4.0, peak_allocated=3.5)
    nvml.device_used = 2.0 + 4.7
    probe.sample()
    assert probe.peak_gib == pytest.approx(4.7)


def test_without_nvml_torchs_figure_is_kept_and_named(monkeypatch):
    from trainer.memory_meter import MemoryMeter

    monkeypatch.setitem(sys.modules, "pynvml", types.ModuleType("pynvml"))  # no NVML calls at all
    fake_torch_memory(monkeypatch, peak_reserved=6.0, reserved_now=5.0, peak_allocated=5.5)
    probe = MemoryMeter("cuda")
    probe.sample()
    assert (probe.peak_gib, probe.measure) == (6.0, MEASURE_TORCH)


def _card():
    gpu = GpuInfo(name="NVIDIA L4", total_gib=22.0, free_gib=21.5, used_gib=0.5, compute_capability=(8, 9),
                  driver="580.1", cuda_driver="13.0", index=0, source="nvml")
    return Machine(gpus=[gpu], message="", host_ram_gib=64.0, host_free_gib=60.0)


@pytest.mark.parametrize("measure, planned", [(MEASURE_TORCH, 15.0 + CUDA_CONTEXT_GIB), (None, 15.0 + CUDA_CONTEXT_GIB),
                                              (MEASURE_GPU_PROCESS, 15.0)])
def test_the_ledger_plans_with_the_figure_the_estimate_counts(tmp_path, monkeypatch, measure, planned):
    monkeypatch.setenv("GRPO_TRAIN_LEDGER", str(tmp_path / "ledger.jsonl"))
    profile = load_profile("profiles/gpu-24gb-llama3.1-8b.yaml")
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    (attempt / "outcome.json").write_text(json.dumps({"status": "ok", "peak_gib": 15.0, "peak_measure": measure}))
    record = SimpleNamespace(status="ok", report=None, peak_gib=15.0)
    plan = SimpleNamespace(machine=_card(), candidates=[])
    entry = ledger_record.record_attempt(profile, plan, record, attempt)
    assert entry.peak_gib == pytest.approx(planned)
    assert (MEASURE_GPU_PROCESS if measure == MEASURE_GPU_PROCESS else MEASURE_TORCH) in entry.measure
    rows = ledger_weigh.accuracy_rows(ledger_store.read(tmp_path / "ledger.jsonl"))
    assert rows[0]["measure"] == entry.measure  # `--ledger` says which figure it holds
