"""WHICH configurations a model of the user's gets: the fit solver (launcher.plan.solve) from every shipped rung's
intent (`fit MODEL`, and `train --set model=...`, whose ladder they become), and with several GPUs the same search
over the ways to split them (data parallel with vLLM colocated, or training beside a vLLM server)."""

from __future__ import annotations

from contract.errors import ProfileError, UsageError
from launcher.card.detect import GpuInfo
from launcher.plan.ambition import ambition_of
from launcher.plan.candidate import AS_WRITTEN, Candidate
from launcher.plan.completion_lengths import completion_plan
from launcher.plan.judge import Ledger, usable_of
from launcher.plan.levers import objective, quality_key
from launcher.plan.outcome import Fit
from launcher.plan.search import Solver
from launcher.plan.solve import SINGLE_GPU, fit
from launcher.plan.wording import nothing_fits
from profiles.catalog import catalogue_key, resolve
from profiles.schema import floor_of


def _intent(base, amb) -> tuple:
    """What makes two rungs' intents solve alike: the ambition, and the keys of the rung the solver keeps."""
    return (
        amb.generations,
        amb.completion,
        amb.expected,
        amb.prompt,
        amb.rank,
        amb.sixteen_bit,
        amb.prompts_per_step,
        amb.checkpointing if "gradient_checkpointing" in amb.pinned else None,
        base.optim,
        tuple(base.target_modules),
        base.beta,
        base.fast_inference,
    )


def best_fit(rungs, model: str, gpu: GpuInfo, *, pinned=(), machine=None, measurements=None) -> list[Fit]:
    """The solver from every single-GPU rung's intent for `model`: the fits, most valuable first (those
    that found nothing last). `pinned`: the keys the user set, or a dict of them with their values, put into
    each rung before its intent is read (a rung need not be valid with them: the solver reshapes the batch).
    Rungs whose intents solve alike (the same rank, precision and the keys the solver keeps) are solved once."""
    arch = resolve(model)
    values = dict(pinned) if isinstance(pinned, dict) else {}
    fits = []
    for base, amb in _intents(rungs, model, values, set(pinned), arch, measurements):
        result = fit(base, gpu, arch=arch, ambition=amb, ledger=Ledger(machine, measurements))
        fits.append(result)
        if result.at_ambition:  # the intents come richest first: a poorer one cannot be worth more
            break
    return sorted(fits, key=Fit.key, reverse=True)


def _intents(rungs, model: str, values: dict, pinned: set, arch, measurements=None) -> list[tuple]:
    """(base, ambition) of every single-GPU rung whose intent differs, the richest (LoRA rank, 16-bit) first."""
    out, seen = [], set()
    for rung in rungs:
        if rung.device != "cuda" or rung.gpus_needed != 1:
            continue
        base = rung.model_copy(update={**values, "model": model})
        amb = ambition_of(base, pinned, rung.name, arch, measurements=measurements)
        intent = _intent(base, amb)
        if intent not in seen:
            seen.add(intent)
            out.append((base, amb))
    return sorted(out, key=lambda item: (item[1].rank, item[1].sixteen_bit), reverse=True)


def _own_model(rung, load_profile) -> str | None:
    """The catalogue key of the model a rung's file was written for (before any --set), None when unreadable."""
    path = rung.source.split(" with --set")[0]  # profiles.load names an overridden source so
    try:
        return catalogue_key(load_profile(path).model) if path else None
    except Exception:  # noqa: BLE001 - a rung that cannot be re-read is simply not kept as written
        return None


