"""The memory verdict, the stage that adds WHETHER a candidate fits this machine, and why in words: its estimate
(or this machine's measurement of the shape) against the card's free memory less the margin, every GPU of a
multi-GPU profile and its vLLM server against theirs, a cpu profile against the host's RAM; the split over
machines the launcher would refuse, vLLM that cannot start. A verdict's reason is what `plan --json` carries."""

from __future__ import annotations

from dataclasses import dataclass

from contract.shell import command_line
from launcher.card.detect import GpuInfo, Machine
from launcher.card.topology import NodeLayout, local_gpus_needed, split_over_machines, split_refusal
from launcher.memory.estimate import Estimate, estimate
from launcher.memory.ledger.weigh import Measured, measured_for
from launcher.plan.candidate import Candidate
from launcher.plan.margins import ESTIMATE_HEADROOM_TEXT, estimate_limit, margin_for
from launcher.plan.request import Planning


def add(candidate: Candidate, planning: Planning) -> Candidate:
    """The candidate with its estimate (and this machine's measurement), whether it fits, and why; on several
    GPUs or nodes, per GPU and with which node does what."""
    profile = candidate.profile
    arch, layout = planning.arch(profile.model), planning.layout(profile)
    if profile.device == "cuda" and (profile.distributed or layout.training_nodes > 1):
        # on several training machines a one-GPU profile is refused by the split (each machine must train)
        _judge_gpus(candidate, arch, planning.machine, layout, planning.margin_gib)
    else:
        _judge_one_device(candidate, arch, planning)
    if candidate.vllm_off:
        candidate.reason = vllm_off_text(candidate.vllm_off) + candidate.reason
    return candidate


def _need(est: Estimate, measured: Measured | None) -> tuple[float, str]:
    """The figure a candidate is judged by, and how to name it: this machine's measurement of the shape when
    the ledger has one (an OOM's lower bound counts), else the estimate."""
    if measured is None or measured.need_gib is None:
        return est.total_gib, ""
    return measured.need_gib, f" ({measured.text()}; est. {est.total_gib:.2f})"


@dataclass(frozen=True)
class _Room:
    """Where a shape must fit: a card (None: the host's RAM of `machine`) less `margin` GiB."""

    gpu: GpuInfo | None
    machine: Machine | None
    margin: float


def _judge(
    est: Estimate, room: _Room, measured: Measured | None = None, headroom_refuses: bool = True
) -> tuple[bool, str]:
    """(fits, why). On a GPU a shape judged by the estimate alone keeps the estimate's headroom
    (margins.estimate_limit); `headroom_refuses` off (a profile the user named) only warns inside it."""
    gpu, machine, margin = room.gpu, room.machine, room.margin
    if est.scorer_problem:
        return False, est.scorer_problem
    need, source = _need(est, measured)
    if est.memory == "host":
        assert machine is not None  # only the per-GPU judgement of a distributed profile leaves it out
        usable = machine.host_free_gib - margin
        processes = max(1, est.world_size)
        need = need * processes
        each = f" ({processes} processes x {need / processes:.2f})" if processes > 1 else ""
        if need <= usable:
            return True, f"fits: {need:.2f}{each} of {usable:.2f} GiB usable RAM{source}"
        return False, (
            f"too large: needs {need:.2f} GiB of RAM{each}, {usable:.2f} usable "
            f"({machine.host_free_gib:.2f} available - {margin:.2f} margin){source}"
        )
    assert gpu is not None
    if est.vllm_problem:
        return False, est.vllm_problem
    if est.vllm_share_gib is not None and est.vllm_share_gib > gpu.free_gib:
        return False, (
            f"vLLM asks {est.vllm_share_gib:.2f} GiB (gpu_memory_utilization x total) but only "
            f"{gpu.free_gib:.2f} GiB is free: lower gpu_memory_utilization or free the card"
        )
    usable = gpu.free_gib - margin
    if need > usable:
        return False, (
            f"too large: needs {need:.2f} GiB, {usable:.2f} usable "
            f"({gpu.free_gib:.2f} free - {margin:.2f} margin){source}"
        )
    limit = usable if measured is not None and measured.need_gib is not None else estimate_limit(usable)
    if need <= limit:
        return True, f"fits: {need:.2f} of {usable:.2f} GiB usable{source}"
    close = (
        f"needs {need:.2f} of {usable:.2f} GiB usable, past the {limit:.2f} an estimate alone may use "
        f"({ESTIMATE_HEADROOM_TEXT.split(':')[0]})"
    )
    if not headroom_refuses:
        return True, f"fits, but close: {close}; it may run out of memory"
    return False, f"too close: {close}"


