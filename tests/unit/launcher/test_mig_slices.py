"""A MIG slice is planned as the slice it is, not as the whole card: its share of the card's compute and
bandwidth (the step-time model), and with `--gpu-name` alone, the memory its profile names."""

import json

import pytest

from commands import main
from contract.errors import EXIT_BAD_INPUT
from launcher.card.detect import detect_machine
from launcher.card.facts import card_facts
from launcher.plan.speed import step_time
from launcher.plan.step_shape import StepShape
from support.fake_nvml import FakeNvml

GIB = 1024**3
H100 = card_facts("NVIDIA H100 80GB HBM3")


def test_a_1g_slice_of_an_h100_has_a_seventh_of_its_compute_and_its_own_memory():
    mig = card_facts("NVIDIA H100 80GB HBM3 MIG 1g.10gb")
    assert mig is not None and mig.known and "MIG 1g.10gb" in mig.name
    assert mig.tflops_16bit == pytest.approx(H100.tflops_16bit / 7)
    assert mig.bandwidth_gb_s <= H100.bandwidth_gb_s / 8 * 1.01  # its 1 of 8 memory slices, at most
    assert mig.memory_gib == pytest.approx(10e9 / GIB, abs=0.01)  # not the card's 79.65
    assert mig.capability == H100.capability


def _shape(**changes) -> StepShape:
    values = dict(
        layers=28,
        hidden=3584,
        vocab=152064,
        linear_params=7e9,
        active_linear_params=7e9,
        lm_head_params=152064 * 3584.0,
        kv_bytes_per_token=57344.0,
        q_dim=3584,
        weight_bits=4,
        lora=True,
        trainable_params=4e7,
        checkpointing=True,
        generator="vllm",
        prompts=8,
        generations=8,
        micro_batch=4,
        prompt_tokens=130,
        expected=200,
        cap=640,
        max_num_seqs=64,
        kv_tokens=None,
    )
    values.update(changes)
    return StepShape(**values)


def test_a_slice_is_timed_as_its_share_not_as_the_whole_card():
    whole = step_time(_shape(), "NVIDIA H100 80GB HBM3", 79.65)
    sliced = step_time(_shape(), "NVIDIA H100 80GB HBM3 MIG 1g.10gb", 9.75)
    assert sliced.card_known and "MIG" in sliced.card
    assert sliced.step_s > 4 * whole.step_s  # was the whole card's: about 7 times too fast


def test_gpu_name_alone_plans_for_the_slices_memory(capsys):
    code = main(["plan", "--gpu-name", "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "--ignore-ledger", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["gpu"]["total_gib"] == pytest.approx(9.31, abs=0.01)  # was 79.65, the whole card's
    assert any("its MIG profile's" in note for note in out["notes"])
    chosen = next(c for c in out["candidates"] if c["profile"] == out["chosen"])
    assert "MIG 1g.10gb" in chosen["speed"]["card"]


class MigNvml(FakeNvml):
    """An H100 in MIG mode, cut into one 1g.10gb slice, as NVML names it."""

    SLICE = {"name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "uuid": "MIG-aaaa", "total": 9.75 * GIB, "free": 9.5 * GIB}

    def nvmlDeviceGetMigMode(self, handle):
        return 1, 1

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return 1

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index):
        return self.SLICE


def test_a_slice_nvml_reports_is_timed_as_the_slice():
    card = {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "total": 79.65 * GIB, "free": 79 * GIB, "cc": (9, 0)}
    gpu = detect_machine(nvml=MigNvml([card])).primary
    assert gpu.total_gib == pytest.approx(9.75)
    facts = card_facts(gpu.name, gpu.total_gib)
    assert facts.tflops_16bit == pytest.approx(H100.tflops_16bit / 7)


@pytest.mark.parametrize(
    "name, card, compute_share, gib",
    [
        ("A100 MIG 1g.10gb", "NVIDIA A100-SXM4-80GB", 1 / 7, 9.31),  # a 10 GB 1g slice: the 80 GB card's
        ("A100 MIG 1g.5gb", "NVIDIA A100-SXM4-40GB", 1 / 7, 4.66),
        ("NVIDIA A30 MIG 2g.12gb", "NVIDIA A30", 2 / 4, 11.18),  # the A30 is cut into 4
        ("NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb", "NVIDIA H100 80GB HBM3", 1 / 7, 37.25),  # 1 compute slice of 3
        ("NVIDIA H200 MIG 1g.18gb+me", "NVIDIA H200", 1 / 7, 16.76),
        ("nvidia h100 80gb hbm3 ｍｉｇ 7g.80gb", "NVIDIA H100 80GB HBM3", 1.0, 74.51),  # full-width, lower case
        ("H100 MIG1g.10gb", "NVIDIA H100 80GB HBM3", 1 / 7, 9.31),  # run together
        ("NVIDIA H100 80GB HBM3 MIG-1g.10gb", "NVIDIA H100 80GB HBM3", 1 / 7, 9.31),
    ],
)
def test_slices_however_named_are_their_cards_share(name, card, compute_share, gib):
    mig, whole = card_facts(name), card_facts(card)
    assert mig is not None and mig.name.startswith(whole.name)
    assert mig.tflops_16bit == pytest.approx(whole.tflops_16bit * compute_share)
    assert mig.memory_gib == pytest.approx(gib, abs=0.01)
    assert mig.bandwidth_gb_s <= whole.bandwidth_gb_s


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA H100 80GB HBM3 MIG",  # which slice is not said
        "MIG 1g.10gb",  # of which card is not said
        "NVIDIA H100 80GB HBM3 MIG 0g.10gb",
        "NVIDIA H100 80GB HBM3 MIG 1g.0gb",
        "NVIDIA H100 80GB HBM3 MIG 8g.80gb",  # more slices than the card has
        "NVIDIA A30 MIG 7g.24gb",
        "NVIDIA H100 80GB HBM3 MIG 4c.3g.40gb",  # more compute slices than its instance
        "NVIDIA H100 80GB HBM3 MIG 1g.999999999999999999999gb",  # more memory than the card
        "NVIDIA Quantum X9000 MIG 1g.10gb",  # a card the table does not know
    ],
)
def test_a_slice_that_cannot_be_read_is_a_card_the_table_does_not_know(name):
    assert card_facts(name) is None  # timed at the default speed (errs long), never as the whole card


def test_gpu_name_of_an_unreadable_slice_alone_exits_2_naming_the_fix(capsys):
    assert main(["plan", "--gpu-name", "H100 MIG", "--json"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "--gpu-name" in err and "MIG" in err and "--gpu-memory" in err and "1g.10gb" in err


def test_gpu_memory_beside_a_slice_is_planned_as_asked_with_a_note(capsys):
    code = main(["plan", "--gpu-name", "H100 MIG 1g.10gb", "--gpu-memory", "80", "--ignore-ledger", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["gpu"]["total_gib"] == 80
    assert any("planning for 80 GiB as --gpu-memory says" in note for note in out["notes"])
