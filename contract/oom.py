"""Recognise an out-of-memory failure, read its figures and say where it happened (launcher.oom.explain says
what to change).

Works on text (a traceback, a log tail, a pasted message) so that the supervisor can read a child's
failure and a person can paste one into `python train.py explain-oom FILE`. Imports no torch.

Recognised:
- PyTorch's caching allocator (`torch.OutOfMemoryError`: "CUDA out of memory. Tried to allocate ..."), in the
  current wording and the pre-2.1 one, sizes in B, KiB, MiB or GiB;
- vLLM start-up refusals: free memory below the asked `gpu_memory_utilization`, no memory left for the KV
  cache blocks, a KV cache too small for one sequence of `max_model_len`, the sampler's warm-up out of memory;
- the CUDA driver refusing memory outside PyTorch's allocator: vLLM's cumem allocator (the pool that standby
  puts to sleep and wakes: "CUDA Error: out of memory at .../cumem_allocator.cpp:N"), and the driver's own
  CUDA_ERROR_OUT_OF_MEMORY as cuda-python names it; Unsloth's MemoryError when vLLM cannot start under
  standby is a vLLM start-up refusal, not host RAM;
- cuBLAS / cuDNN workspace allocation failures (they happen when the card is full, like an OOM);
- host RAM: PyTorch's CPU allocator, Python's MemoryError, and a child killed by SIGKILL (the kernel's
  OOM killer), which is not a GPU OOM. The supervisor takes a SIGKILL for the OOM killer only when the
  kernel says so (`killed_by_kernel_oom`: the cgroup's OOM-kill count, or its log).
Separately, `read_unsupported` tells an architecture that vLLM / transformers / Unsloth cannot load.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from contract.oom_site import SITE_HOST, SITE_UNKNOWN, SITE_VLLM_START, classify_site, parse_frames

# What ran out of memory
KIND_CUDA = "cuda"  # PyTorch's CUDA caching allocator
KIND_VLLM = "vllm"  # vLLM refused to start: its share cannot hold weights + KV cache
KIND_CUBLAS = "cublas"  # cuBLAS / cuDNN could not allocate a workspace
KIND_DRIVER = "cuda_driver"  # the CUDA driver itself (vLLM's cumem allocator under standby, driver calls)
KIND_HOST = "host_ram"  # host memory: the process was killed or the CPU allocator failed

# Why vLLM refused to start
VLLM_SHARE_TOO_LARGE = "share larger than free memory"  # lower gpu_memory_utilization
VLLM_SHARE_TOO_SMALL = "share too small for the KV cache"  # raise it (or shorten max_seq_length)

# Exit statuses of a child killed by SIGKILL: -9 from Popen, 137 when a shell reports it.
SIGKILL_CODES = (-9, 137)

_UNIT_GIB = {
    "B": 1 / 2**30,
    "KiB": 1 / 2**20,
    "MiB": 1 / 2**10,
    "GiB": 1.0,
    "TiB": 1024.0,
    "KB": 1e3 / 2**30,
    "MB": 1e6 / 2**30,
    "GB": 1e9 / 2**30,
}
_SIZE = r"(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB)"


PROBE_FUNCTION = "run_probe"  # trainer.probe's entry point: its frame marks an OOM of the probe


def _gib(number: str, unit: str) -> float:
    return float(number) * _UNIT_GIB[unit]


@dataclass
class OomReport:
    """One out-of-memory failure: what ran out, where, and the figures the message gave (GiB)."""

    kind: str
    site: str = SITE_UNKNOWN
    asked_gib: float | None = None
    total_gib: float | None = None
    free_gib: float | None = None
    in_use_gib: float | None = None  # this process, PyTorch and non-PyTorch memory
    allocated_gib: float | None = None  # by PyTorch tensors
    reserved_unallocated_gib: float | None = None  # cached by PyTorch's allocator, not in tensors
    other_processes_gib: float | None = None  # other processes on the same card
    gpu_index: int | None = None
    utilization: float | None = None  # vLLM's gpu_memory_utilization when the message names it
    max_model_len: int | None = None  # vLLM's max_model_len when the message names it
    kv_tokens: int | None = None  # tokens the KV cache could hold
    vllm_problem: str | None = None  # VLLM_SHARE_TOO_LARGE or VLLM_SHARE_TOO_SMALL
    message: str = ""  # the line the reading came from
    frames: list[str] = field(default_factory=list)  # "file:function" of the traceback, innermost last
    in_probe: bool = False  # raised by the worst-case probe before training (trainer.probe)

    @property
    def shortfall_gib(self) -> float | None:
        """What was missing: asked minus free (None when either figure is unknown or nothing was missing)."""
        if self.asked_gib is None or self.free_gib is None:
            return None
        return max(self.asked_gib - self.free_gib, 0.0)

    @property
    def fragmented(self) -> bool:
        """The allocator held enough unused cache to serve the request: fragmentation, not a lack of memory."""
        short = self.shortfall_gib
        return (
            short is not None
            and self.reserved_unallocated_gib is not None
            and self.reserved_unallocated_gib >= short > 0
        )

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("frames")
        data["shortfall_gib"] = self.shortfall_gib
        for key, value in data.items():
            if isinstance(value, float):
                data[key] = round(value, 6)  # GiB to the KiB: an OOM of a few MiB stays readable
        return data

    def summary(self) -> str:
        """One line for a log: 'OOM in logits/log-probs (asked 6.01 GiB, 2.72 GiB free)'."""
        if self.kind == KIND_HOST:
            what = "out of host RAM"
        elif self.kind == KIND_VLLM:
            what = "vLLM could not start"
        else:
            what = f"OOM in {self.site}"
        figures = []
        if self.asked_gib is not None:
            figures.append(f"asked {fmt_gib(self.asked_gib)}")
        if self.free_gib is not None:
            figures.append(f"{fmt_gib(self.free_gib)} free")
        if self.kind == KIND_VLLM and self.site != SITE_VLLM_START:
            what += f" ({self.site})"
        if self.in_probe:
            what += " during the worst-case probe, before any training step"
        return what + (f" ({', '.join(figures)})" if figures else "")


def fmt_gib(value: float | None) -> str:
    if value is None:
        return "?"
    if value < 1.0:
        mib = value * 1024
        return f"{mib:.2f} MiB" if mib < 10 else f"{mib:.0f} MiB"
    return f"{value:.2f} GiB"


# ---------------------------------------------------------------------------------------------------
# Reading the message

_TORCH_MARKERS = ("CUDA out of memory", "OutOfMemoryError", "HIP out of memory", "XPU out of memory")


def _size(name: str) -> str:
    """A size with its unit, as the named groups NAME and NAME_unit."""
    return rf"(?P<{name}>\d+(?:\.\d+)?)\s*(?P<{name}_unit>B|KiB|MiB|GiB|TiB|KB|MB|GB)"


# PyTorch's two wordings (2.1 on, and before): the same figures, named alike
_TORCH_NEW = re.compile(
    r"Tried to allocate "
    + _size("asked")
    + r"\.\s*GPU (?P<gpu>\d+) has a total capacity of "
    + _size("total")
    + r" of which "
    + _size("free")
    + r" is free"
)
_TORCH_OLD = re.compile(
    r"Tried to allocate "
    + _size("asked")
    + r" \(GPU (?P<gpu>\d+);\s*"
    + _size("total")
    + r" total capacity;\s*"
    + _size("allocated")
    + r" already allocated;\s*"
    + _size("free")
    + r" free;\s*"
    + _size("reserved")
    + r" reserved in total by PyTorch"
)
_TORCH_ASKED = re.compile(r"Tried to allocate " + _SIZE)
_THIS_PROCESS = re.compile(r"this process has " + _SIZE + r" memory in use")
_PROCESS_N = re.compile(r"Process (\d+) has " + _SIZE + r" memory in use")
_ALLOCATED = re.compile(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch")
_RESERVED_UNALLOCATED = re.compile(_SIZE + r" is reserved by PyTorch but unallocated")

_VLLM_FREE = re.compile(
    r"Free memory on device(?: \S+)? \((\d+(?:\.\d+)?)/(\d+(?:\.\d+)?) GiB\) on startup is less than desired "
    r"GPU memory utilization \((\d+(?:\.\d+)?), (\d+(?:\.\d+)?) GiB\)",
    re.IGNORECASE,
)
_VLLM_KV_NEEDED = re.compile(
    r"max seq len \((\d+)\),? \((\d+(?:\.\d+)?) GiB KV cache is needed, which is larger than the available "
    r"KV cache memory \((\d+(?:\.\d+)?) GiB\)"
)
_VLLM_KV_TOKENS = re.compile(
    r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV cache \((\d+)\)"
)
_VLLM_NO_BLOCKS = "No available memory for the cache blocks"
_VLLM_SHARE = re.compile(r"total_gpu_memory \((\d+(?:\.\d+)?) ?GiB\) x gpu_memory_utilization \((\d+(?:\.\d+)?)\)")
_VLLM_KV_REST = re.compile(r"the rest of the memory reserved for KV Cache is (-?\d+(?:\.\d+)?) ?GiB")
_VLLM_SAMPLER = re.compile(r"CUDA out of memory occurred when warming up sampler with (\d+) dummy requests")
_VLLM_INSUFFICIENT = re.compile(r"insufficient\b.{0,80}\bKV cache", re.IGNORECASE)

# Unsloth re-raises a vLLM start that ran out of memory under standby as a MemoryError (unsloth_zoo load_vllm)
_UNSLOTH_STANDBY_START = re.compile(
    r"Your GPU ran out of memory loading vLLM with standby mode enabled\.\s*Your GPU has (\d+(?:\.\d+)?) GB VRAM "
    r"with gpu_memory_utilization=(\d+(?:\.\d+)?)"
)
# vLLM's cumem allocator ("CUDA Error: %s at %s:%d" with the driver's error string) and the driver's error name
_DRIVER = re.compile(r"CUDA Error: out of memory at \S+:\d+|CUDA_ERROR_OUT_OF_MEMORY")

_CUBLAS = re.compile(
    r"CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_NOT_SUPPORTED|CUDNN_STATUS_ALLOC_FAILED|"
    r"cuDNN error: CUDNN_STATUS_INTERNAL_ERROR"
)
_CPU_ALLOC = re.compile(
    r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory): "
    r"you tried to allocate (\d+) bytes"
)
_MEMORY_ERROR = re.compile(r"^\s*MemoryError\b", re.MULTILINE)


# vLLM's log prefix: "(EngineCore_DP0 pid=23817) ERROR 11-20 14:02:14 [core.py:718] "
_LOG_PREFIX = re.compile(r"^(?:\(\S+ pid=\d+\)\s*)?(?:[A-Z]+ \d\d-\d\d [\d:]+ \[[^\]]+\]\s*)?")


def line_of(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    line = text[start : end if end >= 0 else len(text)].strip()
    line = _LOG_PREFIX.sub("", line)
    return line[:400]


def read_oom(text: str, returncode: int | None = None) -> OomReport | None:
    """An OomReport when `text` (a traceback, log tail or message) shows an out-of-memory failure, else None.

    `returncode` is the child's exit status when known: a SIGKILL with no other reading is taken as the
    kernel's OOM killer (host RAM), which is what kills a training process without a traceback.
    """
    text = text or ""
    frames = parse_frames(text)
    report = _read_vllm(text) or _read_torch(text) or _read_outside_torch(text) or _read_host(text)
    if report is None:
        if returncode in SIGKILL_CODES:
            return OomReport(
                kind=KIND_HOST,
                site=SITE_HOST,
                frames=[f"{f}:{fn}" for f, fn, _ in frames],
                message=f"the process was killed by SIGKILL (exit {returncode}) without a traceback",
            )
        return None
    report.frames = [f"{f}:{fn}" for f, fn, _ in frames]
    report.in_probe = any(fn == PROBE_FUNCTION for _, fn, _ in frames)
    if report.kind == KIND_VLLM:
        report.site = SITE_VLLM_START
    elif report.kind == KIND_HOST:
        report.site = classify_site(frames) if frames else SITE_HOST
        if report.site == SITE_UNKNOWN:
            report.site = SITE_HOST
    else:
        report.site = classify_site(frames)
    return report


def _read_torch(text: str) -> OomReport | None:
    marker = next((m for m in _TORCH_MARKERS if m in text), None)
    asked = _TORCH_ASKED.search(text)
    if marker is None and asked is None:
        return None
    report = OomReport(kind=KIND_CUDA)
    full = _TORCH_NEW.search(text) or _TORCH_OLD.search(text)
    if full:

        def figure(name: str) -> float:
            return _gib(full.group(name), full.group(name + "_unit"))

        report.asked_gib, report.total_gib, report.free_gib = figure("asked"), figure("total"), figure("free")
        report.gpu_index = int(full.group("gpu"))
        if full.groupdict().get("allocated"):  # the old wording also gives PyTorch's own figures
            report.allocated_gib = figure("allocated")
            report.reserved_unallocated_gib = max(figure("reserved") - report.allocated_gib, 0.0)
        report.message = line_of(text, full.start())
    elif asked:
        report.asked_gib = _gib(asked.group(1), asked.group(2))
        report.message = line_of(text, asked.start())
    else:
        assert marker is not None  # neither figure matched, so a marker did (checked above)
        report.message = line_of(text, text.find(marker))
    if m := _THIS_PROCESS.search(text):
        report.in_use_gib = _gib(m.group(1), m.group(2))
    others = [(int(p.group(1)), _gib(p.group(2), p.group(3))) for p in _PROCESS_N.finditer(text)]
    if others:
        if report.in_use_gib is None and len(others) == 1:
            report.in_use_gib = others[0][1]  # one process listed: this one
        else:
            report.other_processes_gib = sum(size for _, size in others)
    if m := _ALLOCATED.search(text):
        report.allocated_gib = _gib(m.group(1), m.group(2))
    if m := _RESERVED_UNALLOCATED.search(text):
        report.reserved_unallocated_gib = _gib(m.group(1), m.group(2))
    return report


def _vllm(problem: str, text: str, m: re.Match, *fields: str) -> OomReport:
    """vLLM's refusal read from the match `m`: its line, and its groups in order as the named fields (the
    lengths whole numbers, the rest GiB or shares)."""
    figures: dict[str, Any] = {
        name: (int if name in ("max_model_len", "kv_tokens") else float)(m.group(i)) for i, name in enumerate(fields, 1)
    }
    return OomReport(kind=KIND_VLLM, vllm_problem=problem, message=line_of(text, m.start()), **figures)


def _read_vllm(text: str) -> OomReport | None:
    if m := _VLLM_FREE.search(text):
        return _vllm(VLLM_SHARE_TOO_LARGE, text, m, "free_gib", "total_gib", "utilization", "asked_gib")
    if m := _VLLM_KV_NEEDED.search(text):
        # Here "asked" and "free" are the KV cache vLLM needs for one full sequence and what its share left.
        return _vllm(VLLM_SHARE_TOO_SMALL, text, m, "max_model_len", "asked_gib", "free_gib")
    if m := _VLLM_KV_TOKENS.search(text):
        return _vllm(VLLM_SHARE_TOO_SMALL, text, m, "max_model_len", "kv_tokens")
    pos = text.rfind(_VLLM_NO_BLOCKS)
    if pos >= 0:
        report = OomReport(kind=KIND_VLLM, kv_tokens=0, vllm_problem=VLLM_SHARE_TOO_SMALL, message=line_of(text, pos))
        # vLLM's memory profile, when logged, says how its share was spent
        if m := _VLLM_SHARE.search(text):
            report.total_gib, report.utilization = float(m.group(1)), float(m.group(2))
        if m := _VLLM_KV_REST.search(text):
            report.free_gib = max(float(m.group(1)), 0.0)  # what the share left for the KV cache
        return report
    if m := _VLLM_INSUFFICIENT.search(text):
        return _vllm(VLLM_SHARE_TOO_SMALL, text, m)
    if m := _VLLM_SAMPLER.search(text):
        # vLLM's start-up warm-up of the sampler (max_num_seqs dummy requests) found the card full: it asks for
        # a smaller share or fewer sequences
        return _vllm(VLLM_SHARE_TOO_LARGE, text, m)
    if (m := _UNSLOTH_STANDBY_START.search(text)) and not _DRIVER.search(text):
        # GB in Unsloth's wording are GiB (it divides by 1024 three times)
        return _vllm(VLLM_SHARE_TOO_LARGE, text, m, "total_gib", "utilization")
    return None


def _read_outside_torch(text: str) -> OomReport | None:
    """The CUDA driver's refusal, else cuBLAS / cuDNN's: their line is all they tell."""
    for pattern, kind in ((_DRIVER, KIND_DRIVER), (_CUBLAS, KIND_CUBLAS)):
        if m := pattern.search(text):
            return OomReport(kind=kind, message=line_of(text, m.start()))
    return None


def _read_host(text: str) -> OomReport | None:
    if m := _CPU_ALLOC.search(text):
        return OomReport(kind=KIND_HOST, asked_gib=int(m.group(1)) / 2**30, message=line_of(text, m.start()))
    if m := _MEMORY_ERROR.search(text):
        return OomReport(kind=KIND_HOST, message=line_of(text, m.start()))
    return None
