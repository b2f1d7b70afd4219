"""Server mode's client side against a real vLLM server, up to the weight sync (which needs CUDA: NCCL)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def served(run_scenario):
    return run_scenario("server", "sampling")


def test_the_server_serves_what_the_project_asks_for(served):
    result = served.result
    # the project's own command (trl vllm-serve), as TRL translates it for vLLM's server
    assert "vllm-serve" in result["project_command"]
    served_with = result["served_with"]
    assert served_with[served_with.index("--port") + 1] == str(result["port"])
    assert served_with[served_with.index("--max-model-len") + 1] == "256"
    assert "--weight-transfer-config" in served_with
    assert result["config_mode"] == "server"


def test_trls_client_generates_through_it(served):
    completions = served.result["completion_ids"]
    assert len(completions) == 2 and all(len(ids) == 8 for ids in completions)
    assert served.result["prompt_ids"] and served.result["prompt_ids"][0]


def test_the_weight_sync_is_refused_on_a_cpu_for_want_of_cuda(served):
    refusal = served.result["weight_sync"]
    assert refusal is not None and refusal.startswith("NotImplementedError")
    assert "NCCL" in refusal and "CUDA" in refusal
