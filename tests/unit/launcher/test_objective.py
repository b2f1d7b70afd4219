"""The objective (launcher.plan.value: updates per hour x P / (P + B)) and the step-time model where it decides:
generation reused as TRL reuses it (num_iterations, steps_per_generation), a mixture's experts, the plain TRL
path, several GPUs' engines side by side."""

import dataclasses
from pathlib import Path

import pytest

from launcher.card.detect import detect_machine
from launcher.card.facts import card_facts
from launcher.plan import levers, speed
from launcher.plan.ambition import ambition_of
from launcher.plan.judge import Ledger, usable_of
from launcher.plan.search import Solver
from launcher.plan.step_shape import StepShape, shape_of
from launcher.plan.value import CRITICAL_BATCH_GPU, critical_batch, learning_per_hour, update_value
from profiles.catalog import Architecture, resolve
from profiles.load import load_profile

REPO = Path(__file__).resolve().parents[3]
PROFILES = REPO / "profiles"
H100 = "NVIDIA H100 80GB HBM3"


def test_an_update_is_worth_p_over_p_plus_b():
    assert update_value(16, 16) == 0.5 and update_value(0, 16) == 0.0
    values = [update_value(p, 16) for p in (1, 2, 4, 8, 16, 32, 64)]
    assert values == sorted(values) and values[-1] < 1.0
    # twice the prompts for a tenth more time pays below B, and not far above it
    assert learning_per_hour(100, 4, 16) < learning_per_hour(90, 8, 16)
    assert learning_per_hour(100, 64, 16) > learning_per_hour(80, 128, 16)
    assert critical_batch("cuda").prompts == CRITICAL_BATCH_GPU and "estimate" in critical_batch("cuda").source
    assert "measured" in critical_batch("cpu").source


def test_the_solver_takes_the_prompts_per_step_with_the_most_learning_per_hour():
    """Every count that fits is judged: the choice is the objective's maximum over them (no early stop at a
    dip or on a flat stretch)."""
    machine = detect_machine(what_if_gib=79.6, what_if_name=H100)
    model = "Qwen/Qwen2.5-7B-Instruct"
    arch = resolve(model)
    base = load_profile(PROFILES / "gpu-80gb-qwen2.5-14b.yaml").model_copy(update={"model": model})
    amb = ambition_of(base, set(), base.name, arch)
    solver = Solver(arch, machine.primary, usable_of(machine.primary), Ledger(machine))
    found = solver.search(base.model_copy(update={"device": "cuda"}), amb)
    opts = solver.options(base, amb)
    learned = solver.learning(base, amb, opts)
    values = []
    for prompts in opts["prompts"]:
        choice = solver.best_at(base, amb, opts, learned, prompts)
        if choice is None:
            break
        values.append(choice.value)
    assert found.value == pytest.approx(max(values))
    assert found.limited_by in ("objective", "memory", "cap")


def shape(**changes):
    p = load_profile(PROFILES / "gpu-80gb-qwen2.5-14b.yaml")
    p = p.replace(
        per_device_train_batch_size=8,
        gradient_accumulation_steps=4,
        max_completion_length=768,
        max_seq_length=1024,
        gpu_memory_utilization=0.6,
    )
    machine = detect_machine(what_if_gib=79.6, what_if_name=H100)
    base = shape_of(p, resolve(p.model), machine.primary)
    return dataclasses.replace(base, **changes)


def test_num_iterations_generates_once_per_mu_steps_as_trl_does():
    """TRL generates once per num_iterations x steps_per_generation optimizer steps and trains on the batch that
    many times: the step carries 1/mu of a generation and of the old policy's forward (issue 42, cause 9)."""
    card = card_facts(H100)
    one, four = speed.step_time(shape(), card.name), speed.step_time(shape(num_iterations=4), card.name)
    assert four.step_s < one.step_s  # it was predicted longer with 4 than with 1
    assert four.generation_s == pytest.approx(one.generation_s / 4)
    assert four.generate_every == 4 and four.fresh_prompts == one.prompts / 4
    assert four.prompts_per_hour == pytest.approx(3600 * one.prompts / 4 / four.step_s)
    # the old policy's log-probs: one forward over the generation batch, a quarter of it per step
    assert shape(num_iterations=4).old_policy_forwards == 0.25 and shape().old_policy_forwards == 0.0
    assert four.training_s > one.training_s
    # steps_per_generation: one larger generation for several steps of fresh prompts
    two = speed.step_time(shape(steps_per_generation=2), card.name)
    assert two.generate_every == 2 and two.fresh_prompts == one.prompts


def test_a_profile_with_num_iterations_is_predicted_so():
    machine = detect_machine(what_if_gib=79.6, what_if_name=H100)
    p = load_profile(PROFILES / "gpu-16gb-gemma3-1b.yaml")
    arch = resolve(p.model)
    plain = speed.predict(p, arch, machine.primary)
    reused = speed.predict(p.replace(num_iterations=2), arch, machine.primary)
    assert reused.generate_every == 2 and reused.generation_s == pytest.approx(plain.generation_s / 2, rel=1e-6)


