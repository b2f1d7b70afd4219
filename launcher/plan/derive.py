"""WHICH configurations a model of the user's gets: the fit solver (launcher.plan.solve) from every shipped rung's
intent (`--fit`, and `--auto --set model=...`, whose ladder they become), and with several GPUs the same search
over the ways to split them (data parallel with vLLM colocated, or training beside a vLLM server)."""

from __future__ import annotations

from contract.errors import UsageError

from contract.errors import ProfileError
from launcher.card.detect import GpuInfo
from launcher.plan.solve import SINGLE_GPU, Fit, Solver, ambition_of, fit, quality_key, usable_of
from profiles.catalog import catalogue_key, resolve


def best_fit(rungs, model: str, gpu: GpuInfo, *, pinned=(), machine=None, measurements=None) -> list[Fit]:
    """The solver from every single-GPU rung's intent for `model`: the fits, most ambitious first (those
    that found nothing last). `pinned`: the keys the user set, or a dict of them with their values, put into
    each rung before its intent is read (a rung need not be valid with them: the solver reshapes the batch)."""
    arch = resolve(model)
    values = dict(pinned) if isinstance(pinned, dict) else {}
    fits = []
    for rung in rungs:
        if rung.device != "cuda" or rung.gpus_needed != 1:
            continue
        base = rung.model_copy(update={**values, "model": model})
        fits.append(fit(base, gpu, arch=arch, ambition=ambition_of(base, set(pinned), rung.name),
                        machine=machine, measurements=measurements))
    return sorted(fits, key=lambda f: (f.profile is not None,
                                       quality_key(f.profile) if f.profile is not None else ()), reverse=True)


def _own_model(rung, load_profile) -> str | None:
    """The catalogue key of the model a rung's file was written for (before any --set), None when unreadable."""
    path = rung.source.split(" with --set")[0]  # profiles.load names an overridden source so
    try:
        return catalogue_key(load_profile(path).model) if path else None
    except Exception:  # noqa: BLE001 - a rung that cannot be re-read is simply not kept as written
        return None


def derive_ladder(profiles, model: str, machine, *, pinned=(), measurements=None) -> tuple[list, list[str]]:
    """The ladder for a model of the user's (`--auto --set model=...`): a rung written for that model that fits
    as written (its GPUs there) is kept; every single-GPU rung's intent becomes an ambition the solver
    derives a configuration from, and with several GPUs the best of those intents is also spread over them
    (data parallel, or beside a vLLM server). Multi-GPU rungs of other models give way to that search. All are
    ordered from the most ambitious (ladder 100 on); identical derivations appear once.
    Returns (profiles, notes for the plan)."""
    from profiles.load import load_profile

    gpu = machine.primary
    arch = resolve(model)
    cuda = [p for p in profiles if p.device == "cuda"]
    others = [p for p in profiles if p.device != "cuda"]
    if gpu is None or not any(p.gpus_needed == 1 for p in cuda):
        return profiles, []
    solver = Solver(arch, gpu, usable_of(gpu), machine, measurements)
    chosen: dict[str, object] = {}
    kept, failed, refused = [], [], []
    best_rung, best_key, best_result = None, None, None
    for rung in cuda:
        own = _own_model(rung, load_profile)
        runnable = rung
        if solver.vllm_refused and rung.fast_inference and not rung.uses_vllm_server:
            runnable = rung.model_copy(update={"fast_inference": False, "vllm_standby": False})
        if own == catalogue_key(model) and rung.gpus_needed <= len(machine.gpus) and solver.fits(runnable):
            chosen.setdefault(rung.name, rung)
            kept.append(rung.name)  # and still derived from: its intent may fit better than as written
        if rung.gpus_needed != 1:
            continue
        try:
            result = fit(rung, gpu, arch=arch, ambition=ambition_of(rung, pinned, rung.name), machine=machine,
                         measurements=measurements)
        except ProfileError as exc:  # a pinned key the derived shape cannot take: that rung gives nothing
            failed.append(str(exc))
            refused.append(str(exc))
            continue
        if result.profile is None:
            failed.append(result.reason)
            continue
        same = chosen.get(result.profile.name)  # one name per shape: keep its most ambitious batch and share
        if same is None or quality_key(result.profile) > quality_key(same):
            chosen[result.profile.name] = result.profile
        if best_key is None or quality_key(result.profile) > best_key:
            best_rung, best_key, best_result = rung, quality_key(result.profile), result
    if best_rung is not None and len(machine.gpus) > 1:  # --gpus N: the same search over the GPUs' splits
        spread = fit_gpus(best_rung, model, machine, pinned=pinned, measurements=measurements)
        if spread is not None:
            chosen.setdefault(spread.profile.name, spread.profile)
    if not chosen and failed and len(refused) == len(failed):
        # every derivation refused, none for memory: the shipped rungs as written (sized for other cards, an
        # 80 GB rung on a 16 GiB card) are no answer for this model; say why instead
        raise UsageError(f"--set model={model}: the fit solver could derive no configuration for this card; "
                         f"every rung's derivation was refused, the first: {refused[0]}")
    if not chosen:  # the rungs as the user set them, with their verdicts, and why nothing could be derived
        return profiles, [f"fit solver for {arch.name}: {failed[0]}"] if failed else []
    ordered = sorted(chosen.values(), key=quality_key, reverse=True)
    derived = [p.replace(ladder=100 + i) for i, p in enumerate(ordered)]
    notes = [f"fit solver: {len(derived)} configuration(s) of {arch.name} for this machine, most ambitious first "
             f"(derived from the rungs' intents" + (f"; kept as written: {', '.join(kept)}" if kept else "") + ")"]
    if best_result is not None and best_result.given_up:
        notes.append(f"fit solver: the full ambition ({best_result.ambition.text()}) needs "
                     f"{best_result.ambition_need_gib:.2f} GiB, {best_result.usable_gib:.2f} usable here (a card of "
                     f"{best_result.card_for_ambition_gib:.1f} GiB would hold it); given up: "
                     + "; ".join(g.text() for g in best_result.given_up))
    return others + derived, notes