def split_gpus(
    profile, machine: Machine, machines: int = 1, server_node: bool = False
) -> tuple[list[GpuInfo], list[GpuInfo]]:
    """(training GPUs, vLLM server GPUs) of this machine: training first, the server's after them; with a
    server node of its own, the server's are that node's first GPUs (a node like this one).
    UsageError for a split over machines the launcher would refuse."""
    train = split_over_machines(profile.num_gpus, machines, profile.name)
    server = profile.vllm_server_gpus if profile.uses_vllm_server else 0
    if server_node:
        return machine.gpus[:train], machine.gpus[:server]
    return machine.gpus[:train], machine.gpus[train : train + server]


def _judge_distributed(profile, est: Estimate, train_gpus, server_gpus, margin: float) -> tuple[bool, str]:
    """Per GPU: every training GPU must hold the training estimate, every server GPU the server's."""
    if est.server is not None and est.server.vllm_problem:
        return False, est.server.vllm_problem  # the server would refuse to start: say that first
    tightest = min(train_gpus, key=lambda g: g.free_gib)
    fits, reason = _judge(est, _Room(tightest, None, margin))
    if profile.num_gpus == 1:
        where = "training GPU"
    else:
        where = f"per training GPU ({profile.num_gpus} x " + (
            f"ZeRO-{profile.zero_stage})" if profile.zero_stage else "DDP)"
        )
    if not fits:
        return False, f"{where}: {reason}"
    text = f"{where}: {reason}"
    if est.server is not None:
        server = est.server
        tight = min(server_gpus, key=lambda g: g.free_gib)
        usable = tight.free_gib - margin_for(tight.total_gib)
        if server.total_gib > usable:
            return False, (
                f"{text}; vLLM server GPU too small: needs {server.total_gib:.2f} GiB, "
                f"{usable:.2f} usable on {tight.name}"
            )
        text += f"; vLLM server: {server.total_gib:.2f} of {usable:.2f} GiB per GPU on {len(server_gpus)} GPU(s)"
    return True, text


def _deepspeed_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("deepspeed") is not None


def _judge_gpus(candidate: Candidate, arch, machine: Machine, layout: NodeLayout, margin: float) -> None:
    """The verdict on a profile of several GPUs (or a vLLM server): its split over the training machines (the
    launcher's own rule), the GPUs each machine must show (the server node's included), and each GPU's
    estimate."""
    profile = candidate.profile
    candidate.layout = layout
    machines, own_server = layout.training_nodes, layout.server_node
    refusal = split_refusal(profile, machines)
    if refusal:
        candidate.fits, candidate.reason = False, refusal
        return
    need = local_gpus_needed(profile, machines, own_server)
    if need > len(machine.gpus):
        # estimated as if every missing GPU were like the first one, so the table still says per GPU
        each = "each training node" if machines > 1 else "this machine"
        candidate.estimate, candidate.fits = estimate(profile, arch, machine.primary), False
        candidate.reason = (
            f"needs {need} GPUs on {each}, {len(machine.gpus)} visible "
            f"(plan for them with --gpus {need} --gpu-memory GIB)"
        )
        return
    if own_server and profile.vllm_server_gpus > len(machine.gpus):
        candidate.estimate, candidate.fits = estimate(profile, arch, machine.primary), False
        candidate.reason = (
            f"its vLLM server needs {profile.vllm_server_gpus} GPUs on the server node, which has "
            f"{len(machine.gpus)} like the others"
        )
        return
    train_gpus, server_gpus = split_gpus(profile, machine, machines, own_server)
    est = estimate(profile, arch, min(train_gpus, key=lambda g: g.free_gib))
    if est.server is not None:
        est.server = estimate(profile, arch, min(server_gpus, key=lambda g: g.free_gib)).server
    fits, reason = _judge_distributed(profile, est, train_gpus, server_gpus, margin)
    if fits and profile.zero_stage and machine.gpus[0].source == "nvml" and not _deepspeed_installed():
        # a real run here would fail at launch; a what-if plan is about the card, not this install
        fits = False
        reason = (
            f"needs the deepspeed package for ZeRO stage {profile.zero_stage} "
            "(fix: pip install deepspeed -c constraints.txt); " + reason
        )
    if layout.training_nodes > 1 or layout.server_node:
        reason += f"; {layout.text(profile)}"
    candidate.estimate, candidate.fits, candidate.reason = est, fits, reason