def derive_ladder(profiles, model: str, machine, *, pinned=(), measurements=None) -> tuple[list[Candidate], list[str]]:
    """The ladder for a model of the user's (`train --set model=...`, `plan --set model=...`): a rung written for that model that fits
    as written (its GPUs there) is kept; every single-GPU rung's intent becomes an ambition the solver
    derives a configuration from, and with several GPUs the best of those intents is also spread over them
    (data parallel, or beside a vLLM server). Multi-GPU rungs of other models give way to that search. All are
    ordered by value, the most prompts per hour first (ladder 100 on); identical derivations appear once.
    Returns (the candidates, each derived one with what stopped its prompts per step, notes for the plan)."""
    from profiles.load import load_profile

    gpu = machine.primary
    arch = resolve(model)
    cuda = [p for p in profiles if p.device == "cuda"]
    others = [p for p in profiles if p.device != "cuda"]
    if gpu is None or not any(p.gpus_needed == 1 for p in cuda):
        return as_written(profiles), []
    if arch.max_positions and all(r.max_prompt_length >= arch.max_positions for r in cuda):
        return as_written(profiles), [
            f"fit solver for {arch.name}: it reads {arch.max_positions} positions (max_position_embeddings), "
            "and the rungs' max_prompt_length leaves no room for a completion (fix: --set "
            f"max_prompt_length={arch.max_positions // 2})"
        ]
    solver = Solver(arch, gpu, usable_of(gpu), Ledger(machine, measurements))
    need = completion_plan(cuda[0], arch, set(pinned), measurements).cap if cuda else None  # the cap the task needs
    chosen: dict[str, tuple] = {}
    kept, failed, refused = [], [], []
    best_rung, best_result = None, None
    for rung in cuda:
        own = _own_model(rung, load_profile)
        runnable = rung
        if solver.vllm_refused and rung.fast_inference and not rung.uses_vllm_server:
            runnable = rung.model_copy(update={"fast_inference": False, "vllm_standby": False})
        written_whole = not getattr(rung, "derived", ())  # a rung with `auto` keys has no shape as written
        if (
            own == catalogue_key(model)
            and written_whole
            and rung.gpus_needed <= len(machine.gpus)
            and solver.fits(runnable)
        ):
            chosen.setdefault(rung.name, (rung, quality_key(runnable, solver.speed(runnable), need), AS_WRITTEN))
            kept.append(rung.name)  # and still derived from: its intent may fit better than as written
    by_name = {rung.name: rung for rung in cuda}
    for base, amb in _intents(cuda, model, {}, set(pinned), arch, measurements):
        try:
            result = fit(base, gpu, arch=arch, ambition=amb, ledger=Ledger(machine, measurements))
        except ProfileError as exc:  # a pinned key the derived shape cannot take: that rung gives nothing
            failed.append(str(exc))
            refused.append(str(exc))
            continue
        if result.profile is None:
            assert result.shortfall is not None  # the solver says why whenever nothing fits
            failed.append(nothing_fits(result.shortfall))
            continue
        for profile, key, limit in (
            (result.profile, result.key()[1], result.limited_by),
            *((p, k, "fallback") for p, k in result.fallbacks),
        ):
            same = chosen.get(profile.name)  # one name per shape: keep its most valuable batch and share
            if same is None or key > same[1]:
                chosen[profile.name] = (profile, key, limit)
        if best_result is None or result.key() > best_result.key():
            best_rung, best_result = by_name[amb.source], result
        if result.at_ambition:  # the intents come richest first: a poorer one cannot be worth more
            break
    if best_rung is not None and len(machine.gpus) > 1:  # --gpus N: the same search over the GPUs' splits
        spread = fit_gpus(best_rung, model, machine, pinned=pinned, measurements=measurements)
        if spread is not None and spread.profile is not None:  # fit_gpus answers only with a fit
            key = spread.key()[1]
            if best_result is not None and spread_wins(spread, best_result):
                key = (_EVERY_GPU,) + key  # ahead of every configuration that leaves GPUs idle
            chosen.setdefault(spread.profile.name, (spread.profile, key, spread.limited_by))
    if not chosen and failed and len(refused) == len(failed):
        # every derivation refused, none for memory: the shipped rungs as written (sized for other cards, an
        # 80 GB rung on a 16 GiB card) are no answer for this model; say why instead
        raise UsageError(
            f"--set model={model}: the fit solver could derive no configuration for this card; "
            f"every rung's derivation was refused, the first: {refused[0]}"
        )
    if not chosen:  # the rungs as the user set them, with their verdicts, and why nothing could be derived
        return as_written(profiles), [f"fit solver for {arch.name}: {failed[0]}"] if failed else []
    ordered = sorted(chosen.values(), key=lambda item: _ordered(item[1]), reverse=True)
    derived = [Candidate(p.replace(ladder=100 + i), limited_by=limit) for i, (p, _, limit) in enumerate(ordered)]
    notes = [
        f"fit solver: {len(derived)} configuration(s) of {arch.name} for this machine, most prompts per hour "
        f"first (derived from the rungs' intents" + (f"; kept as written: {', '.join(kept)}" if kept else "") + ")"
    ]
    if best_result is not None:
        notes.append(f"fit solver: {best_result.ambition.basis}")
        forced = [g for g in best_result.given_up if not g.gain]
        chosen_for_value = [g for g in best_result.given_up if g.gain]
        if forced:
            notes.append(
                f"fit solver: the ambition ({best_result.ambition.text()}) needs "
                f"{best_result.ambition_need_gib:.2f} GiB at one prompt a step, {best_result.usable_gib:.2f} "
                f"usable here (a card of {best_result.card_for_ambition_gib:.1f} GiB would hold it); given "
                "up: " + "; ".join(g.text() for g in best_result.given_up)
            )
        elif chosen_for_value:
            notes.append(
                "fit solver: the ambition fits, and "
                + "; ".join(f"{g.after} learns {g.gain:.2f}x as much per hour as {g.before}" for g in chosen_for_value)
                + f" (its memory buys a larger step; it saves {sum(g.saves_gib for g in chosen_for_value):.2f} GiB)"
            )
    return as_written(others) + derived, notes


