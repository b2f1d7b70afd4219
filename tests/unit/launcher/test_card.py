"""launcher.card.detect: reading GPUs through a fake NVML (same call names as pynvml), CUDA_VISIBLE_DEVICES, what-if."""

import pytest

from launcher.card.detect import bf16_supported, detect_machine, visible_selection
from support.fake_nvml import FakeNvml

GIB = 1024**3


T4 = {"name": "Tesla T4", "uuid": "GPU-aaaa1111-0000", "total": 15360 * 2**20, "free": 14930 * 2**20, "cc": (7, 5)}
A100 = {
    "name": b"NVIDIA A100-SXM4-80GB",
    "uuid": "GPU-bbbb2222-0000",
    "total": 80 * GIB,
    "free": 60 * GIB,
    "cc": (8, 0),
}


@pytest.fixture(autouse=True)
def _no_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_one_gpu_is_read_with_every_field():
    nvml = FakeNvml([T4])
    machine = detect_machine(nvml=nvml)
    assert machine.device == "cuda"
    gpu = machine.primary
    assert gpu.name == "Tesla T4"
    assert gpu.total_gib == 15.0
    assert gpu.free_gib == pytest.approx(14930 / 1024)
    assert gpu.used_gib == pytest.approx(430 / 1024)
    assert gpu.compute_capability == (7, 5)
    assert gpu.driver == "550.54.15"
    assert gpu.cuda_driver == "12.4"
    assert (gpu.index, gpu.source, gpu.uuid) == (0, "nvml", "GPU-aaaa1111-0000")
    assert not bf16_supported(gpu)
    assert machine.message == (
        "GPU 0: Tesla T4, 14.6 of 15.0 GiB free, fp16 (compute capability 7.5 < 8.0: "
        "no bf16), driver 550.54.15 (CUDA 12.4)"
    )
    assert nvml.shut_down


def test_two_gpus_plan_for_the_first_and_say_so():
    machine = detect_machine(nvml=FakeNvml([A100, T4]))
    assert [g.name for g in machine.gpus] == ["NVIDIA A100-SXM4-80GB", "Tesla T4"]  # bytes names decoded
    assert [g.index for g in machine.gpus] == [0, 1]
    assert machine.primary.total_gib == 80.0 and machine.primary.free_gib == 60.0
    assert bf16_supported(machine.primary)
    assert "2 GPUs visible; planning for GPU 0 (Unsloth trains on one device)" in machine.notes


def test_no_driver_plans_for_the_cpu_in_one_plain_line():
    machine = detect_machine(nvml=FakeNvml(driver_missing=True))
    assert machine.device == "cpu"
    assert machine.primary is None and machine.gpus == []
    assert machine.message == "no NVIDIA driver found: planning for the CPU ladder"
    assert machine.host_ram_gib > 0


def test_driver_without_gpus_plans_for_the_cpu():
    machine = detect_machine(nvml=FakeNvml([]))
    assert machine.device == "cpu"
    assert machine.message == "the NVIDIA driver reports no GPU: planning for the CPU ladder"


def test_real_pynvml_on_this_machine_answers_without_raising():
    machine = detect_machine()
    if machine.gpus:
        assert machine.primary.source == "nvml"
    else:
        assert machine.message.endswith("planning for the CPU ladder")


@pytest.mark.parametrize(
    "value, expected",
    [
        ("1", ["Tesla T4"]),
        ("1,0", ["Tesla T4", "NVIDIA A100-SXM4-80GB"]),
        ("GPU-bbbb2222-0000", ["NVIDIA A100-SXM4-80GB"]),
        ("GPU-aaaa", ["Tesla T4"]),  # a unique UUID prefix, as CUDA accepts
        ("0,7,1", ["NVIDIA A100-SXM4-80GB"]),  # CUDA stops at the first entry naming no device
        ("0,0", ["NVIDIA A100-SXM4-80GB"]),  # a repeated device ends the list too
    ],
)
def test_cuda_visible_devices_by_index_and_uuid(monkeypatch, value, expected):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    machine = detect_machine(nvml=FakeNvml([A100, T4]))
    assert [g.name for g in machine.gpus] == expected
    assert [g.index for g in machine.gpus] == list(range(len(expected)))  # renumbered as CUDA does
    assert any(n.startswith(f"CUDA_VISIBLE_DEVICES={value}:") for n in machine.notes)


