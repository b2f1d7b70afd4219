"""launcher/memory/vllm_log.py on the engine's real start-up log (the CPU build's), and the GPU build's
statements it reads, found in the installed engine's own source so that a rewording fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.memory.vllm_log import parse_vllm_memory

# (file of vLLM 0.32, the statement as the source writes it, one line as the engine prints it, key, value)
GPU_STATEMENTS = [
    (
        "v1/worker/gpu_model_runner.py",
        '"Model loading took %s GiB memory and %.6f seconds"',
        "Model loading took 2.31 GiB memory and 5.123456 seconds",
        "weights_gib",
        2.31,
    ),
    (
        "v1/worker/gpu_worker.py",
        '"Available KV cache memory: %s GiB"',
        "Available KV cache memory: 10.45 GiB",
        "kv_cache_gib",
        10.45,
    ),
    (
        "v1/core/kv_cache_utils.py",
        '"%s KV cache size: %s tokens, "',
        "GPU KV cache size: 97,856 tokens, Maximum concurrency for 1,024 tokens per request: 95.56x",
        "kv_cache_tokens",
        97856,
    ),
    (
        "v1/worker/gpu_model_runner.py",
        '"Graph capturing finished in %.0f secs, took %.2f GiB"',
        "Graph capturing finished in 12 secs, took 0.53 GiB",
        "cuda_graphs_gib",
        0.53,
    ),
    (
        "utils/mem_utils.py",
        'f"torch peak memory increase: "',
        "Total non KV cache memory: 3.63GiB; torch peak memory increase: 1.02GiB; weights memory: 2.31GiB.",
        "activation_peak_gib",
        1.02,
    ),
    (
        "v1/worker/cpu_worker.py",
        'f"Explicitly set ({format_gib(kv_cache_size)}/"',
        "Explicitly set (1.0/11.59) GiB for KV cache on node 0.",
        "kv_cache_gib",
        1.0,
    ),
]


@pytest.mark.parametrize(
    "source, statement, line, key, value",
    GPU_STATEMENTS,
    ids=[row[3] + "-" + row[0].rpartition("/")[2] for row in GPU_STATEMENTS],
)
def test_the_engines_statements_are_still_the_ones_read(source, statement, line, key, value):
    import vllm

    text = (Path(vllm.__file__).parent / source).read_text(encoding="utf-8")
    assert statement in text, f"vLLM's {source} no longer says {statement}: update launcher/memory/vllm_log.py"
    assert parse_vllm_memory(line)[key] == value


def test_the_real_start_up_log_is_read(run_scenario):
    log = run_scenario("evaluate", "greedy").log
    figures = parse_vllm_memory(log)
    assert figures is not None, "nothing read from the engine's start-up log"
    # the CPU build states the KV cache it was given (VLLM_CPU_KVCACHE_SPACE=1) and its size in tokens
    assert figures["kv_cache_gib"] == 1.0
    assert figures["kv_cache_tokens"] > 0
    assert f"{figures['kv_cache_tokens']:,} tokens" in log