def as_written(profiles) -> list[Candidate]:
    return [Candidate(p) for p in profiles]


# ---------------------------------------------------------------------------------------------------
# More than one GPU (--gpus N)


# A configuration over every GPU of the machine that wins against one leaving GPUs idle sorts first
_EVERY_GPU = "every GPU"


def _ordered(key: tuple) -> tuple:
    """Sort key of derive_ladder's configurations: a spread that uses every GPU and wins (spread_wins) first."""
    return (1, key[1:]) if key and key[0] == _EVERY_GPU else (0, key)


def spread_wins(spread: Fit, single: Fit) -> bool:
    """Whether a configuration over every GPU of the machine beats the best that leaves all but one idle: it
    keeps the experiment (the completion cap the task needs, the generations per group) and learns more per
    hour, whatever it gives up in LoRA rank or precision for it (several GPUs are the user's to use: an idle
    one is the largest throughput a plan can give away). Otherwise the order of the levers decides, as on
    one GPU."""
    if spread.profile is None or single.profile is None:
        return spread.profile is not None
    need = single.ambition.completion
    same_experiment = min(spread.profile.max_completion_length, need) >= min(
        single.profile.max_completion_length, need
    ) and min(spread.profile.num_generations, 8) >= min(single.profile.num_generations, 8)
    return same_experiment and objective(spread.profile, spread.speed) > objective(single.profile, single.speed)


def topologies(gpus: int) -> list[dict]:
    """Every way to use up to `gpus` GPUs: data parallel over 1..N with vLLM colocated in each process, or
    N - s training GPUs beside a vLLM server on s GPUs (tensor parallel over a power of two dividing s)."""
    out = [dict(SINGLE_GPU, num_gpus=world) for world in range(gpus, 0, -1)]
    for servers in range(1, gpus):
        tp = 1
        while tp <= servers:
            if servers % tp == 0:
                out.append(
                    {
                        "num_gpus": gpus - servers,
                        "vllm_mode": "server",
                        "vllm_server_gpus": servers,
                        "vllm_tensor_parallel": tp,
                    }
                )
            tp *= 2
    return out