@pytest.mark.parametrize("value", ["", "-1", "GPU-ffff"])
def test_cuda_visible_devices_hiding_every_gpu_means_cpu(monkeypatch, value):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    machine = detect_machine(nvml=FakeNvml([A100, T4]))
    assert machine.device == "cpu"
    assert machine.message.endswith("no GPU visible: planning for the CPU ladder")


def test_visible_selection_parsing():
    assert visible_selection(None) is None
    assert visible_selection("") == []
    assert visible_selection(" 2, 0 ,") == ["2", "0"]


def test_what_if_card_is_all_free_and_ignores_the_driver():
    machine = detect_machine(what_if_gib=24, what_if_name="RTX 4090", nvml=FakeNvml(driver_missing=True))
    gpu = machine.primary
    assert (gpu.name, gpu.total_gib, gpu.free_gib, gpu.used_gib, gpu.source) == ("RTX 4090", 24.0, 24.0, 0.0, "what-if")
    assert machine.device == "cuda"
    assert detect_machine(what_if_gib=12.5).primary.name == "12.5 GiB card"


@pytest.mark.parametrize("cc, expected", [((7, 5), False), ((8, 0), True), ((9, 0), True), (None, True)])
def test_bf16_needs_compute_capability_8(cc, expected):
    machine = detect_machine(nvml=FakeNvml([dict(T4, cc=cc)]))
    assert bf16_supported(machine.primary) is expected
    assert bf16_supported(None) is False


# ---------------------------------------------------------------------------------------------------
# Cards the plan used to misread: MIG slices, CUDA's own device order, capabilities the CUDA 13 builds lack


class MigNvml(FakeNvml):
    """An A100 80GB in MIG mode with two 3g.40gb slices, beside a plain T4."""

    SLICES = [
        {"name": "MIG 3g.40gb", "uuid": "MIG-1111aaaa-0000", "total": 39 * GIB, "free": 38 * GIB},
        {"name": "MIG 3g.40gb", "uuid": "MIG-2222bbbb-0000", "total": 39 * GIB, "free": 30 * GIB},
    ]

    def nvmlDeviceGetMigMode(self, handle):
        if handle is A100:
            return 1, 1
        raise self.NVMLError("Not Supported")

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index):
        if index >= len(self.SLICES):
            raise self.NVMLError("Not Found")
        return self.SLICES[index]

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        if handle in self.SLICES:
            raise self.NVMLError("Not Supported")
        return handle["cc"]


def test_a_mig_slice_named_in_cuda_visible_devices_is_planned_with_its_own_memory(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-2222bbbb-0000")
    machine = detect_machine(nvml=MigNvml([A100, T4]))
    assert machine.device == "cuda" and len(machine.gpus) == 1
    gpu = machine.primary
    assert (gpu.total_gib, gpu.free_gib) == (39.0, 30.0)  # the slice's, not the parent's 80 GiB
    assert gpu.compute_capability == (8, 0)  # the parent's
    assert "MIG" in gpu.name


def test_a_gpu_in_mig_mode_shows_its_slices_not_itself():
    machine = detect_machine(nvml=MigNvml([A100, T4]))
    assert [g.total_gib for g in machine.gpus] == [39.0, 39.0, 15.0]


def test_cards_below_turing_are_not_planned_for():
    v100 = {
        "name": "Tesla V100-SXM2-16GB",
        "uuid": "GPU-cccc3333-0000",
        "total": 16 * GIB,
        "free": 15 * GIB,
        "cc": (7, 0),
    }
    machine = detect_machine(nvml=FakeNvml([v100]))
    assert machine.device == "cpu"
    assert "compute capability 7.0" in machine.message and "7.5" in machine.message


def test_a_cuda_order_other_than_nvmls_on_mixed_cards_is_named(monkeypatch):
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    machine = detect_machine(nvml=FakeNvml([T4, A100]))
    assert any("CUDA_DEVICE_ORDER=FASTEST_FIRST" in note and "PCI_BUS_ID" in note for note in machine.notes)


def test_attempts_number_gpus_as_nvml_does():
    from contract.attempt import attempt_environment
    from profiles.load import load_profile

    profile = load_profile("profiles/gpu-24gb-llama3.1-8b.yaml")
    assert attempt_environment(profile, base={})["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert (
        attempt_environment(profile, base={"CUDA_DEVICE_ORDER": "FASTEST_FIRST"})["CUDA_DEVICE_ORDER"]
        == "FASTEST_FIRST"
    )  # a user's explicit choice is kept (the plan names it)
