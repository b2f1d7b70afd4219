"""WHICH profile runs: every candidate of the ladder with its estimate and verdict, and the choice.

A profile fits when vLLM can start in its share of the card and its estimated total stays within the free
memory less a margin (GPU_MARGIN_TEXT says how much and why). The first that fits, in ladder order, is chosen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contract.errors import UsageError
from contract.shell import command_line
from launcher.card.detect import GpuInfo, Machine, bf16_supported, precision_text
from launcher.card.topology import NodeLayout, node_layout, split_over_machines, topology
from launcher.memory.estimate import Estimate, estimate
from launcher.memory.ledger.weigh import measured_for
from launcher.plan.margins import ESTIMATE_HEADROOM_TEXT, GPU_MARGIN_TEXT, HOST_MARGIN_TEXT, estimate_limit, margin_for
from launcher.plan.settings import settings_of
from profiles.catalog import resolve, vllm_refuses

# A profile not derived by the fit solver runs the prompts per step it was written with
AS_WRITTEN = "as written"


def machine_count() -> int:
    """Machines of a multi-node run (GRPO_NUM_MACHINES, default 1); launcher.card.topology reads the rest."""
    return topology().num_machines


@dataclass
class Candidate:
    profile: object  # profiles.load.Profile
    estimate: Estimate | None
    fits: bool
    reason: str
    measured: object = None  # launcher.memory.ledger.Measured: what this machine measured of this shape, or None
    ledger_note: str = ""  # one line when the measurement turned the estimate's verdict (see _ledger_note)
    speed: object = None  # launcher.plan.speed.StepTime: the predicted step (None on the CPU)
    limited_by: str = AS_WRITTEN  # what stopped its prompts per step (the fit solver's verdict), or AS_WRITTEN
    layout: NodeLayout | None = None  # several nodes: which node does what
    run: object = None  # launcher.plan.duration.RunLength: its steps, prompts, epochs and predicted hours
    written: dict | None = None  # a rung derived for the card: its settings as written ("auto" where derived)

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
    chosen: object | None  # Profile
    margin_gib: float
    notes: list[str] = field(default_factory=list)

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
                    **({"nodes": _nodes_json(c)} if c.layout is not None else {}),
                    **_turns_json(c.profile),
                }
                for c in self.candidates
            ],
            "chosen": self.chosen.name if self.chosen is not None else None,
            "notes": list(self.notes),
        }


def _nodes_json(candidate: Candidate) -> list[dict]:
    """Each node's role and GPUs, with the GiB one of its GPUs is estimated to hold."""
    est = candidate.estimate
    rows = candidate.layout.roles(candidate.profile)
    for row in rows:
        if est is None:
            continue
        if row.get("training_gpus"):
            row["training_gib_per_gpu"] = round(est.total_gib, 2)
        if row.get("server_gpus") and est.server is not None:
            row["server_gib_per_gpu"] = round(est.server.total_gib, 2)
    return rows


# ---------------------------------------------------------------------------------------------------


def _need(est: Estimate, measured) -> tuple[float, str]:
    """The figure a candidate is judged by, and how to name it: this machine's measurement of the shape when
    the ledger has one (an OOM's lower bound counts), else the estimate."""
    need = measured.need_gib if measured is not None else None
    if need is None:
        return est.total_gib, ""
    return need, f" ({measured.text()}; est. {est.total_gib:.2f})"


def _judge(
    profile,
    est: Estimate,
    gpu: GpuInfo | None,
    machine: Machine,
    margin: float,
    measured=None,
    headroom_refuses: bool = True,
) -> tuple[bool, str]:
    """(fits, why). On a GPU a shape judged by the estimate alone keeps the estimate's headroom
    (margins.estimate_limit); `headroom_refuses` off (a profile the user named) only warns inside it."""
    need, source = _need(est, measured)
    if est.memory == "host":
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


def _split_refusal(profile, machines: int) -> str | None:
    """Why the launcher would refuse to divide the profile's training GPUs over the machines, else None."""
    try:
        split_over_machines(profile.num_gpus, machines, profile.name)
    except UsageError as exc:
        return str(exc)
    return None


def _deepspeed_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("deepspeed") is not None


def _distributed_candidate(profile, arch, machine: Machine, layout: NodeLayout, margin: float) -> Candidate:
    """The verdict on a profile of several GPUs (or a vLLM server): its split over the training machines (the
    launcher's own rule), the GPUs each machine must show (the server node's included), and each GPU's
    estimate."""
    machines, own_server = layout.training_nodes, layout.server_node
    refusal = _split_refusal(profile, machines)
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


