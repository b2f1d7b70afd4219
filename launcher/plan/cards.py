"""WHICH profile common cards get from the ladder (the `cards` command): what-if planning for each card of
a fixed list, free memory taken as total."""

from __future__ import annotations

from contract.attempt import bf16_capable
from contract.errors import UsageError
from launcher.card.detect import GpuInfo, Machine
from launcher.plan.choose import make_plan
from launcher.plan.request import PlanRequest

# Cards for `cards`: (name, total GiB as NVML reports it, compute capability, the card the step-time model
# times it as: one common card of the class, from the card table)
COMMON_CARDS = (
    ("8 GB card (RTX 3070, 4060)", 8.0, (8, 6), "NVIDIA GeForce RTX 3070"),
    ("12 GB card (RTX 3060, 4070)", 12.0, (8, 6), "NVIDIA GeForce RTX 3060"),
    ("T4 16 GB", 15.0, (7, 5), "Tesla T4"),
    ("16 GB card (RTX 4060 Ti 16GB, 4080)", 16.0, (8, 9), "NVIDIA GeForce RTX 4060 Ti"),
    ("L4 / A10 24 GB", 22.5, (8, 9), "NVIDIA L4"),
    ("RTX 3090 / 4090 24 GB", 24.0, (8, 9), "NVIDIA GeForce RTX 4090"),
    ("A100 40GB", 40.0, (8, 0), "NVIDIA A100-SXM4-40GB"),
    ("A100 80GB", 80.0, (8, 0), "NVIDIA A100-SXM4-80GB"),
    ("H100 80GB", 79.6, (9, 0), "NVIDIA H100 80GB HBM3"),
)


def fit_table(profiles, cards=COMMON_CARDS) -> list[dict]:
    """For each card: the profile the ladder gives it (what-if planning, free = total), its rungs' `auto` keys
    derived for the card. One card each: multi-GPU profiles are left out (plan those with --gpus N)."""
    cuda = [p for p in profiles if p.device == "cuda" and p.gpus_needed == 1]
    if not cuda:
        raise UsageError("cards: no cuda profiles in the ladder (fix: --profiles-dir with gpu-*.yaml)")
    rows = []
    for name, total, capability, *timed_as in cards:
        gpu = GpuInfo(
            name=timed_as[0] if timed_as else name,
            total_gib=total,
            free_gib=total,
            used_gib=0.0,
            compute_capability=capability,
            driver=None,
            cuda_driver=None,
            index=0,
            source="what-if",
        )
        machine = Machine([gpu], f"{name}: what-if", 0.0, 0.0)
        plan = make_plan(PlanRequest(cuda, machine))
        chosen = next((c for c in plan.candidates if c.fits), None)
        rows.append(
            {
                "card": name,
                "total_gib": total,
                "precision": "bf16" if bf16_capable(capability) else "fp16",
                "chosen": chosen.profile.name if chosen else None,
                "estimate_gib": round(chosen.estimate.total_gib, 2) if chosen and chosen.estimate else None,
                "fallbacks": [c.profile.name for c in plan.candidates if c.fits and c is not chosen],
            }
        )
    return rows
