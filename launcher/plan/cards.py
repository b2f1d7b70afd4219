"""WHICH profile common cards get from the ladder (the `cards` command): what-if planning for each card of
a fixed list, free memory taken as total."""

from __future__ import annotations

from contract.attempt import bf16_capable
from contract.errors import UsageError
from launcher.card.detect import GpuInfo, Machine
from launcher.plan.choose import make_plan

# Cards for --fit-table: (name, total GiB as NVML reports it, compute capability)
COMMON_CARDS = (
    ("8 GB card (RTX 3070, 4060)", 8.0, (8, 6)),
    ("12 GB card (RTX 3060, 4070)", 12.0, (8, 6)),
    ("T4 16 GB", 15.0, (7, 5)),
    ("16 GB card (RTX 4060 Ti 16GB, 4080)", 16.0, (8, 9)),
    ("L4 / A10 24 GB", 22.5, (8, 9)),
    ("RTX 3090 / 4090 24 GB", 24.0, (8, 9)),
    ("A100 40GB", 40.0, (8, 0)),
    ("A100 80GB", 80.0, (8, 0)),
    ("H100 80GB", 79.6, (9, 0)),
)


def fit_table(profiles, cards=COMMON_CARDS) -> list[dict]:
    """For each card: the profile the ladder gives it (what-if planning, free = total). One card each:
    multi-GPU profiles are left out (plan those with --gpus N)."""
    cuda = [p for p in profiles if p.device == "cuda" and p.gpus_needed == 1]
    if not cuda:
        raise UsageError("--fit-table: no cuda profiles in the ladder (fix: --profiles-dir with gpu-*.yaml)")
    rows = []
    for name, total, capability in cards:
        gpu = GpuInfo(
            name=name,
            total_gib=total,
            free_gib=total,
            used_gib=0.0,
            compute_capability=capability,
            driver=None,
            cuda_driver=None,
            index=0,
            source="what-if",
        )
        plan = make_plan(cuda, Machine([gpu], f"{name}: what-if", 0.0, 0.0))
        chosen = next((c for c in plan.candidates if c.fits), None)
        rows.append(
            {
                "card": name,
                "total_gib": total,
                "precision": "bf16" if bf16_capable(capability) else "fp16",
                "chosen": chosen.profile.name if chosen else None,
                "estimate_gib": round(chosen.estimate.total_gib, 2) if chosen else None,
                "fallbacks": [c.profile.name for c in plan.candidates if c.fits and c is not chosen],
            }
        )
    return rows
