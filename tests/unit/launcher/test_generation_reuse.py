"""One generation batch serving several optimizer steps (TRL's steps_per_generation): read as TRL reads it,
planned (the old policy's log-probs in memory, the generation shared out over the steps it serves, the extra
forward), valued by what updates on an older policy's completions were measured to be worth, and chosen by the
solver where that learns more per hour."""

from __future__ import annotations

import json

import pytest

from commands import main
from contract.errors import ProfileError
from launcher.memory.estimate import estimate
from launcher.plan.levers import objective
from launcher.plan.speed import predict
from launcher.plan.value import REUSE_VALUE, reuse_value
from profiles.catalog import resolve
from profiles.load import load_profile
from support.cli import REPO
from support.recipes import write
from trainer.config import grpo_config_kwargs

CPU = REPO / "profiles" / "cpu-tiny-8gen.yaml"
GPU = REPO / "profiles" / "gpu-16gb-llama3.2-3b.yaml"
L4 = ["--gpu-name", "NVIDIA L4", "--gpu-memory", "22.5"]


def test_read_as_trl_reads_it():
    profile = load_profile(CPU, ["steps_per_generation=2"])
    assert profile.updates_per_generation == 2
    assert load_profile(CPU).updates_per_generation == 1  # 0: gradient_accumulation_steps, as TRL's None
    kwargs = grpo_config_kwargs(profile, "out", device="cpu", bf16=False, use_vllm=False)
    assert kwargs["steps_per_generation"] == 2
    assert (
        grpo_config_kwargs(load_profile(CPU), "out", device="cpu", bf16=False, use_vllm=False)["steps_per_generation"]
        == load_profile(CPU).gradient_accumulation_steps
    )


def test_a_generation_straddling_optimizer_steps_is_refused():
    with pytest.raises(ProfileError, match="steps_per_generation") as info:
        load_profile(CPU, ["gradient_accumulation_steps=2", "per_device_train_batch_size=64", "steps_per_generation=3"])
    assert "multiple of 2" in info.value.fix


def test_trls_generation_batch_size_is_read_as_micro_batches(tmp_path):
    text = (
        "model_name_or_path: tiny\nuse_cpu: true\nper_device_train_batch_size: 16\nnum_generations: 8\n"
        "generation_batch_size: 64\n"
    )
    assert load_profile(write(tmp_path, "g.yaml", text)).steps_per_generation == 4
    with pytest.raises(ProfileError, match="micro-batches"):
        load_profile(write(tmp_path, "h.yaml", text.replace("64", "40")))


def test_planned_memory_and_time():
    profile = load_profile(GPU)
    arch = resolve(profile.model)
    once, reused = profile, profile.model_copy(update={"steps_per_generation": 4 * profile.gradient_accumulation_steps})
    assert "old_logprobs" not in estimate(once, arch).components
    assert estimate(reused, arch).components["old_logprobs"] > 0
    fresh, old = predict(once, arch, None), predict(reused, arch, None)
    assert old.generate_every == 4 and old.generation_s < fresh.generation_s  # a generation shared by 4 steps
    assert old.training_s > fresh.training_s  # the old policy's log-probs: one more forward
    assert objective(reused, old) == pytest.approx(
        objective(once, old) * reuse_value(4)
    )  # valued by what such updates were measured to be worth


@pytest.mark.parametrize("updates", [2, 4])
def test_a_generation_batch_is_generated_in_one_call(updates):
    # TRL generates every micro-batch a generation serves in one generate() call: without vLLM its KV cache holds
    # them all, on the CPU and on a card, in one process or in each of several
    for path, extra in ((CPU, []), (GPU, ["fast_inference=false"]), (CPU, ["num_gpus=2"])):
        once = load_profile(path, extra)
        reused = load_profile(path, [*extra, f"steps_per_generation={updates * once.gradient_accumulation_steps}"])
        assert reused.generation_batch == updates * once.generation_batch == updates * once.effective_batch
        assert reused.completions_per_step == once.completions_per_step  # what an optimizer step trains on
        arch = resolve(once.model)
        kv = estimate(once, arch).components["generate_kv_cache"]
        assert estimate(reused, arch).components["generate_kv_cache"] == pytest.approx(updates * kv)


def test_the_measured_value_is_what_the_objective_uses():
    assert REUSE_VALUE[1] == 1.0 and all(0 < v <= 1.5 for v in REUSE_VALUE.values())


def test_the_solver_chooses_it_where_it_learns_more(capsys):
    # gemma-3-1b on an L4: generation-bound; one generation serving several steps learns more per hour
    code = main(["fit", "google/gemma-3-1b-it", "--json", *L4])
    chosen = json.loads(capsys.readouterr().out)
    assert code == 0 and chosen["speed"]["generate_every"] > 1
    assert chosen["profile"]["steps_per_generation"] > chosen["profile"]["gradient_accumulation_steps"]
    pinned = main(["fit", "google/gemma-3-1b-it", "--json", *L4, "--set", "steps_per_generation=0"])
    held = json.loads(capsys.readouterr().out)
    assert pinned == 0 and held["speed"]["generate_every"] == 1
    assert chosen["learning_per_hour"] > held["learning_per_hour"]
