"""Trainer callbacks: per-step telemetry (metrics.jsonl), a progress line, memory peaks, and a clean stop
on SIGINT / SIGTERM. Each does O(1) cheap work per step: no blocking driver calls; one line flushed per step."""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import time
from pathlib import Path

import psutil
from transformers import TrainerCallback

from contract.attempt import MEASURE_GPU_PROCESS, MEASURE_TORCH
from contract.safe_write import append_line

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


class MemoryProbe:
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


def _number(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return None if (isinstance(value, float) and not math.isfinite(value)) else value
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class TelemetryCallback(TrainerCallback):
    """One JSON line per optimizer step in metrics.jsonl, from TRL's per-step log and our own timers."""

    def __init__(self, path: Path, reward_names: list[str], memory: MemoryProbe, progress=None, signal=None):
        self.path = Path(path)
        self.reward_names = list(reward_names)
        self.memory = memory
        self.progress = progress
        self.signal = signal  # trainer.group_signal.GroupSignal: the rewards each step's groups got
        self.warning: str | None = None  # the run's "cannot learn" line, once it has been said
        self.rows: list[dict] = []
        self.final_logs: dict = {}
        self._step_started = None
        self._last_log_time = None

    def on_train_begin(self, args, state, control, **kwargs):
        self._last_log_time = time.perf_counter()
        if self.signal is not None:
            self.signal.clear()  # the probe's step scored completions too; they are not training's

    def on_step_begin(self, args, state, control, **kwargs):
        self._step_started = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "reward" not in logs and "loss" not in logs:
            self.final_logs.update(logs)  # the closing summary (train_runtime, train_loss, ...)
            return
        now = time.perf_counter()
        row = {
            "step": state.global_step,
            "rewards": {name: _number(logs.get(f"rewards/{name}/mean")) for name in self.reward_names},
            "reward": _number(logs.get("reward")),
            "reward_std": _number(logs.get("reward_std")),
            "completion_length": _number(logs.get("completions/mean_length")),
            "loss": _number(logs.get("loss")),
            "kl": _number(logs.get("kl")),
            "entropy": _number(logs.get("entropy")),
            "grad_norm": _number(logs.get("grad_norm")),
            "learning_rate": _number(logs.get("learning_rate")),
            "group_signal": self.signal.take() if self.signal is not None else None,
            "step_time": round(now - self._last_log_time, 4),
            "time": round(time.time(), 3),
            "memory": self.memory.sample(),
        }
        self._last_log_time = now
        self.rows.append(row)
        # one whole line per step (never half a record on a full disk or a kill); a step takes seconds, so
        # the flush to disk costs nothing that shows
        append_line(self.path, json.dumps(row))
        if self.progress is not None:
            self.progress.update(state.global_step, state.max_steps, row)
        if self.warning is None:
            from trainer.group_signal import no_signal_warning

            self.warning = no_signal_warning(self.rows)
            if self.warning is not None and self.progress is not None:
                self.progress.warn(self.warning)

    def on_train_end(self, args, state, control, **kwargs):
        self.close()

    def close(self):
        pass  # nothing held open: each row was appended whole


LINE_EVERY_S = 30.0


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 5400:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class Progress:
    """Step, reward and memory: a live bar on a terminal, a plain line now and then otherwise."""

    def __init__(self, name: str, total: int, device: str):
        self.name = name
        self.total = total
        self.device = device
        self._bar = None
        self._task = None
        self._every = max(1, total // 20)
        self._printing = True
        self._started = time.time()
        self._last_line = 0.0
        if sys.stdout.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, \
                TimeElapsedColumn, TimeRemainingColumn

            self._bar = RichProgress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                                     TimeRemainingColumn(), transient=False)
            self._task = self._bar.add_task(name, total=total, info="")
            self._bar.start()

    def _memory_text(self, memory: dict) -> str:
        if "peak_reserved_gib" in memory:
            return f"gpu {memory['peak_reserved_gib']:.2f} GiB"
        return f"rss {memory.get('rss_gib', 0.0):.2f} GiB"

    def update(self, step: int, total: int, row: dict):
        reward = row.get("reward")
        info = f"reward {reward:.3f}  " if reward is not None else ""
        signal = row.get("group_signal")
        if signal:  # what GRPO learns from: groups whose completions differ
            info += f"alike groups {signal['groups_alike']:.0%}  spread {signal['group_reward_spread']:.2f}  "
        info += self._memory_text(row["memory"])
        if self._bar is not None:
            self._bar.update(self._task, completed=step, total=total or self.total, info=info)
        elif self._printing:
            now = time.time()
            # every twentieth of the run, and at least every LINE_EVERY_S when steps are slow (a GPU run)
            if not (step == 1 or step % self._every == 0 or step == total or now - self._last_line >= LINE_EVERY_S):
                return
            self._last_line = now
            left = (now - self._started) / max(step, 1) * max((total or self.total) - step, 0)
            try:
                print(f"[{self.name}] step {step}/{total}  {info}  ({row['step_time']:.2f} s/step, "
                      f"~{_duration(left)} left)", flush=True)
            except OSError:  # whoever read our output has gone (a closed pipe): keep training, stop printing
                self._printing = False

    def warn(self, line: str):
        """One line that stays on screen, above a live bar or between the plain lines."""
        text = f"[{self.name}] warning: {line}"
        if self._bar is not None:
            self._bar.console.print(text)
        elif self._printing:
            try:
                print(text, flush=True)
            except OSError:
                self._printing = False

    def close(self):
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


class StopOnSignal(TrainerCallback):
    """After a SIGINT / SIGTERM (trainer.signals.StopFlag), the next step end saves a checkpoint and stops."""

    def __init__(self, flag):
        self.flag = flag

    @property
    def received(self):
        return self.flag.received

    def on_step_end(self, args, state, control, **kwargs):
        if self.received is not None:
            control.should_save = True
            control.should_training_stop = True
        return control


class MarkCheckpointComplete(TrainerCallback):
    """After the trainer has written checkpoint-N, flush it to disk and add the completeness marker
    (contract.attempt): a folder cut short by a kill or a full disk never looks resumable."""

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return control
        from pathlib import Path

        from contract.attempt import CHECKPOINT_PREFIX, mark_checkpoint_complete

        folder = Path(args.output_dir) / f"{CHECKPOINT_PREFIX}{state.global_step}"
        if folder.is_dir():
            mark_checkpoint_complete(folder)
        return control
