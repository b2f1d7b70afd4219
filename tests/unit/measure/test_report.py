"""The kit's table: predictions at exactly the shape timed, the memory read per component beside the
estimator's matching terms, and the peak compared like for like."""

from __future__ import annotations

import pytest


def _h100():
    from launcher.card.detect import GpuInfo

    return GpuInfo(
        name="NVIDIA H100 80GB HBM3",
        total_gib=79.6,
        free_gib=79.0,
        used_gib=0.6,
        compute_capability=(9, 0),
        driver="580",
        cuda_driver="13.0",
        index=0,
        source="what-if",
    )


@pytest.fixture(scope="module")
def case():
    from launcher.card.detect import Machine
    from measure.cases import plan_cases

    machine = Machine(gpus=[_h100()], message="", host_ram_gib=128.0, host_free_gib=120.0)
    return plan_cases(machine, unsloth=True, bitsandbytes=True, models=None)[0]


def test_a_timed_wave_is_predicted_at_its_own_length_not_the_tasks_expected_one(case):
    from measure.cases import predict_timed

    short = predict_timed(case["profile"], _h100(), "generation", 4, 63, 64)
    long = predict_timed(case["profile"], _h100(), "generation", 4, 63, 320)
    # decoding is per token: five times the tokens, about five times the seconds (the prefill is once)
    assert 4.5 < long / short <= 5.0
    step_short = predict_timed(case["profile"], _h100(), "training", 4, 63, 64)
    step_long = predict_timed(case["profile"], _h100(), "training", 4, 63, 320)
    assert 0 < step_short <= step_long  # launch-bound at four sequences: the launches set both


def test_constants_given_to_a_prediction_are_used_then_put_back(case):
    from launcher.plan import speed
    from measure.cases import predict_timed

    before = speed.KERNEL_LAUNCH_S
    slow = predict_timed(case["profile"], _h100(), "generation", 4, 63, 64, constants={"KERNEL_LAUNCH_S": 0.01})
    assert slow > predict_timed(case["profile"], _h100(), "generation", 4, 63, 64)
    assert speed.KERNEL_LAUNCH_S == before
    with pytest.raises(KeyError):
        with speed.constants_set({"STEP_FIXED_S": 1.0}):
            pass


def test_each_component_read_meets_its_estimated_terms_and_the_peak_is_like_for_like(case):
    from measure.report import measured_row

    timed = {
        "generation": [
            {"sequences": 4, "generations": 4, "prompt_tokens": 63, "completion_tokens": 320, "seconds": 9.2}
        ],
        "training": [{"sequences": 4, "generations": 4, "prompt_tokens": 63, "completion_tokens": 320, "seconds": 0.3}],
    }
    components = {
        "cuda_context_gib": 0.75,
        "weights_gib": 0.42,
        "lora_gib": 0.033,
        "forward_peak_gib": 0.5,
        "gradients_gib": 0.04,
        "optimizer_state_gib": 0.017,
        "generation_peak_gib": 0.02,
        "checkpointing": {"modules_checkpointing": 24},
    }
    probe = {
        "peak_gib": 3.3,
        "peak_allocated_gib": 2.4,
        "peak_reserved_gib": 2.5,
        "nvml_process_gib": 3.3,
        "held_before_gib": 0.5,
        "timed": timed,
        "components": components,
    }
    outcome = {"status": "ok", "error": None, "backend": "unsloth", "seconds": 90, "timeout_s": 240, "log_tail": None}
    row = measured_row(case, {**outcome, "probe": probe}, _h100())
    by = {c["component"]: c for c in row["component_rows"]}
    assert by["weights"]["estimate_terms"] == ["weights"] and by["weights"]["measured_gib"] == 0.42
    assert {"activations", "logits"} <= set(by["forward"]["estimate_terms"])
    assert by["cuda_context"]["measured_over_estimate"] == pytest.approx(1.0, abs=0.01)
    # the wave's KV cache is estimated at the wave's own shape: 4 sequences of 63 + 320 tokens
    from launcher.memory.parts import HALF_BYTES, generate_kv_cache
    from profiles.catalog import resolve

    kv = generate_kv_cache(resolve(case["architecture"]), 4, 383, HALF_BYTES) / float(1 << 30)
    assert by["generation"]["estimate_gib"] == pytest.approx(kv, abs=1e-4)
    # torch's peak (no context) against the estimate without it; NVML's (context in) against it with
    peak = row["peak"]
    assert peak["torch_peak_gib"] == 2.5 and row["measured_over_estimate"] == peak["torch_peak_over_estimate"]
    assert peak["estimate_with_context_gib"] - peak["estimate_without_context_gib"] == pytest.approx(0.75, abs=1e-3)
    wave = row["timed"]["generation"][0]
    assert wave["predicted_s"] > 0 and wave["measured_over_predicted"] == pytest.approx(
        9.2 / wave["predicted_s"], rel=1e-2
    )


def test_the_timed_record_carries_the_prediction_at_the_longest_shape(case):
    from measure.report import with_predictions

    entry = {"sequences": 4, "generations": 4, "prompt_tokens": 63}
    timed = with_predictions(
        case,
        {
            "generation": [
                {**entry, "completion_tokens": 64, "seconds": 1.9},
                {**entry, "completion_tokens": 320, "seconds": 9.2},
            ],
            "training": [{**entry, "completion_tokens": 320, "seconds": 0.3}],
        },
        _h100(),
    )
    predicted = timed["predicted"]
    assert (predicted["prompt_tokens"], predicted["completion_tokens"], predicted["sequences"]) == (63, 320, 4)
    assert predicted["generation_wave_s"] == timed["generation"][-1]["predicted_s"] > 0
    assert predicted["training_step_s"] == timed["training"][-1]["predicted_s"] > 0
    assert timed["measured_over_predicted"]["generation_wave_s"] == timed["generation"][-1]["measured_over_predicted"]


