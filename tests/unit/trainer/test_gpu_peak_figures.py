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

from contract.attempt import MEASURE_GPU_CARD, MEASURE_GPU_CARD_NO_CONTEXT, MEASURE_GPU_PROCESS, MEASURE_TORCH
from launcher.card.detect import GpuInfo, Machine
from launcher.memory.ledger import record as ledger_record
from launcher.memory.ledger import store as ledger_store
from launcher.memory.ledger import weigh as ledger_weigh
from launcher.memory.parts import CUDA_CONTEXT_GIB
from profiles.load import load_profile

GIB = 1 << 30


@pytest.fixture(autouse=True)
def no_baseline_from_another_test():
    from trainer.memory_meter import CardBaseline

    CardBaseline.taken = None
    yield
    CardBaseline.taken = None


def fake_nvml(monkeypatch, *, device_used: float, processes: dict[int, float]):
    """pynvml answering for one card: `device_used` GiB in use, `processes` {pid: GiB}. Mutable through the
    returned namespace."""
    state = SimpleNamespace(device_used=device_used, processes=processes)
    module = types.ModuleType("pynvml")
    module.nvmlInit = lambda: None
    module.nvmlDeviceGetHandleByIndex = lambda index: "card"
    module.nvmlDeviceGetMemoryInfo = lambda handle: SimpleNamespace(
        used=int(state.device_used * GIB), total=24 * GIB, free=0
    )
    module.nvmlDeviceGetComputeRunningProcesses = lambda handle: [
        SimpleNamespace(pid=pid, usedGpuMemory=int(gib * GIB)) for pid, gib in state.processes.items()
    ]
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
    assert probe.measure == MEASURE_GPU_CARD  # no CUDA context existed when the baseline was read


def test_in_a_container_the_baseline_is_taken_before_the_cuda_context(monkeypatch):
    """The attempt reads the card before Unsloth's import makes the context (about 0.5-0.8 GiB): the figure
    holds the context, as the process's own NVML figure does outside a container, and the ledger plans with it
    as it is."""
    import torch

    from trainer import memory_meter

    context = 0.8
    nvml = fake_nvml(monkeypatch, device_used=2.0, processes={999999: 5.0})  # another container's process
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    memory_meter.take_card_baseline()
    # `import unsloth` makes the context; the meter is built after it
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    nvml.device_used = 2.0 + context
    meter = memory_meter.MemoryMeter("cuda")
    fake_torch_memory(monkeypatch, peak_reserved=4.0, reserved_now=4.0, peak_allocated=3.5)
    nvml.device_used = 2.0 + context + 4.2
    meter.sample()
    assert meter.peak_gib == pytest.approx(context + 4.2)
    assert meter.measure == MEASURE_GPU_CARD
    from launcher.memory.ledger.record import planning_peak

    assert planning_peak("cuda", meter.peak_gib, meter.measure) == (pytest.approx(context + 4.2), MEASURE_GPU_CARD)


def test_a_baseline_read_after_the_context_is_labelled_and_the_ledger_adds_the_context(monkeypatch):
    import torch

    from trainer.memory_meter import MemoryMeter

    nvml = fake_nvml(monkeypatch, device_used=2.8, processes={})  # our context is already in the 2.8
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    meter = MemoryMeter("cuda")
    fake_torch_memory(monkeypatch, peak_reserved=4.0, reserved_now=4.0, peak_allocated=3.5)
    nvml.device_used = 2.8 + 4.2
    meter.sample()
    assert meter.peak_gib == pytest.approx(4.2) and meter.measure == MEASURE_GPU_CARD_NO_CONTEXT
    from launcher.memory.ledger.record import planning_peak

    planned, what = planning_peak("cuda", meter.peak_gib, meter.measure)
    assert planned == pytest.approx(4.2 + CUDA_CONTEXT_GIB) and MEASURE_GPU_CARD_NO_CONTEXT in what


def test_the_probe_labels_its_peak_as_the_meter_counted_it(monkeypatch):
    import torch

    from trainer.memory_meter import MemoryMeter
    from trainer.probe import PeakMeter

    nvml = fake_nvml(monkeypatch, device_used=1.0, processes={})
    meter = MemoryMeter("cuda")
    fake_torch_memory(monkeypatch, peak_reserved=3.0, reserved_now=3.0, peak_allocated=2.5)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: int(1.0 * GIB))
    peak = PeakMeter("cuda", meter)
    peak.start()
    nvml.device_used = 1.0 + 3.6
    figures = peak.stop()
    assert figures["measure"] == MEASURE_GPU_CARD and figures["peak_gib"] == pytest.approx(3.6)


def test_the_attempt_reads_the_card_before_unsloth_makes_the_context(monkeypatch):
    """open_backend takes the baseline before it imports Unsloth, whose import creates the CUDA context."""
    from trainer import backends, memory_meter

    fake_nvml(monkeypatch, device_used=1.5, processes={})
    seen = []

    def import_unsloth():
        seen.append(memory_meter.CardBaseline.taken)
        raise RuntimeError("stop here")

    monkeypatch.setattr(backends, "import_unsloth", import_unsloth)
    monkeypatch.setattr(backends, "apply_attempt_environment", lambda profile: None)
    profile = load_profile("profiles/gpu-24gb-llama3.1-8b.yaml")
    with pytest.raises(RuntimeError, match="stop here"):
        backends.open_backend(profile)
    assert seen and seen[0] is not None and seen[0].used_gib == pytest.approx(1.5) and seen[0].before_context


def test_without_nvml_torchs_figure_is_kept_and_named(monkeypatch):
    from trainer.memory_meter import MemoryMeter

    monkeypatch.setitem(sys.modules, "pynvml", types.ModuleType("pynvml"))  # no NVML calls at all
    fake_torch_memory(monkeypatch, peak_reserved=6.0, reserved_now=5.0, peak_allocated=5.5)
    probe = MemoryMeter("cuda")
    probe.sample()
    assert (probe.peak_gib, probe.measure) == (6.0, MEASURE_TORCH)


def _card():
    gpu = GpuInfo(
        name="NVIDIA L4",
        total_gib=22.0,
        free_gib=21.5,
        used_gib=0.5,
        compute_capability=(8, 9),
        driver="580.1",
        cuda_driver="13.0",
        index=0,
        source="nvml",
    )
    return Machine(gpus=[gpu], message="", host_ram_gib=64.0, host_free_gib=60.0)


@pytest.mark.parametrize(
    "measure, planned",
    [(MEASURE_TORCH, 15.0 + CUDA_CONTEXT_GIB), (None, 15.0 + CUDA_CONTEXT_GIB), (MEASURE_GPU_PROCESS, 15.0)],
)
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