def _judge_one_device(candidate: Candidate, arch, planning: Planning) -> None:
    """The verdict on a profile of one device: its estimate (or this machine's measurement) against the card,
    or against the host's RAM for a cpu profile. Where the measurement turns the estimate's verdict, the
    candidate says so in `ledger_note`; for a profile the user named the ledger only warns: the estimate's
    verdict stands."""
    profile, machine, margin = candidate.profile, planning.machine, planning.margin_gib
    ledger_refuses = not planning.request.named
    gpu = machine.primary
    est = estimate(profile, arch, gpu if profile.device == "cuda" else None)
    measurements = planning.request.measurements
    measured = measured_for(measurements, profile, machine) if measurements else None
    if profile.device == "cpu" and machine.device == "cuda":
        gpu, margin = None, margin_for(machine.host_ram_gib, "cpu")
    room = _Room(gpu, machine, margin)
    fits, reason = _judge(est, room, measured, headroom_refuses=ledger_refuses)
    candidate.estimate, candidate.fits, candidate.reason, candidate.measured = est, fits, reason, measured
    if not fits and planning.request.named and profile.device == "cuda":
        candidate.reason += _lighter(profile, arch, room)
    if measured is not None:
        by_estimate, estimate_reason = _judge(est, room, headroom_refuses=ledger_refuses)
        if by_estimate != fits:
            candidate.ledger_note = _ledger_note(profile.name, measured, fits, ledger_refuses)
            if by_estimate and not ledger_refuses:
                candidate.fits, candidate.reason = True, f"{estimate_reason}; the ledger warns: {measured.text()}"


# What the user may write instead of a profile that trains more than the card holds, lightest last: LoRA on
# 16-bit weights, then on 4-bit ones (a recipe without use_peft trains every weight, TRL's meaning)
_LIGHTER = (
    ("LoRA rank 16 on 16-bit weights", {"lora_rank": 16, "load_in_4bit": False}),
    ("LoRA rank 16 on 4-bit weights", {"lora_rank": 16, "load_in_4bit": True}),
)


def _lighter(profile, arch, room: _Room) -> str:
    """For a named profile that does not fit: the first lighter way to train its model that does, with the
    --set that asks for it ("" when none does, or the profile is already the lightest)."""
    setups = _LIGHTER[1:] if profile.uses_lora else _LIGHTER
    if profile.uses_lora and profile.load_in_4bit:
        return ""
    for words, values in setups:
        changes = {key: value for key, value in values.items() if getattr(profile, key) != value}
        if profile.uses_lora:
            changes.pop("lora_rank", None)
        lighter = profile.model_copy(update=changes)
        est = estimate(lighter, arch, room.gpu)
        fits, _ = _judge(est, room)
        if fits:
            what = "full fine-tuning (every weight, as TRL without use_peft)" if not profile.uses_lora else "16-bit"
            sets = " ".join(f"--set {key}={str(value).lower()}" for key, value in changes.items())
            return f"; {what} does not fit, {words} does ({est.total_gib:.2f} GiB): {sets} (or write it in the file)"
    return ""


def _ledger_note(name: str, measured, fits: bool, ledger_refuses: bool) -> str:
    """One line: the verdict the ledger changed (or, for an explicit --profile, would have), and the way out."""
    if fits:
        return (
            f"the ledger let {name} run ({measured.text()}) where the estimate would refuse it; "
            "`--ignore-ledger` plans from the estimate alone"
        )
    if not ledger_refuses:
        return (
            f"warning: {name} may run out of memory: {measured.text()}; running it as asked "
            f"(`{command_line('python', 'train.py', 'ledger', '--forget', name)}` drops its records)"
        )
    return (
        f"the ledger refused {name}, which the estimate fits: {measured.text()}; "
        f"`{command_line('python', 'train.py', 'ledger', '--forget', name)}` drops its records, `--ignore-ledger` "
        "plans from the estimate alone"
    )


def vllm_off_text(refusal: str) -> str:
    return f"vLLM off: {refusal}; transformers generates (estimated so); "
