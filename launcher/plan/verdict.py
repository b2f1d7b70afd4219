"""WHETHER one profile fits this machine, and why in words: its estimate (or this machine's measurement of the
shape) against the card's free memory less the margin, every GPU of a multi-GPU profile and its vLLM server
against theirs, a cpu profile against the host's RAM; the split over machines the launcher would refuse, vLLM
that cannot start, sequences past the model's positions. A verdict's reason is what `plan --json` carries."""

from __future__ import annotations

from contract.errors import UsageError
from contract.shell import command_line
from launcher.card.detect import GpuInfo, Machine, bf16_supported
from launcher.card.topology import NodeLayout, split_over_machines
from launcher.memory.estimate import Estimate, estimate
from launcher.memory.ledger.weigh import Measured, measured_for
from launcher.plan.candidate import Candidate
from launcher.plan.margins import ESTIMATE_HEADROOM_TEXT, estimate_limit, margin_for
from profiles.catalog import vllm_refuses


def _need(est: Estimate, measured: Measured | None) -> tuple[float, str]:
    """The figure a candidate is judged by, and how to name it: this machine's measurement of the shape when
    the ledger has one (an OOM's lower bound counts), else the estimate."""
    if measured is None or measured.need_gib is None:
        return est.total_gib, ""
    return measured.need_gib, f" ({measured.text()}; est. {est.total_gib:.2f})"


def _judge(
    profile,
    est: Estimate,
    gpu: GpuInfo | None,
    machine: Machine | None,
    margin: float,
    measured: Measured | None = None,
    headroom_refuses: bool = True,
) -> tuple[bool, str]:
    """(fits, why). On a GPU a shape judged by the estimate alone keeps the estimate's headroom
    (margins.estimate_limit); `headroom_refuses` off (a profile the user named) only warns inside it."""
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
    fits, reason = _judge(profile, est, tightest, None, margin)
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


def local_gpus_needed(profile, machines: int = 1, server_node: bool = False) -> int:
    """GPUs one machine must show: its share of the training GPUs, and the vLLM server's on the first (unless
    the server has a node of its own). UsageError for a split over machines the launcher would refuse."""
    if profile.device == "cpu":
        return 0
    per_machine = split_over_machines(profile.num_gpus, machines, profile.name)
    return per_machine + (profile.vllm_server_gpus if profile.uses_vllm_server and not server_node else 0)


def split_refusal(profile, machines: int) -> str | None:
    """Why the launcher would refuse to divide the profile's training GPUs over the machines, else None."""
    try:
        split_over_machines(profile.num_gpus, machines, profile.name)
    except UsageError as exc:
        return str(exc)
    return None


def _deepspeed_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("deepspeed") is not None


def distributed_candidate(profile, arch, machine: Machine, layout: NodeLayout, margin: float) -> Candidate:
    """The verdict on a profile of several GPUs (or a vLLM server): its split over the training machines (the
    launcher's own rule), the GPUs each machine must show (the server node's included), and each GPU's
    estimate."""
    machines, own_server = layout.training_nodes, layout.server_node
    refusal = split_refusal(profile, machines)
    if refusal:
        return Candidate(profile, None, False, refusal, layout=layout)
    need = local_gpus_needed(profile, machines, own_server)
    if need > len(machine.gpus):
        # estimated as if every missing GPU were like the first one, so the table still says per GPU
        each = "each training node" if machines > 1 else "this machine"
        return Candidate(
            profile,
            estimate(profile, arch, machine.primary),
            False,
            f"needs {need} GPUs on {each}, {len(machine.gpus)} visible "
            f"(plan for them with --gpus {need} --gpu-memory GIB)",
            layout=layout,
        )
    if own_server and profile.vllm_server_gpus > len(machine.gpus):
        return Candidate(
            profile,
            estimate(profile, arch, machine.primary),
            False,
            f"its vLLM server needs {profile.vllm_server_gpus} GPUs on the server node, which has "
            f"{len(machine.gpus)} like the others",
            layout=layout,
        )
    train_gpus, server_gpus = split_gpus(profile, machine, machines, own_server)
    est = estimate(profile, arch, min(train_gpus, key=lambda g: g.free_gib))
    if est.server is not None:
        est.server = estimate(profile, arch, min(server_gpus, key=lambda g: g.free_gib)).server
    fits, reason = _judge_distributed(profile, est, train_gpus, server_gpus, margin)
    if fits and profile.zero_stage and machine.gpus[0].source == "nvml" and not _deepspeed_installed():
        # a real run here would fail at launch; a what-if plan is about the card, not this install
        fits, reason = (
            False,
            (
                f"needs the deepspeed package for ZeRO stage {profile.zero_stage} "
                "(fix: pip install deepspeed -c constraints.txt); " + reason
            ),
        )
    if layout.training_nodes > 1 or layout.server_node:
        reason += f"; {layout.text(profile)}"
    return Candidate(profile, est, fits, reason, layout=layout)