def candidate_topologies(gpus: int) -> list[dict]:
    """The topologies of `topologies(gpus)` that can be the best, so that the search costs O(log N) fits
    instead of O(N log N) (4,096 GPUs took minutes). A training GPU's configuration does not depend on how
    many others train beside it (two or more: the same DDP shares per GPU), and the objective grows with
    their number: data parallel over all N GPUs dominates 2..N-1, one GPU stays (no collectives). A vLLM
    server GPU holds 1/tp of the model whatever the number of copies: s = tp server GPUs fit whenever any
    multiple of tp does, and leave the most GPUs to train. tests/unit/launcher/test_fit_scale.py checks this against the
    whole search."""
    out = [dict(SINGLE_GPU, num_gpus=world) for world in sorted({gpus, 1}, reverse=True)]
    tp = 1
    while tp < gpus:
        out.append({"num_gpus": gpus - tp, "vllm_mode": "server", "vllm_server_gpus": tp, "vllm_tensor_parallel": tp})
        tp *= 2
    return out


def fit_gpus(rung, model: str, machine, *, pinned=(), measurements=None) -> Fit | None:
    """The most valuable configuration of `model` over every GPU of the machine (their smallest card counts),
    from `rung`'s intent: the solver on every topology, the best of those that use every GPU (else the best
    of all). None with fewer than two GPUs."""
    if len(machine.gpus) < 2:
        return None
    arch = resolve(model)
    gpu = min(machine.gpus, key=lambda g: g.free_gib)
    values = dict(pinned) if isinstance(pinned, dict) else {}
    base = rung.model_copy(update={**values, "model": model})
    amb = ambition_of(base, set(pinned), rung.name, arch, measurements=measurements)
    found = []
    for topology in candidate_topologies(len(machine.gpus)):
        try:
            found.append(
                fit(base, gpu, arch=arch, ambition=amb, ledger=Ledger(machine, measurements), topology=topology)
            )
        except ProfileError:  # a pinned key this split cannot take (e.g. standby on accelerate)
            continue
    fitting = [f for f in found if f.profile is not None]
    if not fitting:
        return None
    every = [f for f in fitting if f.profile is not None and f.profile.gpus_needed == len(machine.gpus)]
    return max(every or fitting, key=Fit.key)


TOPOLOGY_KEYS = ("num_gpus", "vllm_mode", "vllm_server_gpus", "vllm_tensor_parallel", "zero_stage")


def check_pins(values: dict) -> None:
    """Pinned values that no configuration can take, refused before the search (ProfileError, exit 2): a cpu
    device, and batch keys that cut no step into whole groups of the pinned generations."""
    from launcher.plan.levers import PROMPT_CHOICES

    if values.get("device") == "cpu":
        raise ProfileError(
            "--set",
            "device",
            "fit plans a configuration for a GPU; a CPU run takes the cpu-* profiles",
            "drop --set device=cpu, or run `python train.py train --profile profiles/cpu-tiny-8gen.yaml`",
        )
    gens, batch, steps = (
        values.get(k) for k in ("num_generations", "per_device_train_batch_size", "gradient_accumulation_steps")
    )
    if gens is None or (batch is None and steps is None):
        return
    world = values.get("num_gpus", 1)
    if batch is not None and steps is not None:
        possible = (batch * steps * world) % gens == 0
        if not possible:
            raise ProfileError(
                "--set",
                "per_device_train_batch_size",
                f"per_device_train_batch_size x num_gpus x gradient_accumulation_steps = {batch} x "
                f"{world} x {steps} = {batch * world * steps} is not divisible by num_generations "
                f"({gens}); GRPO needs whole groups of completions per step",
                f"make the product a multiple of {gens}",
            )
    elif batch is not None:
        possible = any((p * gens) % batch == 0 for p in PROMPT_CHOICES)
    else:
        possible = any((p * gens) % steps == 0 for p in PROMPT_CHOICES)
    if not possible:
        pinned = " x ".join(
            f"{k} {values[k]}" for k in ("per_device_train_batch_size", "gradient_accumulation_steps") if k in values
        )
        raise ProfileError(
            "--set",
            "per_device_train_batch_size" if batch is not None else "gradient_accumulation_steps",
            f"{pinned} cannot hold whole groups of num_generations {gens} at any of "
            f"{', '.join(map(str, PROMPT_CHOICES))} prompts per step; GRPO needs whole groups of "
            "completions per step",
            f"pin a batch that {gens} divides, or leave it to the solver",
        )


