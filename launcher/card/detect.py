"""WHERE training can run: the GPUs NVML reports (or a card named with --gpu-memory), else the CPU.

Reads memory through NVML (package nvidia-ml-py, module `pynvml`), which needs only the driver: no torch,
no CUDA runtime, so planning is instant on any machine. `detect_machine(nvml=...)` takes any object with pynvml's
call names, which is how the tests stand in for a driver.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import psutil

from contract.attempt import BF16_MIN_CAPABILITY, bf16_capable
from contract.errors import UsageError

GIB = 1024**3

# torch 2.13 and vLLM 0.32 are CUDA 13 builds, whose kernels start at Turing (compute capability 7.5)
MIN_CAPABILITY = (7, 5)
# CUDA numbers devices fastest first unless told otherwise; NVML numbers them by PCI bus. Attempts run with
# PCI_BUS_ID (contract.attempt) so that an index means the same card to both.
CUDA_ORDER = "PCI_BUS_ID"


@dataclass
class GpuInfo:
    name: str
    total_gib: float
    free_gib: float
    used_gib: float
    compute_capability: tuple | None
    driver: str | None
    cuda_driver: str | None
    index: int
    source: str  # "nvml", "what-if" or "none"
    uuid: str | None = None


@dataclass
class Machine:
    gpus: list[GpuInfo]
    message: str
    host_ram_gib: float
    host_free_gib: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def primary(self) -> GpuInfo | None:
        """The card a run trains on: the first visible one (Unsloth trains on a single device)."""
        return self.gpus[0] if self.gpus else None

    @property
    def device(self) -> str:
        return "cuda" if self.gpus else "cpu"


def bf16_supported(gpu: GpuInfo | None) -> bool:
    """True when the card can train in bf16 (contract.attempt.bf16_capable); no card: False."""
    return gpu is not None and bf16_capable(gpu.compute_capability)


def precision_text(gpu: GpuInfo | None) -> str:
    if gpu is None:
        return "fp32 (CPU)"
    if gpu.compute_capability is None:
        return "bf16 assumed (capability unknown)"
    cc = ".".join(map(str, gpu.compute_capability))
    return (
        f"bf16 (compute capability {cc})"
        if bf16_supported(gpu)
        else f"fp16 (compute capability {cc} < {'.'.join(map(str, BF16_MIN_CAPABILITY))}: no bf16)"
    )


# ---------------------------------------------------------------------------------------------------
# A named what-if card's compute capability


def known_capability(name: str | None, memory_gib: float | None = None) -> tuple[int, int] | None:
    """The compute capability of a card known by name to the card table (launcher.card.facts: "Tesla T4" ->
    (7, 5)); None for a name it does not list. A what-if card (--gpu-name) has no driver to ask: its name
    decides whether it has bfloat16, which models vLLM serves on it, and whether the image runs on it at all."""
    from launcher.card.facts import card_facts

    card = card_facts(name, memory_gib)
    return card.capability if card is not None else None


def below_minimum(name: str, capability) -> str | None:
    """Why the image cannot train on a card of this capability (CUDA 13 has no kernels below Turing), else None."""
    if capability is None or tuple(capability) >= MIN_CAPABILITY:
        return None
    cc = ".".join(map(str, capability))
    return (
        f"{name} has compute capability {cc}; the CUDA 13 builds of torch and vLLM need "
        f"{'.'.join(map(str, MIN_CAPABILITY))} or newer (Turing)"
    )


# ---------------------------------------------------------------------------------------------------
# Host memory


def host_memory_gib() -> tuple[float, float]:
    """(total, available) host RAM in GiB; (0, 0) where the system will not say."""
    try:
        memory = psutil.virtual_memory()
    except (OSError, RuntimeError):
        return 0.0, 0.0
    return memory.total / GIB, (memory.available or memory.total) / GIB


# ---------------------------------------------------------------------------------------------------
# CUDA_VISIBLE_DEVICES


def visible_selection(value: str | None) -> list[str] | None:
    """The entries of CUDA_VISIBLE_DEVICES, or None when it is unset (every device visible).

    CUDA stops reading the list at the first entry that names no device, and an empty value or "-1"
    hides every device; the same reading is applied here against NVML's list.
    """
    if value is None:
        return None
    return [item.strip() for item in value.split(",") if item.strip()]


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _select(devices: list[dict], selection: list[str] | None) -> tuple[list[dict], str | None]:
    """Map CUDA_VISIBLE_DEVICES onto NVML's devices; returns (visible in CUDA order, a note or None)."""
    if selection is None:
        return devices, None
    chosen: list[dict] = []
    for item in selection:
        match = None
        if item.lstrip("-").isdigit():
            number = int(item)
            if 0 <= number < len(devices):
                match = devices[number]
        else:
            # UUIDs may be given in full ("GPU-8f2c...") or by a unique prefix, as CUDA allows.
            hits = [d for d in devices if d["uuid"] and d["uuid"].lower().startswith(item.lower())]
            if len(hits) == 1:
                match = hits[0]
        if match is None or match in chosen:
            break  # CUDA ignores this entry and everything after it
        chosen.append(match)
    note = f"CUDA_VISIBLE_DEVICES={','.join(selection) or '(empty)'}: {len(chosen)} of {len(devices)} GPUs visible"
    return chosen, note


