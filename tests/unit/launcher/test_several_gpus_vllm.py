"""Several GPUs keep vLLM: the share and server search works for 2-8 GPUs (TRL's colocated engine in every training
process, or a server on GPUs of its own), and no plan gives up vLLM unless vLLM fits nowhere."""

import pytest

from launcher.card.detect import detect_machine
from launcher.plan.derive import fit_for_machine
from launcher.plan.wording import nothing_fits
from profiles.load import load_profiles
from support.cli import REPO

CARDS = {24: "NVIDIA GeForce RTX 4090", 80: "NVIDIA H100 80GB HBM3"}
MODELS = (
    "Qwen/Qwen2.5-0.5B-Instruct",
    "Qwen/Qwen2.5-3B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen2.5-14B-Instruct",
)


def best(model, gib, gpus, pinned=()):
    machine = detect_machine(what_if_gib=float(gib), what_if_name=CARDS[gib], what_if_count=gpus)
    rungs = load_profiles(REPO / "profiles", [f"model={model}"], device="cuda")
    return fit_for_machine(rungs, model, machine, pinned=pinned)


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
@pytest.mark.parametrize("gib", [24, 80])
@pytest.mark.parametrize("model", MODELS)
def test_no_plan_gives_up_vllm_unless_it_fits_nowhere(model, gib, gpus):
    found = best(model, gib, gpus)
    assert found.profile is not None, nothing_fits(found.shortfall)
    if not found.profile.fast_inference:
        forced = best(model, gib, gpus, pinned={"fast_inference": True})
        assert forced.profile is None, (model, gib, gpus, forced.profile.name)


@pytest.mark.parametrize(
    "model, gib, gpus",
    [("Qwen/Qwen2.5-1.5B-Instruct", 80, 8), ("Qwen/Qwen2.5-7B-Instruct", 24, 2)],
)
def test_the_issues_machines_plan_vllm_on_every_gpu(model, gib, gpus):
    found = best(model, gib, gpus)
    p = found.profile
    assert p.fast_inference and p.gpus_needed == gpus, (p.name, p.gpus_needed)
    # TRL's colocated engine is sized as the estimate sizes it: the share holds its weights, workspace and KV
    assert found.estimate.vllm_problem is None