def _pinned_topology(values: dict, machine) -> dict | None:
    """The split the pins ask for (num_gpus, vllm_mode, ...), checked against the GPUs planned; None when no
    topology key is pinned."""
    if not any(k in values for k in TOPOLOGY_KEYS):
        return None
    topology = {**SINGLE_GPU, "zero_stage": 0, **{k: values[k] for k in TOPOLOGY_KEYS if k in values}}
    server = topology["vllm_server_gpus"] if topology["vllm_mode"] == "server" else 0
    needed = topology["num_gpus"] + server
    if needed > len(machine.gpus):
        raise UsageError(
            f"--set {', '.join(f'{k}={values[k]}' for k in TOPOLOGY_KEYS if k in values)}: needs "
            f"{needed} GPUs, the plan has {len(machine.gpus)} (fix: --gpus {needed} to plan for them)"
        )
    return topology


def fit_for_machine(rungs, model: str, machine, *, pinned=(), measurements=None):
    """The most valuable configuration of `model` for the machine's card(s), from every rung's intent: one
    GPU's best, or, with several GPUs, the data-parallel spread when it is of higher quality. `pinned`: the
    keys the user set with their values (already validated one by one); a split they pin is the only one
    tried. ProfileError / UsageError for pins no configuration can take."""
    gpu = machine.primary
    if gpu is None:
        raise UsageError(
            f"fit needs a card to fit: {machine.message} (fix: --gpu-memory GIB with a supported "
            "--gpu-name, or run on a machine with a Turing or newer GPU)"
        )
    values = dict(pinned) if isinstance(pinned, dict) else {}
    check_pins(values)
    topology = _pinned_topology(values, machine)
    if topology is not None:
        arch = resolve(model)
        found = []
        for rung in rungs:
            if rung.device != "cuda" or rung.gpus_needed != 1:
                continue
            base = rung.model_copy(update={**values, "model": model})
            found.append(
                fit(
                    base,
                    gpu,
                    arch=arch,
                    ambition=ambition_of(base, set(values), rung.name, arch, measurements=measurements),
                    ledger=Ledger(machine, measurements),
                    topology=topology,
                )
            )
        if not found:
            raise UsageError(
                "fit: no single-GPU cuda profile in the ladder to take an ambition from "
                "(fix: --profiles-dir with gpu-*.yaml)"
            )
        return max(found, key=Fit.key)
    results = best_fit(rungs, model, gpu, pinned=pinned, machine=machine, measurements=measurements)
    if not results:
        raise UsageError(
            "fit: no single-GPU cuda profile in the ladder to take an ambition from "
            "(fix: --profiles-dir with gpu-*.yaml)"
        )
    best = results[0]
    if best.profile is not None and len(machine.gpus) > 1:  # --gpus N: data parallel and the vLLM server too
        rung = next(r for r in rungs if r.name == best.ambition.source)
        spread = fit_gpus(rung, model, machine, pinned=pinned, measurements=measurements)
        if spread is not None and (spread.key() > best.key() or spread_wins(spread, best)):
            best = spread
    return best


# ---------------------------------------------------------------------------------------------------
# The shipped ladder derived for the card: a rung's keys written `auto`


def written_settings(profile) -> dict:
    """A profile's settings as its file writes them: the solver's keys, "auto" where the plan derives one."""
    from launcher.plan.settings import SETTINGS_KEYS
    from profiles.schema import AUTO

    derived = set(getattr(profile, "derived", ()) or ())
    return {key: (AUTO if key in derived else getattr(profile, key)) for key in SETTINGS_KEYS}