# ---------------------------------------------------------------------------------------------------
# Reading the machine


def _read_nvml(nvml) -> tuple[list[dict], str | None, str | None]:
    driver = cuda_driver = None
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
    except Exception:  # noqa: BLE001 - an optional field; any NVML failure leaves it unknown
        pass
    try:
        version = int(nvml.nvmlSystemGetCudaDriverVersion())
        cuda_driver = f"{version // 1000}.{version % 1000 // 10}"
    except Exception:  # noqa: BLE001
        pass
    devices = []
    for index in range(int(nvml.nvmlDeviceGetCount())):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        device = _device(nvml, handle, index)
        slices = _mig_slices(nvml, handle, device)
        # a GPU in MIG mode computes only through its slices: CUDA lists those instead of the GPU
        devices.extend(slices if slices is not None else [device])
    return devices, driver, cuda_driver


def _device(nvml, handle, index: int, capability=None) -> dict:
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    if capability is None:
        try:
            capability = tuple(int(x) for x in nvml.nvmlDeviceGetCudaComputeCapability(handle))
        except Exception:  # noqa: BLE001
            capability = None
    try:
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    except Exception:  # noqa: BLE001
        uuid = None
    return {
        "nvml_index": index,
        "name": _text(nvml.nvmlDeviceGetName(handle)),
        "total": memory.total / GIB,
        "free": memory.free / GIB,
        "used": memory.used / GIB,
        "capability": capability,
        "uuid": uuid,
    }


def _mig_slices(nvml, handle, parent: dict) -> list[dict] | None:
    """The MIG instances of a GPU in MIG mode (each with its own memory and a "MIG-..." UUID), or None when
    the GPU is not in MIG mode (or the driver cannot say)."""
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except Exception:  # noqa: BLE001 - no MIG support on this card or driver
        return None
    if int(current) != 1:
        return None
    slices = []
    try:
        count = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
    except Exception:  # noqa: BLE001
        return []
    for slot in range(count):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except Exception:  # noqa: BLE001 - an empty slot
            continue
        device = _device(nvml, mig, parent["nvml_index"], capability=parent["capability"])
        device["name"] = f"{parent['name']} MIG {device['name']}" if "MIG" not in device["name"] else device["name"]
        slices.append(device)
    return slices