# ---------------------------------------------------------------------------------------------------
# More than one GPU (--gpus N)

def topologies(gpus: int) -> list[dict]:
    """Every way to use up to `gpus` GPUs: data parallel over 1..N with vLLM colocated in each process, or
    N - s training GPUs beside a vLLM server on s GPUs (tensor parallel over a power of two dividing s)."""
    out = [dict(SINGLE_GPU, num_gpus=world) for world in range(gpus, 0, -1)]
    for servers in range(1, gpus):
        tp = 1
        while tp <= servers:
            if servers % tp == 0:
                out.append({"num_gpus": gpus - servers, "vllm_mode": "server", "vllm_server_gpus": servers,
                            "vllm_tensor_parallel": tp})
            tp *= 2
    return out


def candidate_topologies(gpus: int) -> list[dict]:
    """The topologies of `topologies(gpus)` that can be the best, so that the search costs O(log N) fits
    instead of O(N log N) (4,096 GPUs took minutes). A training GPU's configuration does not depend on how
    many others train beside it (two or more: the same DDP shares per GPU), and the objective grows with
    their number: data parallel over all N GPUs dominates 2..N-1, one GPU stays (no collectives). A vLLM
    server GPU holds 1/tp of the model whatever the number of copies: s = tp server GPUs fit whenever any
    multiple of tp does, and leave the most GPUs to train. tests/test_fit_scale.py checks this against the
    whole search."""
    out = [dict(SINGLE_GPU, num_gpus=world) for world in sorted({gpus, 1}, reverse=True)]
    tp = 1
    while tp < gpus:
        out.append({"num_gpus": gpus - tp, "vllm_mode": "server", "vllm_server_gpus": tp, "vllm_tensor_parallel": tp})
        tp *= 2
    return out


def fit_gpus(rung, model: str, machine, *, pinned=(), measurements=None) -> Fit | None:
    """The most ambitious configuration of `model` over the machine's GPUs (their smallest card counts), from
    `rung`'s intent: the solver on every topology, the best by the objective (completion tokens per optimizer
    step over every training GPU). None with fewer than two GPUs."""
    if len(machine.gpus) < 2:
        return None
    arch = resolve(model)
    gpu = min(machine.gpus, key=lambda g: g.free_gib)
    values = dict(pinned) if isinstance(pinned, dict) else {}
    base = rung.model_copy(update={**values, "model": model})
    amb = ambition_of(base, set(pinned), rung.name)
    found = []
    for topology in candidate_topologies(len(machine.gpus)):
        try:
            found.append(fit(base, gpu, arch=arch, ambition=amb, machine=machine, measurements=measurements,
                             topology=topology))
        except ProfileError:  # a pinned key this split cannot take (e.g. standby on accelerate)
            continue
    fitting = [f for f in found if f.profile is not None]
    if not fitting:
        return None
    return max(fitting, key=lambda f: quality_key(f.profile))


def fit_for_machine(rungs, model: str, machine, *, pinned=(), measurements=None):
    """The most ambitious configuration of `model` for the machine's card(s), from every rung's intent: one
    GPU's best, or, with several GPUs, the data-parallel spread when it is of higher quality."""
    gpu = machine.primary
    if gpu is None:
        raise UsageError("--fit needs a card to fit: none was found (fix: add --gpu-memory GIB)")
    results = best_fit(rungs, model, gpu, pinned=pinned, machine=machine, measurements=measurements)
    if not results:
        raise UsageError("--fit: no single-GPU cuda profile in the ladder to take an ambition from "
                         "(fix: --profiles-dir with gpu-*.yaml)")
    best = results[0]
    if best.profile is not None and len(machine.gpus) > 1:  # --gpus N: data parallel and the vLLM server too
        rung = next(r for r in rungs if r.name == best.ambition.source)
        spread = fit_gpus(rung, model, machine, pinned=pinned, measurements=measurements)
        if spread is not None and quality_key(spread.profile) > quality_key(best.profile):
            best = spread
    return best