def _single_candidate(
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


def _vllm_off_text(refusal: str) -> str:
    return f"vLLM off: {refusal}; transformers generates (estimated so); "


def _with_speed(candidate: Candidate, arch, gpu, limits: dict | None, measurements=None) -> Candidate:
    """The candidate with its predicted step (a GPU profile with an estimate) and what limited its batch; its
    completions as long as the ledger measured them, where it did."""
    profile = candidate.profile
    if profile.device != "cuda" or gpu is None or candidate.estimate is None:
        return candidate
    from launcher.plan.lengths import completion_plan
    from launcher.plan.speed import predict

    lengths = completion_plan(profile, arch, measurements=measurements)
    candidate.speed = predict(profile, arch, gpu, candidate.estimate, lengths, measured=candidate.measured)
    candidate.limited_by = (limits or {}).get(profile.name, AS_WRITTEN)
    return candidate


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


def _with_run(candidate: Candidate, hours: float | None) -> Candidate:
    """The candidate with its run (steps, prompts, epochs, predicted hours) and its profile's max_steps set to
    the run's steps (the attempt trains exactly what the plan says)."""
    from launcher.plan.duration import run_length
    from tasks.size import train_rows

    profile = candidate.profile
    rows, basis = train_rows(profile.dataset, profile.train_samples)
    step_s = candidate.speed.step_s if candidate.speed is not None else None
    run = run_length(
        profile, step_s, profile.generation_batch // profile.num_generations, hours=hours, rows=rows, rows_basis=basis
    )
    candidate.run = run
    if profile.max_steps != run.steps:
        candidate.profile = profile.model_copy(update={"max_steps": run.steps})
    return candidate


def make_plan(
    profiles,
    machine: Machine,
    margin_gib: float | None = None,
    measurements=None,
    ledger_refuses: bool = True,
    limits: dict | None = None,
    nodes: int | None = None,
    hours: float | None = None,
    written: dict | None = None,
    refused: dict | None = None,
    named: bool = False,
) -> Plan:
    """Judge the profiles for this machine in ladder order: cuda profiles on a GPU, cpu ones without. `named`:
    the user named the profile (`--profile`): a rung derived from it runs however little of the data it covers.
    `measurements` (launcher.memory.ledger entries) replace the estimate of every single-device shape this machine
    has measured; multi-GPU profiles are judged by the estimate alone. `ledger_refuses=False` (a profile the
    user named): the ledger warns but never refuses what the estimate fits. Every GPU candidate gets its
    predicted step (launcher.plan.speed); `limits` (from derive_ladder) says what stopped a derived one's
    prompts per step. `nodes` (plan --nodes N): N nodes like `machine`, a vLLM server on the last of its own;
    None: the machines this one runs among. Every candidate gets its run (launcher.plan.duration): `hours`, the
    wall-clock budget (--hours), and its max_steps set to the run's steps. `written` (from derive_rungs): each
    derived rung's settings as written; `refused`: the rungs nothing could be derived from, and why."""
    profiles = sorted(profiles, key=lambda p: (p.ladder, p.name))
    if not profiles:
        raise UsageError("no profiles to plan (fix: --profiles-dir DIR holding *.yaml profiles)")
    gpu = machine.primary
    device = machine.device
    notes = list(machine.notes)
    matching = [p for p in profiles if p.device == device]
    if matching:
        skipped = len(profiles) - len(matching)
        if skipped:
            notes.append(f"{skipped} profile(s) for device {'cpu' if device == 'cuda' else 'cuda'} left out")
        profiles = matching
    layouts = {p.name: node_layout(p, nodes) if device == "cuda" else NodeLayout() for p in profiles}
    if device == "cuda":
        # A multi-GPU profile can be chosen only where its GPUs are there (or asked for with --gpus N); it is
        # still listed, with what each of its GPUs would need. Single-GPU profiles stay candidates anywhere.
        short = sum(
            1
            for p in profiles
            if p.distributed
            and not _split_refusal(p, layouts[p.name].training_nodes)
            and local_gpus_needed(p, layouts[p.name].training_nodes, layouts[p.name].server_node) > len(machine.gpus)
        )
        if short:
            notes.append(
                f"{short} profile(s) need more GPUs than the {len(machine.gpus)} visible: listed, not "
                "chosen (plan for more with --gpus N)"
            )
        if nodes is not None and nodes > 1 and gpu is not None:
            notes.append(
                f"planned for {nodes} nodes of {len(machine.gpus)} x {gpu.name} each: the training nodes "
                "first, a vLLM server on the last node of its own (server-mode profiles); each rung says "
                "which node does what"
            )
        elif nodes is None and any(layout.server_node for layout in layouts.values()) and gpu is not None:
            notes.append(f"the vLLM server node's GPUs are taken to be like this machine's ({gpu.name})")
    if margin_gib is None:
        if device == "cuda":
            margin_gib = margin_for(gpu.total_gib, "cuda")
        else:
            margin_gib = margin_for(machine.host_ram_gib, "cpu")

    archs: dict[str, object] = {}
    candidates: list[Candidate] = []
    for profile in profiles:
        if profile.device == "cuda" and gpu is None:
            candidates.append(
                Candidate(
                    profile,
                    None,
                    False,
                    "needs an NVIDIA GPU and none was found (plan for a card with "
                    "--gpu-memory GIB, or use a cpu profile)",
                )
            )
            continue
        if profile.model not in archs:
            archs[profile.model] = resolve(profile.model)
        past = past_positions(profile, archs[profile.model])
        if past:
            candidates.append(Candidate(profile, None, False, past))
            continue
        runnable, refusal = without_refused_vllm(profile, archs[profile.model], gpu)
        if runnable is None:
            candidates.append(Candidate(profile, None, False, f"{refusal}: its vLLM server cannot start here"))
            continue
        profile = runnable
        layout = layouts[profile.name]
        if profile.device == "cuda" and (profile.distributed or layout.training_nodes > 1):
            # on several training machines a one-GPU profile is refused by the split (each machine must train)
            candidate = _distributed_candidate(profile, archs[profile.model], machine, layout, margin_gib)
        else:
            candidate = _single_candidate(
                profile, archs[profile.model], machine, margin_gib, measurements, ledger_refuses
            )
        if refusal:
            candidate.reason = _vllm_off_text(refusal) + candidate.reason
        candidate = _with_run(_with_speed(candidate, archs[profile.model], gpu, limits, measurements), hours)
        candidate.written = (written or {}).get(profile.name)
        if profile.name in (refused or {}):  # a rung nothing could be derived from: its placeholders never run
            candidate.fits, candidate.reason = False, refused[profile.name]
        elif candidate.written is not None and candidate.fits and candidate.run is not None and not named:
            from launcher.plan.duration import too_short

            short = too_short(candidate.run)
            if short:
                candidate.fits, candidate.reason = False, f"{short}; {candidate.reason}"
        candidates.append(candidate)
    if any(c.reason.startswith("vLLM off") for c in candidates):
        notes.append(
            f"{gpu.name}: no bfloat16, so vLLM is off for the models it refuses in float16 (Gemma 2/3, "
            "GLM-4); those rungs generate with transformers: slower, the KV cache in the training process"
        )
    notes.extend(c.ledger_note for c in candidates if c.ledger_note)
    chosen = next((c.profile for c in candidates if c.fits), None)
    for cand in candidates:
        run = cand.run
        if cand.profile is chosen and run is not None and run.hours and run.budget_hours:
            if run.hours > run.budget_hours * 1.1:  # pinned steps past the budget: it stops at the budget
                notes.append(
                    f"{chosen.name}: its {run.steps:,} steps ({run.basis}) are predicted to take "
                    f"{run.hours:.1f} h, past the --hours {run.budget_hours:g} budget by more than 10%: the run "
                    "stops at the budget with a checkpoint, the adapter and the report"
                )
    if chosen is not None and chosen.fast_inference and chosen.vllm_standby and chosen.load_in_4bit:
        from launcher.plan.levers import STANDBY_FAILURES

        notes.append(
            f"{chosen.name} runs vLLM standby with 4-bit weights, which the fit solver never chooses by "
            f"itself: {STANDBY_FAILURES}; vllm_standby: false avoids it"
        )
    return Plan(machine, candidates, chosen, margin_gib, notes)


def _turns_json(profile) -> dict:
    """`turns` of a candidate that offers tools: the calls and replies its memory and time are planned for."""
    from launcher.plan.turns import turn_plan_of

    turns = turn_plan_of(profile)
    return {"turns": turns.to_json()} if turns is not None else {}
