"""WHAT a plan holds: every candidate profile with what each stage of the planning added to it (its estimate,
verdict, predicted step and run), the one chosen, the notes, and the whole as `plan --json` writes it
(docs/interfaces.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from launcher.card.detect import Machine, precision_text
from launcher.card.topology import NodeLayout
from launcher.memory.estimate import Estimate
from launcher.memory.ledger.weigh import Measured
from launcher.plan.duration import RunLength
from launcher.plan.margins import GPU_MARGIN_TEXT, HOST_MARGIN_TEXT
from launcher.plan.settings import settings_of
from launcher.plan.speed import StepTime
from profiles.schema import Profile

# A profile not derived by the fit solver runs the prompts per step it was written with
AS_WRITTEN = "as written"


@dataclass
class Candidate:
    """One rung as it goes through the stages (launcher.plan.stages): each fills the fields it decides. A stage
    that refuses it sets `settled`, and the later stages leave it as it is."""

    profile: Profile
    estimate: Estimate | None = None
    fits: bool = True
    reason: str = ""
    measured: Measured | None = None  # what this machine measured of this shape
    ledger_note: str = ""  # one line when the measurement turned the estimate's verdict (verdict._ledger_note)
    speed: StepTime | None = None  # the predicted step (None on the CPU)
    limited_by: str = AS_WRITTEN  # what stopped its prompts per step (the fit solver's verdict), or AS_WRITTEN
    layout: NodeLayout | None = None  # several nodes: which node does what
    run: RunLength | None = None  # its steps, prompts, epochs and predicted hours
    written: dict | None = None  # a rung derived for the card: its settings as written ("auto" where derived)
    not_derived: str | None = None  # a rung whose `auto` keys nothing could be derived for: why
    vllm_off: str | None = None  # why vLLM cannot generate for it on this card (transformers does instead)
    # a derived rung: (the run the data-coverage rule judges, the known card it is timed as; None: this card's)
    coverage: tuple[RunLength | None, str | None] | None = None
    notes: list[str] = field(default_factory=list)  # what the plan says of it, where it is chosen
    settled: bool = False  # refused before its memory was judged: the later stages pass it by

    def speed_json(self) -> dict | None:
        """`speed` of `plan --json`: step_s, generation_s, training_s, prompts_per_hour, learning_per_hour (the
        objective) with the critical batch it counts by, limited_by (what stopped the prompts per step: memory,
        the objective, the cap, the pins, or the profile as written) and bound_by (the phase that takes most of
        a step and what bounds it)."""
        if self.speed is None:
            return None
        from launcher.plan.levers import objective
        from launcher.plan.value import critical_batch

        out = self.speed.to_json(self.limited_by)
        out["bound_by"] = self.speed.limited_by
        out["learning_per_hour"] = round(objective(self.profile, self.speed), 2)
        out["critical_batch"] = critical_batch(self.profile.device).prompts
        return out


@dataclass
class Plan:
    machine: Machine
    candidates: list[Candidate]
    chosen: Profile | None
    margin_gib: float
    notes: list[str] = field(default_factory=list)
    ladder: list[Profile] = field(default_factory=list)  # the profiles planned, as the ladder derived them

    def gpu_json(self) -> dict:
        gpu = self.machine.primary
        if gpu is None:
            return {
                "name": "CPU (no GPU)",
                "total_gib": round(self.machine.host_ram_gib, 2),
                "free_gib": round(self.machine.host_free_gib, 2),
                "source": "none",
                "device": "cpu",
                "message": self.machine.message,
            }
        return {
            "name": gpu.name,
            "total_gib": round(gpu.total_gib, 2),
            "free_gib": round(gpu.free_gib, 2),
            "source": gpu.source,
            "device": "cuda",
            "index": gpu.index,
            "compute_capability": ".".join(map(str, gpu.compute_capability)) if gpu.compute_capability else None,
            "precision": precision_text(gpu),
            "driver": gpu.driver,
            "cuda_driver": gpu.cuda_driver,
            "count": len(self.machine.gpus),
            "message": self.machine.message,
        }

    def to_json(self) -> dict:
        return {
            "gpu": self.gpu_json(),
            "margin_gib": round(self.margin_gib, 2),
            "margin": GPU_MARGIN_TEXT if self.machine.primary else HOST_MARGIN_TEXT,
            "candidates": [
                {
                    "profile": c.profile.name,
                    "path": c.profile.source,
                    "ladder": c.profile.ladder,
                    "model": c.profile.model,
                    "fits": c.fits,
                    "reason": c.reason,
                    "world_size": c.profile.num_gpus,
                    "zero_stage": c.profile.zero_stage,
                    "gpus": c.profile.gpus_needed,
                    "vllm_mode": c.profile.vllm_mode if c.profile.fast_inference else None,
                    "settings": settings_of(c.profile),
                    "estimate": c.estimate.to_json() if c.estimate else None,
                    "measured": c.measured.to_json() if c.measured else None,
                    "speed": c.speed_json(),
                    "run": c.run.to_json() if c.run is not None else None,
                    "written": c.written,
                    **({"nodes": nodes_json(c)} if c.layout is not None else {}),
                    **_turns_json(c.profile),
                }
                for c in self.candidates
            ],
            "chosen": self.chosen.name if self.chosen is not None else None,
            "notes": list(self.notes),
        }


def nodes_json(candidate: Candidate) -> list[dict]:
    """Each node's role and GPUs, with the GiB one of its GPUs is estimated to hold."""
    est, layout = candidate.estimate, candidate.layout
    assert layout is not None, "asked only of a candidate planned over nodes"
    rows = layout.roles(candidate.profile)
    for row in rows:
        if est is None:
            continue
        if row.get("training_gpus"):
            row["training_gib_per_gpu"] = round(est.total_gib, 2)
        if row.get("server_gpus") and est.server is not None:
            row["server_gib_per_gpu"] = round(est.server.total_gib, 2)
    return rows


def _turns_json(profile) -> dict:
    """`turns` of a candidate that offers tools: the calls and replies its memory and time are planned for."""
    from launcher.plan.turns import turn_plan_of

    turns = turn_plan_of(profile)
    return {"turns": turns.to_json()} if turns is not None else {}