def _mixture_shape(arch: Architecture, **step) -> StepShape:
    """One prompt's group of a mixture-of-experts `arch` in 16-bit LoRA, micro-batch the whole group."""
    return StepShape(
        layers=arch.layers, hidden=arch.hidden, vocab=arch.vocab, linear_params=float(arch.linear_params),
        active_linear_params=float(arch.active_linear_params), lm_head_params=float(arch.vocab * arch.hidden),
        kv_bytes_per_token=arch.kv_bytes_per_token(2), q_dim=arch.q_dim, weight_bits=16, lora=True,
        trainable_params=1e7, checkpointing=True, prompts=1, micro_batch=step["generations"], experts=arch.experts,
        experts_per_token=arch.experts_per_token, expert_params=float(arch.expert_params), family=arch.family,
        **step,
    )  # fmt: skip


def test_a_decode_step_reads_the_experts_its_sequences_touch():
    moe = Architecture(
        "moe", 0, 2048, 24, 16, 4, 128, 0, 50000, False, "qwen3_moe", experts=64, experts_per_token=4,
        expert_intermediate=768, moe_layers=24,
    )  # fmt: skip
    s = _mixture_shape(moe, generator="vllm", generations=8, prompt_tokens=100, expected=200, cap=512)
    assert speed.experts_touched(s, 1) == pytest.approx(4)
    touched = [speed.experts_touched(s, n) for n in (1, 4, 16, 64, 1024)]
    assert touched == sorted(touched) and touched[-1] == pytest.approx(64, rel=1e-3)
    one = speed._weight_read_bytes(s, False, 1)
    many = speed._weight_read_bytes(s, True, 256)
    assert one < many  # more sequences, more experts read: up to every one of them
    dense_share = (moe.linear_params - moe.expert_params) / moe.linear_params
    assert one > dense_share * moe.linear_params * 2  # at least the dense weights and the chosen experts


def test_transformers_before_5_generates_gpt_oss_through_every_expert():
    """transformers 4.55-4.57 ran gpt-oss's experts outside training as one matmul over all of them: a decode step
    reads and computes all 32 experts, not the 4 a token routes to; from 5 on, and in vLLM, it routes."""
    from launcher.plan.step_shape import every_expert_generates

    assert every_expert_generates("gpt_oss", "transformers", 4)
    assert not every_expert_generates("gpt_oss", "transformers", 5)
    assert not every_expert_generates("gpt_oss", "vllm", 4)
    assert not every_expert_generates("gpt_oss", "transformers", None)  # not installed: today's library
    assert not every_expert_generates("qwen3_moe", "transformers", 4)
    arch = Architecture(
        "gpt-oss", 0, 2880, 24, 64, 8, 64, 0, 201088, False, "gpt_oss", experts=32, experts_per_token=4,
        expert_intermediate=2880, moe_layers=24,
    )  # fmt: skip
    s = _mixture_shape(arch, generator="transformers", generations=2, prompt_tokens=50, expected=600, cap=700)
    card = card_facts(H100)
    routed = speed.generation_time(s, card)[0]
    dense = speed.generation_time(dataclasses.replace(s, every_expert=True), card)[0]
    # two sequences touch at most 8 of 32 experts: all 32 read at least 4x the experts' bytes (beside the same
    # launches and attention)
    assert dense > 1.3 * routed
    # vLLM routes whatever the flag says of transformers
    vllm = dataclasses.replace(s, generator="vllm")
    flagged = dataclasses.replace(vllm, every_expert=True)
    assert speed.generation_time(flagged, card)[0] == speed.generation_time(vllm, card)[0]


def test_plain_trl_generates_and_trains_slower_than_unsloth():
    card = card_facts(H100)
    hf = shape(generator="transformers")
    unsloth = speed.generation_time(hf, card)[0]
    plain = speed.generation_time(dataclasses.replace(hf, plain=True), card)[0]
    assert plain > 1.5 * unsloth
    assert speed.training_time(dataclasses.replace(hf, plain=True), card) == pytest.approx(
        speed.PLAIN_TRAINING_SLOWDOWN * speed.training_time(hf, card)
    )


def test_engines_side_by_side_each_generate_their_share():
    card = card_facts(H100)
    one = speed.generation_time(shape(world=8), card)[0]
    eight = speed.generation_time(shape(world=8, vllm_engines=8), card)[0]
    assert eight < one


def test_the_fitted_constants_stay_settable_for_the_refit():
    assert set(speed.FITTED_CONSTANTS) <= set(vars(speed))
    before = speed.KERNEL_LAUNCH_S
    with speed.constants_set({"KERNEL_LAUNCH_S": 0.002}):
        assert speed.KERNEL_LAUNCH_S == 0.002
    assert speed.KERNEL_LAUNCH_S == before
    assert levers.OBJECTIVE.startswith("learning per hour")
