"""HOW MUCH memory the attempt holds, now and at its peak: torch's allocator and NVML on a GPU (the process's
own use as the driver counts it, which the estimate is held against), the process RSS on CPU. Read once per
step by the telemetry callback and folded into the probe's figures."""

from __future__ import annotations

import os
import resource
import sys

import psutil

from contract.attempt import MEASURE_GPU_PROCESS, MEASURE_TORCH

GIB = float(1 << 30)


def _nvml_handle_of_this_process(pynvml):
    """NVML's handle for the GPU this process trains on: entry LOCAL_RANK of CUDA_VISIBLE_DEVICES (an index
    or a UUID), or that index of all GPUs when the variable is unset."""
    visible = [v.strip() for v in (os.environ.get("CUDA_VISIBLE_DEVICES") or "").split(",") if v.strip()]
    local = int(os.environ.get("LOCAL_RANK", "0") or 0)
    entry = visible[local] if local < len(visible) else str(local)
    if entry.isdigit():
        return pynvml.nvmlDeviceGetHandleByIndex(int(entry))
    return pynvml.nvmlDeviceGetHandleByUUID(entry)


def process_gpu_used_gib(pynvml, handle, baseline_gib: float | None) -> float | None:
    """This process's GPU memory as the driver counts it (CUDA context, torch's segments, vLLM's own
    allocations; vLLM's KV cache not while it sleeps under standby), or None where NVML cannot say. NVML
    lists processes by the host's pids: in a container without the host's pid namespace this process is not
    found, and the card's use above what it held before this attempt (`baseline_gib`) stands in."""
    pid = os.getpid()
    try:
        for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if process.pid == pid and isinstance(process.usedGpuMemory, int):
                return process.usedGpuMemory / GIB
    except Exception:  # noqa: BLE001 - an NVML without the call, or a driver that refuses it
        pass
    if baseline_gib is None:
        return None
    try:
        return max(pynvml.nvmlDeviceGetMemoryInfo(handle).used / GIB - baseline_gib, 0.0)
    except Exception:  # noqa: BLE001
        return None


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
        self._baseline_gib = None
        self.peak_allocated_gib = 0.0
        self.peak_reserved_gib = 0.0
        self.peak_nvml_used_gib = 0.0
        self.peak_process_gib = None   # the process's peak as the estimate counts it (None: NVML cannot say)
        self.peak_rss_gib = 0.0
        if device == "cuda":
            try:
                import pynvml

                pynvml.nvmlInit()
                self._nvml_handle = _nvml_handle_of_this_process(pynvml)
                # what the card held before this attempt's model loaded (other processes)
                self._baseline_gib = pynvml.nvmlDeviceGetMemoryInfo(self._nvml_handle).used / GIB
            except Exception:  # no NVML, or an entry it cannot resolve: torch's figures still come
                self._nvml_handle = None

    def process_gib(self) -> float | None:
        if self._nvml_handle is None:
            return None
        import pynvml

        return process_gpu_used_gib(pynvml, self._nvml_handle, self._baseline_gib)

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
            return MEASURE_GPU_PROCESS if self.peak_process_gib is not None else MEASURE_TORCH
        return "process peak RSS"

    def summary(self) -> dict:
        out = {"peak_gib": round(self.peak_gib, 4), "peak_rss_gib": round(self.peak_rss_gib, 4),
               "measure": self.measure}
        if self.device == "cuda":
            out.update(peak_allocated_gib=round(self.peak_allocated_gib, 4),
                       peak_reserved_gib=round(self.peak_reserved_gib, 4),
                       peak_nvml_used_gib=round(self.peak_nvml_used_gib, 4),
                       peak_nvml_process_gib=None if self.peak_process_gib is None
                       else round(self.peak_process_gib, 4))
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
