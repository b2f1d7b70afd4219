"""The machines the ledger's tests record on (an L4 as NVML reports it, a CPU host) and a record dated some days
back."""

from __future__ import annotations

from datetime import datetime, timedelta

from launcher.card.detect import GpuInfo, Machine
from launcher.memory.ledger import record as ledger_record


def card(free=22.0, total=22.5, name="NVIDIA L4") -> Machine:
    gpu = GpuInfo(
        name=name,
        total_gib=total,
        free_gib=free,
        used_gib=total - free,
        compute_capability=(8, 9),
        driver="580.1",
        cuda_driver="13.0",
        index=0,
        source="nvml",
    )
    return Machine(gpus=[gpu], message="", host_ram_gib=64.0, host_free_gib=60.0)


def cpu(ram=24.0) -> Machine:
    return Machine(gpus=[], message="no GPU", host_ram_gib=ram, host_free_gib=ram - 2)


def dated_entry(profile, machine, days_ago: float = 0, **kwargs):
    entry = ledger_record.make_entry(profile, machine, **kwargs)
    entry.date = (datetime.now() - timedelta(days=days_ago)).isoformat(timespec="seconds")
    return entry