def derive_rungs(profiles, machine, *, measurements=None) -> tuple[list[Candidate], list[str]]:
    """The profiles with every single-GPU rung that writes keys `auto` derived for the machine's card: the fit
    solver chooses those keys, every key written (the model, precision, LoRA rank, generations, task, rewards,
    and any value a user wrote in place of `auto`) is pinned. Returns (the candidates, notes): each derived rung
    with its settings as written and what stopped its prompts per step, or why nothing could be derived; a
    derived profile keeps its rung's name, place on the ladder and description."""
    from profiles.schema import KEYS

    gpu = machine.primary
    if gpu is None:
        return as_written(profiles), []
    out = []
    for rung in profiles:
        derived = tuple(getattr(rung, "derived", ()) or ())
        solvable = [k for k in derived if k != "max_steps"]
        if rung.device != "cuda" or rung.gpus_needed != 1 or not solvable:
            out.append(Candidate(rung))
            continue
        candidate = Candidate(rung, written=written_settings(rung))
        out.append(candidate)
        pinned = set(KEYS) - set(derived)
        arch = resolve(rung.model)
        try:
            result = fit(
                rung,
                gpu,
                arch=arch,
                ambition=ambition_of(rung, pinned, rung.name, arch),
                ledger=Ledger(machine, measurements),
            )
        except ProfileError as exc:
            candidate.not_derived = f"nothing derived for this card: {exc}"
            continue
        if result.profile is None:
            assert result.shortfall is not None  # the solver says why whenever nothing fits
            candidate.not_derived = nothing_fits(result.shortfall)
            continue
        candidate.profile = result.profile.model_copy(
            update={"name": rung.name, "description": rung.description, "ladder": rung.ladder, "source": rung.source}
        )
        candidate.limited_by = result.limited_by
    written = sum(c.written is not None for c in out)
    notes = [
        f"{written} rung(s) derived for {gpu.name}: the keys they write `auto` chosen for this card, "
        "every other key as written (plan --json: `written` beside `settings`)"
    ]
    return out, notes if written else []


def derive_cpu_lengths(profiles, measurements=None) -> tuple[list[Candidate], list[str]]:
    """(profiles, notes): each cpu profile's completion cap and sequence written `auto` as the task needs them
    (launcher.plan.completion_lengths), within a max_seq_length written and no shorter than an expected length written: no
    fit solver runs on the CPU, and the schema's placeholder must never run as if written."""
    keys = ("max_completion_length", "max_seq_length")
    out, notes = [], []
    for profile in profiles:
        derived = set(getattr(profile, "derived", ()) or ()) & set(keys)
        if profile.device != "cpu" or not derived:
            out.append(Candidate(profile))
            continue
        cap = profile.max_completion_length
        if "max_completion_length" in derived:
            cap = completion_plan(profile, resolve(profile.model), measurements=measurements).cap
            if "max_seq_length" not in derived:
                cap = min(cap, profile.max_seq_length - profile.max_prompt_length)
            cap = max(cap, profile.expected_completion_length)  # 0 where the plan derives it
        changes = {"max_completion_length": cap}
        if "max_seq_length" in derived:
            changes["max_seq_length"] = max(floor_of("max_seq_length"), profile.max_prompt_length + cap)
        out.append(Candidate(profile.model_copy(update=changes)))
        done = ", ".join(f"{key}: auto -> {changes[key]}" for key in keys if key in derived)
        notes.append(f"{profile.name}: {done} (the completion the task needs; the CPU has no fit solver)")
    return out, notes


def derived_text(profile) -> str:
    """What a rung's `auto` keys became, in one line (the rung files' headers state it for their target card)."""
    prompts = profile.completions_per_step // profile.num_generations
    generator = (
        f"vLLM {profile.gpu_memory_utilization:g}"
        + (f" with {profile.vllm_max_num_seqs} sequences" if profile.vllm_max_num_seqs else "")
        + (" in standby" if profile.vllm_standby else "")
        if profile.fast_inference
        else "transformers generating"
    )
    return (
        f"{prompts} prompt(s) a step (batch {profile.per_device_train_batch_size} x accumulation "
        f"{profile.gradient_accumulation_steps}), completions up to {profile.max_completion_length} tokens, "
        f"{generator}, checkpointing {profile.gradient_checkpointing}"
    )
