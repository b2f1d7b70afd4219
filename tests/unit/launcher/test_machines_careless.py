"""Several machines set up carelessly get exit 2 naming the variable or option and the fix: a machine count
past any cluster (it ended in a MemoryError), one that is not a number on a machine without a GPU, `plan
--nodes` without a card to plan the nodes for, a server node for a profile that has no vLLM server, and a
follower whose own command line is wrong (or differs from machine 0's, which is said)."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from commands import main
from contract.errors import UsageError
from launcher.card.detect import Machine
from launcher.card.topology import MAX_MACHINES, topology
from launcher.plan.choose import make_plan
from launcher.plan.request import PlanRequest
from launcher.run.follow import command_differences
from launcher.run.request import RunRequest
from launcher.run.supervise import supervise
from profiles.load import profile_from_dict
from support.fake_runs import CPU_SETTINGS, FAKE_CHILD

CPU_MACHINE = Machine(gpus=[], message="no GPU", host_ram_gib=24.0, host_free_gib=20.0)


@pytest.mark.parametrize("count", ["99999999999", str(MAX_MACHINES + 1)])
def test_a_machine_count_past_any_cluster_is_refused(count):
    with pytest.raises(UsageError) as info:
        topology({"GRPO_NUM_MACHINES": count, "GRPO_MAIN_ADDRESS": "10.0.0.1"})
    assert "GRPO_NUM_MACHINES" in str(info.value) and str(MAX_MACHINES) in str(info.value)


def test_a_slurm_node_count_past_any_cluster_is_refused():
    with pytest.raises(UsageError) as info:
        topology({"SLURM_STEP_NUM_NODES": "99999999999", "SLURM_STEP_NODELIST": "n1"})
    assert "SLURM_STEP_NUM_NODES" in str(info.value)


def test_a_machine_count_that_is_no_number_is_refused_by_plan_without_a_gpu(monkeypatch, capsys):
    monkeypatch.setenv("GRPO_NUM_MACHINES", "abc")
    assert main(["plan", "--json"]) == 2
    assert "GRPO_NUM_MACHINES='abc'" in capsys.readouterr().err


def test_plan_for_nodes_without_a_card_is_refused(monkeypatch, capsys):
    from commands import options

    monkeypatch.setattr(options, "machine_of", lambda args: CPU_MACHINE)
    assert main(["plan", "--nodes", "2", "--json"]) == 2
    err = capsys.readouterr().err
    assert "--nodes 2" in err and "--gpu-memory" in err


def test_a_server_node_for_a_profile_without_a_server_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_SERVER_NODE", "node-2")
    monkeypatch.setenv("GRPO_RUN_ID", "job-1")
    monkeypatch.setenv("GRPO_MACHINE_TIMEOUT", "5")
    settings = dict(CPU_SETTINGS, name="a", max_steps=4, save_steps=2, eval_samples=0, num_generations=4)
    settings.update(max_completion_length=64, per_device_train_batch_size=4, gradient_accumulation_steps=1)
    plan = make_plan(PlanRequest([profile_from_dict(settings, "<test>")], CPU_MACHINE))
    text = io.StringIO()
    code = supervise(
        plan, RunRequest(tmp_path / "out"), child_command=FAKE_CHILD, console=Console(file=text, width=400)
    )
    assert code == 2, text.getvalue()
    assert "GRPO_SERVER_NODE" in text.getvalue() and "serve nothing" in text.getvalue()
    run = next((tmp_path / "out").glob("run-*"))
    decisions = [json.loads(line) for line in (run / "machines" / "decisions.jsonl").read_text().splitlines()]
    assert [(d["action"], d["exit_code"]) for d in decisions] == [("stop", 2)]  # the server node is told
    assert not list(run.glob("attempt-*"))


def test_a_follower_with_a_wrong_set_is_refused_before_it_follows(tmp_path, monkeypatch, capsys):
    for name, value in {
        "GRPO_NUM_MACHINES": "2",
        "GRPO_MACHINE_RANK": "1",
        "GRPO_MAIN_ADDRESS": "127.0.0.1",
        "GRPO_RUN_ID": "job-1",
        "GRPO_MACHINE_TIMEOUT": "1",
    }.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "out"
    out.mkdir()
    code = main(["train", "--set", "lora_rnk=8", "--output-dir", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "lora_rnk" in err


def test_a_followers_command_line_that_differs_from_machine_0s_is_named():
    mine = {"profile": None, "overrides": ["max_steps=10"]}
    theirs = {"profile": "gpu-24gb-llama3.1-8b", "overrides": ["max_steps=20"]}
    said = command_differences(mine, theirs)
    assert "max_steps=10" in said and "max_steps=20" in said and "gpu-24gb-llama3.1-8b" in said
    assert command_differences(theirs, dict(theirs)) is None
    assert command_differences(mine, None) is None  # an older machine 0 that does not say