def single_candidate(
    profile, arch, machine: Machine, margin: float, measurements, ledger_refuses: bool = True
) -> Candidate:
    """The verdict on a profile of one device: its estimate (or this machine's measurement) against the card,
    or against the host's RAM for a cpu profile. Where the measurement turns the estimate's verdict, the
    candidate says so in `ledger_note`; with `ledger_refuses` off (an explicit --profile) the ledger only
    warns: the estimate's verdict stands."""
    gpu = machine.primary
    est = estimate(profile, arch, gpu if profile.device == "cuda" else None)
    measured = measured_for(measurements, profile, machine) if measurements else None
    if profile.device == "cpu" and machine.device == "cuda":
        gpu, margin = None, margin_for(machine.host_ram_gib, "cpu")
    fits, reason = _judge(profile, est, gpu, machine, margin, measured, headroom_refuses=ledger_refuses)
    candidate = Candidate(profile, est, fits, reason, measured)
    if measured is not None:
        by_estimate, estimate_reason = _judge(profile, est, gpu, machine, margin, headroom_refuses=ledger_refuses)
        if by_estimate != fits:
            candidate.ledger_note = _ledger_note(profile.name, measured, fits, ledger_refuses)
            if by_estimate and not ledger_refuses:
                candidate.fits, candidate.reason = True, f"{estimate_reason}; the ledger warns: {measured.text()}"
    return candidate


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


def without_refused_vllm(profile, arch, gpu: GpuInfo | None):
    """(the profile as it can run on `gpu`, why vLLM is off or None). vLLM refuses float16 for some model
    families, and a card below compute capability 8.0 has nothing else to give it: such a profile generates with
    transformers instead (fast_inference off), and is estimated and run that way. A vLLM server cannot be
    turned into that: (None, why)."""
    if profile.device != "cuda" or not profile.fast_inference or gpu is None:
        return profile, None
    refusal = vllm_refuses(arch, bf16_supported(gpu))
    if refusal is None:
        return profile, None
    if profile.uses_vllm_server:
        return None, refusal
    return profile.replace(fast_inference=False, vllm_standby=False, vllm_tensor_parallel=1), refusal


def vllm_off_text(refusal: str) -> str:
    return f"vLLM off: {refusal}; transformers generates (estimated so); "


def past_positions(profile, arch) -> str | None:
    """Why `profile` asks for longer sequences than the positions its model reads (config.json's
    max_position_embeddings), with the fix; None when it stays within them or the model does not say."""
    positions = arch.max_positions
    if not positions:
        return None
    reads = f"the {positions} positions {profile.model} reads (max_position_embeddings)"
    if profile.max_prompt_length >= positions:
        return (
            f"max_prompt_length {profile.max_prompt_length} leaves no room for a completion within {reads} "
            f"(fix: --set max_prompt_length={positions // 2} --set max_completion_length={positions // 2} "
            f"--set max_seq_length={positions})"
        )
    if profile.max_seq_length > positions:
        room = positions - profile.max_prompt_length
        return (
            f"max_seq_length {profile.max_seq_length} is past {reads} (fix: --set max_seq_length={positions} "
            f"--set max_completion_length={min(room, profile.max_completion_length)})"
        )
    return None
