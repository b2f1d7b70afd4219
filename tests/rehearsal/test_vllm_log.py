"""vLLM's start-up memory lines, as the pinned release and older ones print them."""

from __future__ import annotations

from launcher.memory.vllm_log import parse_vllm_memory

# Lines as vLLM 0.32's V1 engine logs them (gpu_model_runner / gpu_worker / kv_cache_utils), with the
# prefixes its logger and Unsloth's process add.
V1_LOG = """\
(EngineCore_DP0 pid=4123) INFO 11-22 10:01:12 [gpu_model_runner.py:5150] Model loading took 2.31 GiB memory and 5.123456 seconds
(EngineCore_DP0 pid=4123) DEBUG 11-22 10:01:15 [gpu_worker.py:758] Memory profiling takes 3.20 seconds. Total non KV cache memory: 3.63GiB; torch peak memory increase: 1.02GiB; total consumed (from mem_get_info): 3.9GiB; weights memory: 2.31GiB.
(EngineCore_DP0 pid=4123) INFO 11-22 10:01:15 [gpu_worker.py:760] Available KV cache memory: 10.45 GiB
(EngineCore_DP0 pid=4123) INFO 11-22 10:01:15 [kv_cache_utils.py:2328] GPU KV cache size: 97,856 tokens, Maximum concurrency for 1,024 tokens per request: 95.56x
(EngineCore_DP0 pid=4123) INFO 11-22 10:01:27 [gpu_model_runner.py:6582] Graph capturing finished in 12 secs, took 0.53 GiB
"""

# vLLM 0.7-0.9 (V0 engine), as in Unsloth GRPO notebooks' output
V0_LOG = """\
INFO 03-02 10:01:12 model_runner.py:1115] Loading model weights took 2.3124 GB
INFO 03-02 10:01:15 worker.py:267] Memory profiling takes 1.02 seconds
INFO 03-02 10:01:15 worker.py:267] the current vLLM instance can use total_gpu_memory (14.74GiB) x gpu_memory_utilization (0.60) = 8.85GiB
INFO 03-02 10:01:15 worker.py:267] model weights take 2.31GiB; non_torch_memory takes 0.12GiB; PyTorch activation peak memory takes 1.05GiB; the rest of the memory reserved for KV Cache is 5.37GiB.
INFO 03-02 10:01:40 model_runner.py:1562] Graph capturing finished in 25 secs, took 0.61 GiB
"""


def test_v1_lines():
    assert parse_vllm_memory(V1_LOG) == {
        "weights_gib": 2.31,
        "non_kv_cache_gib": 3.63,
        "activation_peak_gib": 1.02,
        "kv_cache_gib": 10.45,
        "kv_cache_tokens": 97856,
        "cuda_graphs_gib": 0.53,
    }


def test_v0_lines():
    assert parse_vllm_memory(V0_LOG) == {
        "weights_gib": 2.3124,
        "activation_peak_gib": 1.05,
        "non_torch_gib": 0.12,
        "kv_cache_gib": 5.37,
        "cuda_graphs_gib": 0.61,
    }


def test_the_last_statement_wins_and_nothing_means_none():
    restarted = V1_LOG + V1_LOG.replace("10.45 GiB", "9.80 GiB")
    assert parse_vllm_memory(restarted)["kv_cache_gib"] == 9.80
    assert parse_vllm_memory("step 1/10 loss 0.1\nno engine here") is None
    assert parse_vllm_memory("") is None


def test_the_pinned_release_still_prints_these_lines():
    """Where vLLM's Python code is importable (a side folder, see the Makefile), its sources must still hold
    the format strings read above."""
    import importlib.util
    from pathlib import Path

    import pytest
    from test_vllm_glue import SIDE  # the one place that finds the side folder

    spec = importlib.util.find_spec("vllm")
    package = Path(spec.origin).parent if spec is not None and spec.origin else SIDE / "vllm"
    if not (package / "__init__.py").is_file():
        pytest.skip("vLLM's code is not here (make vllm-side puts it beside the environment)")
    root = package / "v1"
    sources = (
        "".join(p.read_text(errors="replace") for p in root.rglob("*.py"))
        + (package / "utils" / "mem_utils.py").read_text()
    )
    for fragment in (
        "Model loading took %s GiB memory",
        "Available KV cache memory: %s GiB",
        "Graph capturing finished in %.0f secs, took %.2f GiB",
        "torch peak memory increase: ",
        "Total non KV cache memory: ",
        "KV cache size: %s tokens",
    ):
        assert fragment in sources, fragment


def test_a_negative_kv_cache_figure_is_read_with_its_sign():
    # vLLM 0.32 logs format_gib(requested - non-KV memory - graphs): below zero when the share held too little
    line = "(EngineCore_DP0 pid=4123) INFO 11-22 10:01:15 [gpu_worker.py:760] Available KV cache memory: -0.53 GiB\n"
    assert parse_vllm_memory(line) == {"kv_cache_gib": -0.53}


def test_at_the_default_level_vllms_non_kv_memory_comes_from_unsloths_lines():
    # vLLM 0.32 says "Total non KV cache memory" only at debug level; Unsloth prints its share and the card
    log = (
        "Unsloth: vLLM loading unsloth/Llama-3.2-3B-Instruct-unsloth-bnb-4bit with actual GPU utilization = 57.5%\n"
        "Unsloth: Your GPU has CUDA compute capability 8.6 with VRAM = 24.0 GB.\n"
        + "\n".join(line for line in V1_LOG.splitlines() if " DEBUG " not in line)
    )
    figures = parse_vllm_memory(log)
    assert figures["vllm_share_gib"] == 13.8
    assert figures["non_kv_cache_gib"] == round(13.8 - 10.45, 3)
    # where vLLM states it (debug level), its own figure stands
    assert parse_vllm_memory(log + "\n" + V1_LOG)["non_kv_cache_gib"] == 3.63