def detect_machine(
    what_if_gib: float | None = None, what_if_name: str | None = None, nvml=None, what_if_count: int | None = None
) -> Machine:
    """Read the machine. `what_if_gib` plans for a card of that size instead (free = total);
    `what_if_count` (--gpus N) plans for N such cards, or for the first N of the GPUs found. A what-if card
    named like a known one (`what_if_name`) gets its compute capability; any other: unknown, bf16 assumed."""
    if what_if_count is not None and what_if_count < 1:
        raise UsageError(f"--gpus {what_if_count}: must be 1 or more")
    host_total, host_free = host_memory_gib()
    if what_if_gib is not None:
        from launcher.card.facts import card_facts

        card = card_facts(what_if_name, what_if_gib)
        name = (
            what_if_name or f"{what_if_gib:g} GiB card"
        )  # as typed (plan --json's gpu.name); the notes say the table's
        count = what_if_count or 1
        capability = card.capability if card is not None else None
        refusal = below_minimum(name, capability)
        if refusal:  # as when NVML reports such a card: nothing of the GPU ladder can run on it
            return Machine([], f"GPU 0 (what-if): {refusal}: planning for the CPU ladder", host_total, host_free)
        gpus = [
            GpuInfo(
                name=name,
                total_gib=float(what_if_gib),
                free_gib=float(what_if_gib),
                used_gib=0.0,
                compute_capability=capability,
                driver=None,
                cuda_driver=None,
                index=i,
                source="what-if",
            )
            for i in range(count)
        ]
        cards = f"{count} x {name}" if count > 1 else name
        flags = "--gpu-memory" + (" --gpus" if what_if_count else "")
        machine = Machine(
            gpus, f"planning for {cards} ({what_if_gib:g} GiB, all of it free): {flags}", host_total, host_free
        )
        if capability is not None:
            known = f" ({card.name} in the card table)" if card is not None and card.name != name else ""
            machine.notes.append(f"{name}{known}: {precision_text(gpus[0])}, known by its name")
        if card is not None and card.memory_gib and abs(card.memory_gib - what_if_gib) > 0.1 * card.memory_gib:
            machine.notes.append(
                f"{name} has {card.memory_gib:g} GiB in the card table; planning for {what_if_gib:g} GiB as "
                "--gpu-memory says (a card of another memory is another model: check --gpu-name)"
            )
        return machine
    machine = _read_driver(nvml, host_total, host_free)
    if what_if_count is None:
        return machine
    if len(machine.gpus) < what_if_count:
        found = f"{len(machine.gpus)} GPU(s) visible" if machine.gpus else "no GPU found"
        raise UsageError(
            f"--gpus {what_if_count}: {found} (fix: add --gpu-memory GIB to plan for "
            f"{what_if_count} cards of that size)"
        )
    if len(machine.gpus) > what_if_count:
        machine.notes.append(
            f"--gpus {what_if_count}: planning for the first {what_if_count} of {len(machine.gpus)} visible GPUs"
        )
        machine.gpus = machine.gpus[:what_if_count]
    return machine


def _read_driver(nvml, host_total: float, host_free: float) -> Machine:

    def cpu(reason: str) -> Machine:
        return Machine([], f"{reason}: planning for the CPU ladder", host_total, host_free)

    if nvml is None:
        try:
            import pynvml  # the driver's own library; no CUDA runtime needed
        except ImportError:
            return cpu("nvidia-ml-py is not installed, so no GPU can be read")
        nvml = pynvml
    error_type = getattr(nvml, "NVMLError", Exception)
    try:
        nvml.nvmlInit()
    except error_type as exc:
        not_found = getattr(nvml, "NVMLError_LibraryNotFound", ())
        if not_found and isinstance(exc, not_found):
            return cpu("no NVIDIA driver found")
        return cpu(f"the NVIDIA driver did not answer ({exc})")
    try:
        devices, driver, cuda_driver = _read_nvml(nvml)
    except error_type as exc:
        return cpu(f"NVML could not list the GPUs ({exc})")
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down a library that failed is best effort
            pass
    if not devices:
        return cpu("the NVIDIA driver reports no GPU")
    visible, note = _select(devices, visible_selection(os.environ.get("CUDA_VISIBLE_DEVICES")))
    if not visible:
        return cpu(f"{note}: no GPU visible")
    order = os.environ.get("CUDA_DEVICE_ORDER")
    mixed = len({d["name"] for d in devices}) > 1
    order_note = None
    if order and order != CUDA_ORDER and mixed:
        order_note = (
            f"CUDA_DEVICE_ORDER={order}: CUDA may number these mixed GPUs differently from NVML, so "
            f"GPU 0 may not be the card planned for (fix: CUDA_DEVICE_ORDER={CUDA_ORDER})"
        )
    refusal = below_minimum(visible[0]["name"], visible[0]["capability"])
    if refusal:
        return cpu(f"GPU 0: {refusal}")
    gpus = [
        GpuInfo(
            name=d["name"],
            total_gib=d["total"],
            free_gib=d["free"],
            used_gib=d["used"],
            compute_capability=d["capability"],
            driver=driver,
            cuda_driver=cuda_driver,
            index=cuda_index,
            source="nvml",
            uuid=d["uuid"],
        )
        for cuda_index, d in enumerate(visible)
    ]
    first = gpus[0]
    message = (
        f"GPU 0: {first.name}, {first.free_gib:.1f} of {first.total_gib:.1f} GiB free, "
        f"{precision_text(first)}, driver {driver or '?'} (CUDA {cuda_driver or '?'})"
    )
    notes = [n for n in (note, order_note) if n]
    if len(gpus) > 1:
        notes.append(f"{len(gpus)} GPUs visible; planning for GPU 0 (Unsloth trains on one device)")
    return Machine(gpus, message, host_total, host_free, notes)