def test_each_unsloth_case_carries_the_shape_the_plan_decides_on_for_its_model_on_the_card():
    from launcher.card.detect import Machine
    from launcher.plan.choose import make_plan
    from launcher.plan.request import PlanRequest
    from measure.cases import PROFILES, UNSLOTH, plan_cases
    from profiles.load import load_profiles

    machine = Machine(gpus=[_h100()], message="", host_ram_gib=128.0, host_free_gib=120.0)
    cases = plan_cases(machine, unsloth=True, bitsandbytes=True, models=None)
    assert all(c["planned"] is None for c in cases if c["path"] != UNSLOTH)  # no single-GPU plan runs plain
    for case in [c for c in cases if c["path"] == UNSLOTH]:
        planned = case["planned"]
        four = case["precision"] == "4-bit"
        # what `plan --set model=X --set load_in_4bit=... --set fast_inference=false` chooses on this card
        written = [f"model={case['architecture']}", f"load_in_4bit={str(four).lower()}", "fast_inference=false"]
        rungs = load_profiles(PROFILES, written, device="cuda", refused=[])
        request = PlanRequest(rungs, machine, model=case["architecture"], pinned={"load_in_4bit", "fast_inference"})
        chosen = next(c for c in make_plan(request).candidates if c.fits).profile
        assert planned["profile"] == chosen.name and chosen.load_in_4bit == four and not chosen.fast_inference
        assert planned["micro_batch"] == chosen.per_device_train_batch_size
        assert planned["sequences"] == chosen.completions_per_step and planned["generations"] == chosen.num_generations
        # the longest of a wave and of a micro-batch, as the step-time model charges them
        assert planned["expected_tokens"] <= planned["step_tokens"] <= planned["wave_tokens"] <= planned["cap"]
        assert planned["predicted_wave_s"] > 0 and planned["predicted_step_s"] > 0
        # not the kit's launch-bound 4 sequences of 64 + 320 tokens
        assert planned["sequences"] > 4 and planned["wave_tokens"] not in (64, 320)


def test_the_plans_shape_is_predicted_in_the_table_beside_what_was_measured_and_said_in_its_page(case):
    from measure.report import markdown, with_predictions

    plan = case["planned"]
    wave = {"sequences": plan["sequences"], "generations": plan["generations"], "prompt_tokens": plan["prompt_tokens"]}
    timed = {
        "planned": {
            "plan": plan,
            "generation": [{**wave, "completion_tokens": plan["wave_tokens"], "seconds": 12.0}],
            "training_error": "OutOfMemoryError: CUDA out of memory",
        }
    }
    got = with_predictions(case, timed, _h100())["planned"]
    assert got["generation"][0]["predicted_s"] == pytest.approx(plan["predicted_wave_s"], rel=1e-3)
    assert got["generation"][0]["measured_over_predicted"] == pytest.approx(12.0 / plan["predicted_wave_s"], rel=1e-2)
    row = {
        "architecture": case["architecture"],
        "path": case["path"],
        "precision": case["precision"],
        "timed": {"planned": got},
    }
    probe = row | {"estimate": {"held_gib": 1, "step_gib": 1}, "optim": "adamw_8bit", "status": "ok"}
    page = markdown(
        {
            "card": "NVIDIA H100 80GB HBM3",
            "date": "2026-11-30",
            "device": "H100",
            "versions": {},
            "runs": [],
            "probes": [probe],
            "oom_fallback": {"status": "left out", "why": "the card's OOM runs in the product call"},
            "nvml_against_torch": [],
        }
    )
    section = page.split("## Time at the plan's shape")[1]
    assert plan["profile"] in section
    assert f"{plan['sequences']} x {plan['prompt_tokens']}, {plan['wave_tokens']}: 12.000 /" in section
    assert "OutOfMemoryError" in section  # the step that failed says why, the wave stands


def test_the_published_benchmark_reads_a_cards_table_the_plans_shape_and_the_cpu_rehearsals_too(tmp_path):
    import json
    from pathlib import Path

    from benchmarks.published_step_times import kit_lines

    gpu = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu"
    h100 = kit_lines(gpu / "nvidia-h100-80gb-hbm3.json")
    assert len(h100) == 2 + 8 and not any("at plan" in line for line in h100)  # a table from before the plan's shape
    table = json.loads((gpu / "cpu.json").read_text(encoding="utf-8"))
    timed = table["probes"][0]["timed"]
    wave = dict(timed["generation"][-1], sequences=128, completion_tokens=48, seconds=0.5)
    timed["planned"] = {"plan": {"profile": "cpu-tiny-8gen"}, "generation": [wave], "training_error": "OOM"}
    (tmp_path / "cpu.json").write_text(json.dumps(table), encoding="utf-8")
    lines = kit_lines(tmp_path / "cpu.json")  # the CPU: the default card, as the kit predicted it
    (planned,) = [line for line in lines if "at plan" in line]
    assert planned.split()[:4] == ["tiny", "at", "plan", "0.500"] and planned.rstrip().endswith("-")
