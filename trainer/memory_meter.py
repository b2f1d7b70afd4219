"""HOW MUCH memory the attempt holds, now and at its peak: torch's allocator and NVML on a GPU (the process's
own use as the driver counts it, which the estimate is held against), the process RSS on CPU. Read once per
step by the telemetry callback and folded into the probe's figures."""

from __future__ import annotations

import os
import resource
import sys

import psutil

from contract.attempt import MEASURE_GPU_CARD, MEASURE_GPU_CARD_NO_CONTEXT, MEASURE_GPU_PROCESS, MEASURE_TORCH

GIB = float(1 << 30)


class CardBaseline:
    """What the card held before this process's first CUDA call (other processes' memory), read through NVML,
    which makes no CUDA context. Taken by the attempt before Unsloth is imported (its import creates the
    context); a baseline read later misses the context, and `before_context` says which it is."""

    taken: CardBaseline | None = None

    def __init__(self, used_gib: float, before_context: bool):
        self.used_gib = used_gib
        self.before_context = before_context


def cuda_context_exists() -> bool:
    """Whether this process has already made its CUDA context (torch initialises CUDA lazily, at the first call
    that needs it; a process that never imported torch has none)."""
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a torch without CUDA support answers nothing useful: no context
        return False


def take_card_baseline() -> CardBaseline | None:
    """Read the card's use now, before this process's first CUDA call, and keep it for the MemoryMeter built
    later in the same process; None where NVML cannot say (no driver, no NVML)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        used = pynvml.nvmlDeviceGetMemoryInfo(_nvml_handle_of_this_process(pynvml)).used / GIB
    except Exception:  # noqa: BLE001 - no NVML here: torch's figures will stand alone
        return None
    CardBaseline.taken = CardBaseline(used, before_context=not cuda_context_exists())
    return CardBaseline.taken


def _nvml_handle_of_this_process(pynvml):
    """NVML's handle for the GPU this process trains on: entry LOCAL_RANK of CUDA_VISIBLE_DEVICES (an index
    or a UUID), or that index of all GPUs when the variable is unset."""
    visible = [v.strip() for v in (os.environ.get("CUDA_VISIBLE_DEVICES") or "").split(",") if v.strip()]
    local = int(os.environ.get("LOCAL_RANK", "0") or 0)
    entry = visible[local] if local < len(visible) else str(local)
    if entry.isdigit():
        return pynvml.nvmlDeviceGetHandleByIndex(int(entry))
    return pynvml.nvmlDeviceGetHandleByUUID(entry)


def process_gpu_used(pynvml, handle, baseline: CardBaseline | None) -> tuple[float | None, str | None]:
    """(this process's GPU memory as the driver counts it, what that figure is), or (None, None) where NVML
    cannot say. The driver counts the CUDA context, torch's segments and vLLM's own allocations (vLLM's KV
    cache not while it sleeps under standby). NVML lists processes by the host's pids: in a container without
    the host's pid namespace this process is not found, and the card's use above `baseline` stands in; that
    figure counts the context only when the baseline was read before this process made it."""
    pid = os.getpid()
    try:
        for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if process.pid == pid and isinstance(process.usedGpuMemory, int):
                return process.usedGpuMemory / GIB, MEASURE_GPU_PROCESS
    except Exception:  # noqa: BLE001 - an NVML without the call, or a driver that refuses it
        pass
    if baseline is None:
        return None, None
    try:
        used = max(pynvml.nvmlDeviceGetMemoryInfo(handle).used / GIB - baseline.used_gib, 0.0)
    except Exception:  # noqa: BLE001
        return None, None
    return used, MEASURE_GPU_CARD if baseline.before_context else MEASURE_GPU_CARD_NO_CONTEXT


def gpu_process_peak_gib(torch_peak_gib: float, torch_reserved_now_gib: float, process_now_gib: float) -> float:
    """The process's peak in the estimate's terms: torch's peak plus what the process holds outside torch's
    allocator, read at the same moment (driver use - torch reserved). Under vLLM standby the sleeping KV cache
    is in torch's reserved figure (vLLM allocates it through a torch memory pool) but not in the driver's:
    the difference is then negative and takes it out again."""
    return max(torch_peak_gib + (process_now_gib - torch_reserved_now_gib), 0.0)


class MemoryMeter:
    """Memory now and at its peak: torch's allocator and NVML on a GPU, the process RSS on CPU."""

    def __init__(self, device: str):
        self.device = device
        self._nvml_handle = None
        self._baseline: CardBaseline | None = None
        self.process_measure: str | None = None  # what process_gib() counted last (see process_gpu_used)
        self.peak_allocated_gib = 0.0
        self.peak_reserved_gib = 0.0
        self.peak_nvml_used_gib = 0.0
        self.peak_process_gib = None  # the process's peak as the estimate counts it (None: NVML cannot say)
        self.peak_process_measure: str | None = None  # what peak_process_gib counts (process_gpu_used)
        self.peak_rss_gib = 0.0
        if device == "cuda":
            try:
                import pynvml

                pynvml.nvmlInit()
                self._nvml_handle = _nvml_handle_of_this_process(pynvml)
                # what the card held before this process's first CUDA call (other processes): taken before
                # Unsloth's import made the context (trainer.backends); read now only where it was not
                self._baseline = CardBaseline.taken or CardBaseline(
                    pynvml.nvmlDeviceGetMemoryInfo(self._nvml_handle).used / GIB,
                    before_context=not cuda_context_exists(),
                )
            except Exception:  # no NVML, or an entry it cannot resolve: torch's figures still come
                self._nvml_handle = None

    def process_gib(self) -> float | None:
        if self._nvml_handle is None:
            return None
        import pynvml

        used, self.process_measure = process_gpu_used(pynvml, self._nvml_handle, self._baseline)
        return used

    def sample(self) -> dict:
        out = {}
        if self.device == "cuda":
            import torch

            allocated = torch.cuda.max_memory_allocated() / GIB
            reserved = torch.cuda.max_memory_reserved() / GIB
            # Peaks of this step only; the run's peak is kept here.
            torch.cuda.reset_peak_memory_stats()
            out["peak_allocated_gib"] = round(allocated, 4)
            out["peak_reserved_gib"] = round(reserved, 4)
            self.peak_allocated_gib = max(self.peak_allocated_gib, allocated)
            self.peak_reserved_gib = max(self.peak_reserved_gib, reserved)
            if self._nvml_handle is not None:
                try:
                    import pynvml

                    used = pynvml.nvmlDeviceGetMemoryInfo(self._nvml_handle).used / GIB
                    out["nvml_used_gib"] = round(used, 4)
                    self.peak_nvml_used_gib = max(self.peak_nvml_used_gib, used)
                except Exception:
                    pass
            process = self.process_gib()
            if process is not None:
                out["nvml_process_gib"] = round(process, 4)
                peak = gpu_process_peak_gib(max(allocated, reserved), torch.cuda.memory_reserved() / GIB, process)
                if self.peak_process_gib is None or peak >= self.peak_process_gib:
                    self.peak_process_measure = self.process_measure
                self.peak_process_gib = max(self.peak_process_gib or 0.0, peak)
        rss = _rss_gib()
        out["rss_gib"] = round(rss, 4)
        self.peak_rss_gib = max(self.peak_rss_gib, rss, _peak_rss_gib())
        return out

    @property
    def peak_gib(self) -> float:
        """The figure to hold against the estimate (see `measure`): the GPU process's peak where NVML can
        say, else torch's reserved peak; the process RSS on CPU."""
        if self.device == "cuda":
            if self.peak_process_gib is not None:
                return self.peak_process_gib
            return max(self.peak_reserved_gib, self.peak_allocated_gib)
        return self.peak_rss_gib

    @property
    def measure(self) -> str:
        if self.device == "cuda":
            if self.peak_process_gib is not None:
                return self.peak_process_measure or MEASURE_GPU_PROCESS
            return MEASURE_TORCH
        return "process peak RSS"

    def summary(self) -> dict:
        out = {
            "peak_gib": round(self.peak_gib, 4),
            "peak_rss_gib": round(self.peak_rss_gib, 4),
            "measure": self.measure,
        }
        if self.device == "cuda":
            out.update(
                peak_allocated_gib=round(self.peak_allocated_gib, 4),
                peak_reserved_gib=round(self.peak_reserved_gib, 4),
                peak_nvml_used_gib=round(self.peak_nvml_used_gib, 4),
                peak_nvml_process_gib=None if self.peak_process_gib is None else round(self.peak_process_gib, 4),
            )
        return out


def _rss_gib() -> float:
    try:
        return psutil.Process().memory_info().rss / GIB
    except (psutil.Error, OSError):
        return _peak_rss_gib()


def _peak_rss_gib() -> float:
    # psutil has no process peak on Linux; the kernel's high-water mark comes through getrusage
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # kilobytes on Linux, bytes on macOS
    return peak / GIB if sys.platform == "darwin" else peak * 1024 / GIB
