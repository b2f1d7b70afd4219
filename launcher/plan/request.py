"""WHAT a plan is asked for (PlanRequest, built by the commands), and what every stage of the planning reads
beside the candidate it adds to (Planning: the machine, the margin, the nodes, the models)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from contract.errors import UsageError
from launcher.card.detect import Machine
from launcher.card.topology import NodeLayout, local_gpus_needed, node_layout, split_refusal
from launcher.plan.candidate import Candidate
from launcher.plan.margins import margin_for
from profiles.architecture import Architecture
from profiles.catalog import resolve


@dataclass(frozen=True)
class PlanRequest:
    """`profiles`: the ladder (or the one profile named); `model`: a model of the user's (--set model=X), whose
    configurations are derived from the rungs' intents, with `pinned` the other keys the user set; `named`: the
    user named the profile (--profile): the ledger only warns about it and a rung derived from it runs however
    little of the data it covers; `nodes` (--nodes N): N nodes like `machine`, None: the machines this one runs
    among; `hours` (--hours); `measurements`: the ledger's records (None: the estimate alone); `margin_gib`: the
    free memory kept (None: margins.margin_for); `derive` off: the profiles judged as they are (a changed profile
    re-judged after an attempt, a benchmark's fixed shape)."""

    profiles: Sequence
    machine: Machine
    model: str | None = None
    pinned: Collection[str] = frozenset()
    named: bool = False
    nodes: int | None = None
    hours: float | None = None
    measurements: list | None = None
    margin_gib: float | None = None
    derive: bool = True
    left_out: Sequence[str] = ()  # the rungs the ladder's loading left out (a --set they refuse), said in the notes

    def __post_init__(self):
        object.__setattr__(self, "profiles", tuple(self.profiles))
        object.__setattr__(self, "pinned", frozenset(self.pinned))
        object.__setattr__(self, "left_out", tuple(self.left_out))


@dataclass
class Planning:
    """The request with what holds for every candidate: the margin, each profile's node layout, the machine's
    notes (those the planning adds before judging any rung) and the candidates to judge, in ladder order."""

    request: PlanRequest
    margin_gib: float
    candidates: list[Candidate]
    layouts: dict[str, NodeLayout] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    archs: dict[str, Architecture] = field(default_factory=dict)  # each model resolved once per plan

    @property
    def machine(self) -> Machine:
        return self.request.machine

    @property
    def gpu(self):
        return self.request.machine.primary

    def arch(self, model: str) -> Architecture:
        if model not in self.archs:
            self.archs[model] = resolve(model)
        return self.archs[model]

    @classmethod
    def of(cls, request: PlanRequest, seeds: list[Candidate]) -> Planning:
        """The candidates for the machine's device in ladder order (the others left out, said in a note), their
        node layouts and the margin. UsageError when there is nothing to plan."""
        seeds = sorted(seeds, key=lambda c: (c.profile.ladder, c.profile.name))
        if not seeds:
            raise UsageError("no profiles to plan (fix: --profiles-dir DIR holding *.yaml profiles)")
        machine = request.machine
        notes = [*machine.notes, *request.left_out]
        matching = [c for c in seeds if c.profile.device == machine.device]
        if matching:
            if len(seeds) > len(matching):
                other = "cpu" if machine.device == "cuda" else "cuda"
                notes.append(f"{len(seeds) - len(matching)} profile(s) for device {other} left out")
            seeds = matching
        gpu = machine.primary
        if gpu is None:
            return cls(request, _margin(request, machine.host_ram_gib, "cpu"), seeds, notes=notes)
        layouts = {c.profile.name: node_layout(c.profile, request.nodes) for c in seeds}
        planning = cls(request, _margin(request, gpu.total_gib, "cuda"), seeds, layouts, notes)
        notes.extend(planning._gpu_notes())
        return planning

    def layout(self, profile) -> NodeLayout:
        return self.layouts.get(profile.name) or NodeLayout()

    def _gpu_notes(self) -> list[str]:
        """Multi-GPU profiles this machine lacks the GPUs for, and what the nodes planned do."""
        machine, gpu, nodes, notes = self.machine, self.gpu, self.request.nodes, []
        short = 0
        for c in self.candidates:
            layout = self.layout(c.profile)
            if c.profile.distributed and not split_refusal(c.profile, layout.training_nodes):
                short += local_gpus_needed(c.profile, layout.training_nodes, layout.server_node) > len(machine.gpus)
        if short:
            notes.append(
                f"{short} profile(s) need more GPUs than the {len(machine.gpus)} visible: listed, not "
                "chosen (plan for more with --gpus N)"
            )
        if nodes is not None and nodes > 1:
            notes.append(
                f"planned for {nodes} nodes of {len(machine.gpus)} x {gpu.name} each: the training nodes "
                "first, a vLLM server on the last node of its own (server-mode profiles); each rung says "
                "which node does what"
            )
        elif nodes is None and any(layout.server_node for layout in self.layouts.values()):
            notes.append(f"the vLLM server node's GPUs are taken to be like this machine's ({gpu.name})")
        return notes


def _margin(request: PlanRequest, total_gib: float, device: str) -> float:
    return request.margin_gib if request.margin_gib is not None else margin_for(total_gib, device)
