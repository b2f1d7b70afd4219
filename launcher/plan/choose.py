"""WHICH profile runs: every candidate of the ladder with its estimate and verdict, and the choice.

A profile fits when vLLM can start in its share of the card and its estimated total stays within the free
memory less a margin (GPU_MARGIN_TEXT says how much and why). The first that fits, in ladder order, is chosen.
Each candidate's verdict is launcher.plan.verdict's; the candidate and plan records are launcher.plan.candidate's;
here each gets its predicted step and its run, and the plan its notes.
"""

from __future__ import annotations

from contract.errors import UsageError
from launcher.card.detect import Machine
from launcher.card.topology import NodeLayout, node_layout, topology
from launcher.plan.candidate import AS_WRITTEN, Candidate, Plan
from launcher.plan.margins import margin_for
from launcher.plan.verdict import (
    distributed_candidate,
    local_gpus_needed,
    past_positions,
    single_candidate,
    split_refusal,
    vllm_off_text,
    without_refused_vllm,
)
from profiles.architecture import Architecture
from profiles.catalog import resolve


def machine_count() -> int:
    """Machines of a multi-node run (GRPO_NUM_MACHINES, default 1); launcher.card.topology reads the rest."""
    return topology().num_machines


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


def _judged_run(profile, candidate: Candidate, arch, gpu, hours: float | None, measurements=None):
    """(the run the data-coverage rule judges, the card it is timed as; None: the card's own). A card the card
    table does not know is timed at the default card's speed, which errs long on purpose, so its run's epochs
    say nothing of what the card can do: the rule judges instead the run `profile` (before its run length is
    set) would have on the fastest card the table knows with about its memory, so that a rung is passed over
    only where no known card of that memory could run enough of the data. No known card of that memory: not
    judged (None, None). A step of the shape measured on this machine is the card's own speed."""
    speed = candidate.speed
    if speed is None or speed.card_known or speed.measured_s is not None:
        return candidate.run, None
    from dataclasses import replace

    from launcher.card.detect import MIN_CAPABILITY
    from launcher.card.facts import cards_like
    from launcher.plan.duration import run_length
    from launcher.plan.lengths import completion_plan
    from launcher.plan.speed import predict
    from tasks.size import train_rows

    like = cards_like(gpu.total_gib, MIN_CAPABILITY)
    if not like:
        return None, None
    lengths = completion_plan(profile, arch, measurements=measurements)
    step_s, card = min(
        (predict(profile, arch, replace(gpu, name=card.name), candidate.estimate, lengths).step_s, card.name)
        for card in like
    )
    rows, basis = train_rows(profile.dataset, profile.train_samples)
    prompts = profile.generation_batch // profile.num_generations
    return run_length(profile, step_s, prompts, hours=hours, rows=rows, rows_basis=basis), card


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
            and not split_refusal(p, layouts[p.name].training_nodes)
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
        if gpu is not None:  # device "cuda"
            margin_gib = margin_for(gpu.total_gib, "cuda")
        else:
            margin_gib = margin_for(machine.host_ram_gib, "cpu")

    archs: dict[str, Architecture] = {}
    candidates: list[Candidate] = []
    # the rungs whose run at the default speed alone is too short: the card each was judged as (None: not judged)
    guessed: dict[str, str | None] = {}
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
            candidate = distributed_candidate(profile, archs[profile.model], machine, layout, margin_gib)
        else:
            candidate = single_candidate(
                profile, archs[profile.model], machine, margin_gib, measurements, ledger_refuses
            )
        if refusal:
            candidate.reason = vllm_off_text(refusal) + candidate.reason
        candidate = _with_run(_with_speed(candidate, archs[profile.model], gpu, limits, measurements), hours)
        candidate.written = (written or {}).get(profile.name)
        if refused and profile.name in refused:  # a rung nothing could be derived from: its placeholders never run
            candidate.fits, candidate.reason = False, refused[profile.name]
        elif candidate.written is not None and candidate.fits and candidate.run is not None and not named:
            from launcher.plan.duration import too_short

            judged, timed_as = _judged_run(profile, candidate, archs[profile.model], gpu, hours, measurements)
            brief = too_short(judged, timed_as) if judged is not None else None
            if brief:
                candidate.fits, candidate.reason = False, f"{brief}; {candidate.reason}"
            elif judged is not candidate.run and too_short(candidate.run):
                guessed[candidate.profile.name] = timed_as
        candidates.append(candidate)
    if gpu is not None and any(c.reason.startswith("vLLM off") for c in candidates):
        notes.append(
            f"{gpu.name}: no bfloat16, so vLLM is off for the models it refuses in float16 (Gemma 2/3, "
            "GLM-4); those rungs generate with transformers: slower, the KV cache in the training process"
        )
    notes.extend(c.ledger_note for c in candidates if c.ledger_note)
    chosen = next((c.profile for c in candidates if c.fits), None)
    if gpu is not None and chosen is not None and chosen.name in guessed:
        notes.append(_guessed_speed_note(gpu, chosen.name, guessed[chosen.name]))
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


def _guessed_speed_note(gpu, chosen: str, timed_as: str | None) -> str:
    """Why a rung whose run at the default card's speed covers too little of the data is still chosen."""
    from launcher.plan.duration import DEFAULT_HOURS, MIN_RUN_EPOCHS

    judged = (
        f"judged as the fastest card of about {gpu.total_gib:g} GiB the table knows ({timed_as}) would run it"
        if timed_as
        else f"not judged: the table knows no card of about {gpu.total_gib:g} GiB"
    )
    return (
        f"{gpu.name} is not in the card table: its steps are timed at the default card's speed, which errs long, "
        f"so whether a rung's run covers {MIN_RUN_EPOCHS:g} epochs of the data is {judged}; {chosen}'s run is the "
        f"steps the default speed fits into {DEFAULT_HOURS:g} h, so on a faster card it ends sooner (--hours H "
        "or --set max_steps=N for a longer run)"
    )
