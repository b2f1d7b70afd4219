"""WHAT vLLM measured when it started: its own memory breakdown, read from an attempt's log.

vLLM states, as it starts, what the weights took, what its profiling run's activations peaked at, what
memory outside PyTorch it holds, the KV cache it allocated and what CUDA graphs took. The ledger keeps these
per component, so the vLLM side of the estimate can be checked against this machine, not only the total.

Formats read (GiB; `format_gib` rounds to 0.01):
- vLLM 0.10 and later (V1 engine, 0.32 pinned here):
  "Model loading took 2.31 GiB memory and 5.123456 seconds"
  "Memory profiling takes 3.20 seconds. Total non KV cache memory: 3.63GiB; torch peak memory increase:
   1.02GiB; total consumed (from mem_get_info): ...; weights memory: 2.31GiB."  (a debug line)
  "Available KV cache memory: 10.45 GiB"  (negative when the share left nothing for it: "-0.53 GiB")
  "GPU KV cache size: 97,856 tokens, Maximum concurrency for 1,024 tokens per request: 95.56x"
  "Graph capturing finished in 12 secs, took 0.53 GiB"
  "CUDA graph pool memory: 0.51 GiB (actual), 0.55 GiB (estimated), ..."
  The "Total non KV cache memory" line is at debug level; at the default level the figure is derived from
  Unsloth's own lines, printed whatever the level: "Unsloth: vLLM loading MODEL with actual GPU utilization =
  57.5%" and "Unsloth: Your GPU has CUDA compute capability 8.6 with VRAM = 12.0 GB." (vLLM's share) less
  the available KV cache (so it includes vLLM's CUDA graph estimate).
- vLLM's CPU build (the KV cache is the VLLM_CPU_KVCACHE_SPACE it was given; no weights or activation lines):
  "Explicitly set (1.0/11.59) GiB for KV cache on node 0."
  "CPU KV cache size: 2,097,152 tokens, Maximum concurrency for 256 tokens per request: 8192.00x"
- vLLM 0.6 - 0.9 (V0 engine):
  "Loading model weights took 2.3124 GB"
  "model weights take 2.31GiB; non_torch_memory takes 0.12GiB; PyTorch activation peak memory takes
   1.05GiB; the rest of the memory reserved for KV Cache is 10.45GiB."
"""

from __future__ import annotations

import re

_NUM = r"(\d+(?:\.\d+)?)"
_SIGNED = r"(-?\d+(?:\.\d+)?)"  # the KV cache figure goes negative when the share leaves nothing for it
_PATTERNS = {
    "weights_gib": [
        re.compile(r"Model loading took " + _NUM + r" ?GiB"),
        re.compile(r"Loading model weights took " + _NUM + r" ?GB"),
        re.compile(r"model weights take " + _NUM + r" ?GiB"),
    ],
    "non_kv_cache_gib": [re.compile(r"Total non KV cache memory: " + _NUM + r" ?GiB")],
    "activation_peak_gib": [
        re.compile(r"torch peak memory increase: " + _NUM + r" ?GiB"),
        re.compile(r"PyTorch activation peak memory takes " + _NUM + r" ?GiB"),
    ],
    "non_torch_gib": [re.compile(r"non_torch_memory takes " + _NUM + r" ?GiB")],
    "kv_cache_gib": [
        re.compile(r"Available KV cache memory: " + _SIGNED + r" ?GiB"),
        re.compile(r"the rest of the memory reserved for KV Cache is " + _SIGNED + r" ?GiB"),
        re.compile(r"Explicitly set \(" + _NUM + r"/\d+(?:\.\d+)?\) ?GiB for KV cache"),
    ],
    "cuda_graphs_gib": [
        re.compile(r"Graph capturing finished in \d+ secs?, took " + _NUM + r" ?GiB"),
        re.compile(r"CUDA graph pool memory: " + _NUM + r" ?GiB \(actual\)"),
    ],
}
_KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
# Unsloth's own start-up lines (printed, so at any log level): vLLM's share and the card's size
_UNSLOTH_SHARE = re.compile(r"vLLM loading \S+ with actual GPU utilization = " + _NUM + r"%")
_UNSLOTH_VRAM = re.compile(r"Your GPU has CUDA compute capability [\d.]+ with VRAM = " + _NUM + r" GB")


def parse_vllm_memory(text: str) -> dict | None:
    """vLLM's own figures from a log, the last statement of each (a restarted engine says them again);
    None when the log holds none (no vLLM, or it never got that far)."""
    found: dict = {}
    for key, patterns in _PATTERNS.items():
        for pattern in patterns:
            matches = pattern.findall(text)
            if matches:
                found[key] = float(matches[-1])
                break
    tokens = _KV_TOKENS.findall(text)
    if tokens:
        found["kv_cache_tokens"] = int(tokens[-1].replace(",", ""))
    share, vram = _UNSLOTH_SHARE.findall(text), _UNSLOTH_VRAM.findall(text)
    if share and vram:
        # vLLM's reservation; with its KV cache figure it gives what vLLM holds besides the KV cache, which
        # vLLM 0.32 states only at debug level (Unsloth's "GB" are GiB: it divides by 1024 three times)
        found["vllm_share_gib"] = round(float(share[-1]) / 100 * float(vram[-1]), 3)
        if "kv_cache_gib" in found and "non_kv_cache_gib" not in found:
            found["non_kv_cache_gib"] = round(found["vllm_share_gib"] - found["kv_cache_gib"], 3)
    return found or None
