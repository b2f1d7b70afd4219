"""Server mode across two training "machines" (a c10d rendezvous on 127.0.0.1) and a vLLM server node of its
own running vLLM's CPU build, up to the weight sync, which needs NCCL on CUDA."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def nodes(run_scenario):
    return run_scenario("server_node", "sampling")


def test_every_machine_ends_with_machine_0s_status(nodes):
    assert nodes.result["codes"] == {"server": 0, "machine-1": 0, "machine-0": 0}, nodes.log[-4000:]
    assert nodes.result["statuses"] == ["ok"]
    state = nodes.result["server_state"]
    assert state["status"] == "ready" and state["url"].endswith(f":{nodes.result['ports'][0]}")


def test_both_machines_ranks_reach_the_one_server_and_generate(nodes):
    ranks = nodes.result["ranks"]
    assert sorted(r["rank"] for r in ranks) == [0, 1] and {r["world_size"] for r in ranks} == {2}
    assert sorted(r["machine"] for r in ranks) == ["0", "1"]  # one rank on each machine
    server_port, group_port = nodes.result["ports"]
    for rank in ranks:
        assert rank["config_mode"] == "server"
        assert rank["server"] == ["127.0.0.1", server_port] and rank["group_port"] == group_port
        assert len(rank["completion_ids"]) == 2 and all(len(ids) == 8 for ids in rank["completion_ids"])


def test_the_weight_sync_is_where_a_cpu_stops(nodes):
    refusals = {r["rank"]: r["weight_sync"] for r in nodes.result["ranks"]}
    assert refusals[1] is None  # only the main process joins the weight-sync group
    assert refusals[0].startswith("NotImplementedError") and "NCCL" in refusals[0] and "CUDA" in refusals[0]
