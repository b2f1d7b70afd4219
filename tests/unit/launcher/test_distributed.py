"""launcher.run.distributed: the accelerate and DeepSpeed configuration, an attempt's command line and environment,
the vLLM server's start, health check and stop, the merged outcome of several ranks; and (slow) a real
two-process data-parallel GRPO run of the tiny model through `accelerate launch` on CPU (gloo), the real trainer
writing the shared outputs from rank 0 only."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from contract import attempt as contract
from contract.errors import UsageError
from launcher.card import topology as topo
from launcher.memory.estimate import ZERO3_MAX_LIVE_ELEMENTS, ZERO3_PREFETCH_ELEMENTS, ZERO_BUCKET_ELEMENTS
from launcher.run import distributed as dist
from launcher.run import vllm_server as vs
from profiles.load import load_profile
from support.waiting import finish, run_to_end

REPO = Path(__file__).resolve().parents[3]
PROFILES = REPO / "profiles"
TRAIN_PY = str(REPO / "train.py")


def profile(name, *overrides):
    return load_profile(PROFILES / f"{name}.yaml", list(overrides))


def write_profile(p, attempt_dir: Path) -> None:
    attempt_dir.mkdir(parents=True, exist_ok=True)
    (attempt_dir / "profile.yaml").write_text(p.to_yaml(), encoding="utf-8")


# ---------------------------------------------------------------------------------------------------
# Topology and GPU assignment


def test_topology_defaults_to_one_machine():
    assert topo.topology({}) == topo.Topology(1, 0, "127.0.0.1", None)


def test_topology_of_a_multi_node_run():
    env = {"GRPO_NUM_MACHINES": "4", "GRPO_MACHINE_RANK": "3", "GRPO_MAIN_ADDRESS": "10.1.2.3"}
    assert topo.topology(env) == topo.Topology(4, 3, "10.1.2.3", 29500)


@pytest.mark.parametrize(
    "env, words",
    [
        ({"GRPO_NUM_MACHINES": "2"}, "GRPO_MAIN_ADDRESS must name machine 0"),
        (
            {"GRPO_NUM_MACHINES": "2", "GRPO_MACHINE_RANK": "2", "GRPO_MAIN_ADDRESS": "h"},
            "GRPO_MACHINE_RANK=2: must be between 0 and 1",
        ),
        ({"GRPO_NUM_MACHINES": "two"}, "GRPO_NUM_MACHINES='two': expected a whole number"),
    ],
)
def test_bad_topology_is_refused(env, words):
    with pytest.raises(UsageError, match=words):
        topo.topology(env)


def test_training_gpus_come_first_then_the_servers():
    p = profile("multi-8x80gb-qwen2.5-14b")
    assert topo.gpu_assignment(p, env={}) == (["0", "1", "2", "3", "4", "5"], ["6", "7"])
    env = {"CUDA_VISIBLE_DEVICES": "7,6,5,4,3,2,1,0"}
    assert topo.gpu_assignment(p, env=env) == (["7", "6", "5", "4", "3", "2"], ["1", "0"])
    with pytest.raises(UsageError, match="needs 8 GPUs on this machine .6 training \\+ 2 vLLM server.*shows 4"):
        topo.gpu_assignment(p, env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})


def test_on_two_machines_each_trains_half_and_only_machine_0_serves():
    p = profile("multi-8x80gb-qwen2.5-14b")
    base = {"GRPO_NUM_MACHINES": "2", "GRPO_MAIN_ADDRESS": "10.0.0.1"}
    assert topo.gpu_assignment(p, env={**base, "GRPO_MACHINE_RANK": "0"}) == (["0", "1", "2"], ["3", "4"])
    assert topo.gpu_assignment(p, env={**base, "GRPO_MACHINE_RANK": "1"}) == (["0", "1", "2"], [])
    with pytest.raises(UsageError, match="num_gpus 6 cannot be split evenly over 4 machines"):
        topo.processes_per_machine(p, topo.Topology(4, 0, "h", 1))


# ---------------------------------------------------------------------------------------------------
# Configuration files


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_deepspeed_config_uses_the_estimators_buckets(stage):
    p = profile("multi-8x80gb-qwen2.5-14b", f"zero_stage={stage}")
    zero = dist.deepspeed_config(p)["zero_optimization"]
    assert zero["stage"] == stage
    assert zero["reduce_bucket_size"] == ZERO_BUCKET_ELEMENTS
    if stage < 3:
        assert zero["allgather_bucket_size"] == ZERO_BUCKET_ELEMENTS
        assert not any(k.startswith("stage3_") for k in zero)
    else:
        assert zero["stage3_prefetch_bucket_size"] == ZERO3_PREFETCH_ELEMENTS
        assert zero["stage3_max_live_parameters"] == ZERO3_MAX_LIVE_ELEMENTS
        assert "allgather_bucket_size" not in zero
    config = dist.deepspeed_config(p)
    # the Trainer fills these from the GRPOConfig, so DeepSpeed and TRL cannot disagree
    for key in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping"):
        assert config[key] == "auto"


def test_launch_files_for_zero2(tmp_path):
    p = profile("multi-8x80gb-qwen2.5-14b").replace(zero_stage=2, optim="adamw_torch")
    path = dist.write_launch_files(p, tmp_path, env={})
    config = yaml.safe_load(path.read_text())
    assert config["distributed_type"] == "DEEPSPEED"
    assert (config["num_processes"], config["num_machines"], config["machine_rank"]) == (6, 1, 0)
    assert config["gpu_ids"] == "0,1,2,3,4,5"
    # no mixed_precision under DeepSpeed: accelerate would hand it to DeepSpeedPlugin, which refuses it
    assert "mixed_precision" not in config and config["use_cpu"] is False
    assert config["deepspeed_config"]["deepspeed_config_file"] == str(tmp_path / "deepspeed.json")
    assert config["deepspeed_config"]["zero3_init_flag"] is False
    assert json.loads((tmp_path / "deepspeed.json").read_text())["zero_optimization"]["stage"] == 2
    assert 0 < config["main_process_port"] < 65536
    assert "main_process_ip" not in config


def test_launch_files_for_ddp_and_multi_node(tmp_path):
    p = profile("multi-4x80gb-qwen2.5-14b")
    env = {
        "GRPO_NUM_MACHINES": "3",
        "GRPO_MACHINE_RANK": "1",
        "GRPO_MAIN_ADDRESS": "10.0.0.1",
        "GRPO_MAIN_PORT": "29611",
    }
    config = yaml.safe_load(dist.write_launch_files(p, tmp_path, env=env).read_text())
    assert config["distributed_type"] == "MULTI_GPU"
    assert (config["num_processes"], config["num_machines"], config["machine_rank"]) == (3, 3, 1)
    assert (config["main_process_ip"], config["main_process_port"]) == ("10.0.0.1", 29611)
    # c10d at machine 0's address (accelerate passes it as the rendezvous endpoint only without same_network)
    assert (config["rdzv_backend"], config["same_network"]) == ("c10d", False)
    assert config["gpu_ids"] == "0"  # one training GPU per machine; the server only on machine 0
    assert (tmp_path / "accelerate-machine1.yaml").is_file() and not (tmp_path / "accelerate.yaml").exists()
    assert not (tmp_path / "deepspeed.json").exists()


def test_accelerate_reads_the_generated_files(tmp_path):
    from accelerate.commands.config.config_args import load_config_from_file

    for name, overrides, kind in (
        ("multi-8x80gb-qwen2.5-14b", ("zero_stage=2", "optim=adamw_torch"), "DEEPSPEED"),
        ("multi-4x80gb-qwen2.5-14b", (), "MULTI_GPU"),
        ("cpu-tiny-4gen", ("num_gpus=2",), "MULTI_GPU"),
    ):
        folder = tmp_path / name
        config = load_config_from_file(str(dist.write_launch_files(profile(name, *overrides), folder, env={})))
        assert str(config.distributed_type).endswith(kind)
        assert config.num_processes == profile(name, *overrides).num_gpus


# ---------------------------------------------------------------------------------------------------
# The attempt's command and environment


def test_single_gpu_command_is_the_plain_script(tmp_path):
    p = profile("gpu-24gb-llama3.1-8b")
    argv = dist.attempt_argv(p, tmp_path, "ckpt/checkpoint-50", python="py")
    assert argv == [
        "py",
        TRAIN_PY,
        "attempt",
        "--profile",
        str(tmp_path / "profile.yaml"),
        "--attempt-dir",
        str(tmp_path),
        "--resume-from",
        "ckpt/checkpoint-50",
    ]
    assert not (tmp_path / "accelerate.yaml").exists()
    assert dist.launch_env(p, {"A": "1"}) == {"A": "1"}


def test_distributed_command_goes_through_accelerate(tmp_path):
    p = profile("multi-8x80gb-qwen2.5-14b")
    with pytest.raises(ValueError, match="write_launch_files first"):
        dist.attempt_argv(p, tmp_path / "unwritten", python="py")  # builds an argv, writes nothing
    assert not (tmp_path / "unwritten").exists()
    config = dist.write_launch_files(p, tmp_path, env={})
    argv = dist.attempt_argv(p, tmp_path, python="py", launch_config=config)
    assert argv == [
        "py",
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(tmp_path / "accelerate.yaml"),
        TRAIN_PY,
        "attempt",
        "--profile",
        str(tmp_path / "profile.yaml"),
        "--attempt-dir",
        str(tmp_path),
    ]
    env = dist.launch_env(p, {"UNSLOTH_VLLM_STANDBY": "1", "GRPO_VLLM_PORT": "8123"})
    assert env["GRPO_TRAIN_NO_UNSLOTH"] == "1" and "UNSLOTH_VLLM_STANDBY" not in env
    assert (env["GRPO_VLLM_HOST"], env["GRPO_VLLM_PORT"], env["GRPO_VLLM_GROUP_PORT"]) == ("127.0.0.1", "8123", "51216")
    env = dist.launch_env(p, {})  # TRL's own defaults, never a port picked on this machine alone
    assert (env["GRPO_VLLM_PORT"], env["GRPO_VLLM_GROUP_PORT"]) == ("8000", "51216")


def test_server_command_matches_trl_vllm_serve():
    from trl.scripts.vllm_serve import ScriptArguments

    p = profile("multi-8x80gb-qwen2.5-14b", "vllm_tensor_parallel=2")
    argv = vs.server_command(p, 8011, python="py")
    assert argv[:4] == ["py", "-m", "trl.cli.main", "vllm-serve"]
    options = dict(zip(argv[4::2], argv[5::2]))
    assert options == {
        "--model": "unsloth/Qwen2.5-14B-Instruct",
        "--tensor_parallel_size": "2",
        "--data_parallel_size": "1",
        "--host": "0.0.0.0",
        "--port": "8011",
        "--gpu_memory_utilization": "0.9",
        "--max_model_len": "2304",
    }
    fields = set(ScriptArguments.__dataclass_fields__)
    assert {o[2:] for o in options} <= fields


# ---------------------------------------------------------------------------------------------------
# The vLLM server: a small HTTP server stands in for `trl vllm-serve` (vLLM needs a GPU)

FAKE_SERVER = Path(__file__).resolve().parents[3] / "tests" / "support" / "fake_vllm_server.py"


def fake_server(delay=0.5, port=None):
    port = port or topo.free_port()
    return [sys.executable, str(FAKE_SERVER), "--delay", str(delay), "--port", str(port)], port


# The product's wait for a server to answer, given room only a hang fills: the fake server answers once its
# interpreter has started and its delay passed (seconds on a busy machine)
ANSWER_S = 600


def test_server_is_health_checked_and_stopped(tmp_path):
    command, port = fake_server(delay=0.5)
    server = vs.VllmServer(profile("multi-2x24gb-llama3.1-8b"), tmp_path, ["1"], port=port, command=command)
    assert not server.healthy()
    server.start()
    try:
        waited = server.wait_healthy(timeout=ANSWER_S, interval=0.1)
        assert waited >= 0.4  # not before its delay: a lower bound, which a busy machine only lengthens
        assert server.healthy()
    finally:
        code = server.stop(grace=5)
    assert code is not None and code != 0  # it was stopped, not left running
    assert not server.healthy()
    assert "serving" in (tmp_path / "vllm-server.log").read_text()


def test_server_that_exits_is_a_clear_error(tmp_path):
    command = [sys.executable, "-c", "import sys; print('CUDA out of memory while loading'); sys.exit(7)"]
    server = vs.VllmServer(profile("multi-2x24gb-llama3.1-8b"), tmp_path, ["1"], command=command)
    server.start()
    with pytest.raises(
        vs.ServerError,
        match=r"exited with status 7 before it answered .*\n"
        r"CUDA out of memory while loading",
    ):
        server.wait_healthy(timeout=ANSWER_S, interval=0.1)


def test_server_that_never_answers_times_out_and_is_stopped(tmp_path):
    command, _port = fake_server(delay=60)
    server = vs.VllmServer(profile("multi-2x24gb-llama3.1-8b"), tmp_path, [], command=command)
    server.start()
    with pytest.raises(vs.ServerError, match="did not answer .* within 1 s"):
        server.wait_healthy(timeout=1, interval=0.1)
    assert server.proc.poll() is not None


def test_start_server_uses_the_server_gpus_and_port(tmp_path):
    port = topo.free_port()
    command, _ = fake_server(delay=0.0, port=port)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0,1", "GRPO_VLLM_PORT": str(port)}
    env.pop("GRPO_NUM_MACHINES", None)
    server = vs.start_server(profile("multi-2x24gb-llama3.1-8b"), tmp_path, env=env, timeout=ANSWER_S, command=command)
    try:
        assert server.gpu_ids == ["1"] and server.port == port and server.healthy()
    finally:
        server.stop(grace=5)
    assert vs.start_server(profile("gpu-24gb-llama3.1-8b"), tmp_path, env=env) is None


# ---------------------------------------------------------------------------------------------------
# Several ranks, one outcome


def outcome(status, steps=5, peak=1.0, error=None, checkpoint=None):
    return {
        "status": status,
        "steps": steps,
        "checkpoint": checkpoint,
        "error": error,
        "error_text": error,
        "traceback": None,
        "peak_gib": peak,
        "estimate_gib": 2.0,
    }


def test_an_oom_in_any_rank_is_the_attempts_oom(tmp_path):
    (tmp_path / "outcome.json").write_text(
        json.dumps(outcome("interrupted", 7, 10.0, "stopped by a signal", "d/checkpoint-5"))
    )
    (tmp_path / "outcome-rank1.json").write_text(json.dumps(outcome("ok", 7, 11.0)))
    (tmp_path / "outcome-rank2.json").write_text(json.dumps(outcome("oom", 6, 12.5, "CUDA out of memory.")))
    merged = contract.merge_outcomes(tmp_path)
    assert merged.status == "oom"
    assert merged.error == "rank 2: CUDA out of memory."
    assert (merged.steps, merged.checkpoint, merged.peak_gib) == (7, "d/checkpoint-5", 12.5)
    assert (merged.rank, merged.ranks) == (2, 3)


def test_one_rank_outcome_is_read_unchanged(tmp_path):
    assert contract.merge_outcomes(tmp_path) is None
    (tmp_path / "outcome.json").write_text(json.dumps(outcome("ok", 3, 0.5)))
    merged = contract.merge_outcomes(tmp_path)
    assert (merged.status, merged.steps, merged.error, merged.ranks) == ("ok", 3, None, 1)


# ---------------------------------------------------------------------------------------------------
# The real thing: two processes, gloo, the tiny model, through `accelerate launch`

# Runs train.py unchanged; only records, in each rank, a digest of the model before and after training.
RECORDER = textwrap.dedent("""
    import hashlib, json, os, sys
    sys.path.insert(0, {repo!r})
    import torch
    import trl

    def digest(tensors):
        h = hashlib.sha256()
        for name, tensor in sorted(tensors):
            h.update(name.encode())
            h.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()

    class Recorded(trl.GRPOTrainer):
        def train(self, *args, **kwargs):
            model = self.model
            trained = lambda: [(n, p) for n, p in model.named_parameters() if p.requires_grad]
            before = {{"all": digest(model.state_dict().items()), "trained": digest(trained())}}
            result = super().train(*args, **kwargs)
            rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
            record = {{"rank": rank, "world_size": self.accelerator.num_processes,
                       "backend": torch.distributed.get_backend() if torch.distributed.is_initialized() else None,
                       "steps": self.state.global_step, "before": before,
                       "after": {{"all": digest(model.state_dict().items()), "trained": digest(trained())}}}}
            out = os.path.join(self.args.output_dir, f"weights-rank{{rank}}.json")
            with open(out, "w") as handle:
                json.dump(record, handle)
            return result

    trl.GRPOTrainer = Recorded
    import train
    sys.exit(train.main(sys.argv[1:]))
""")


def test_two_process_data_parallel_grpo_on_cpu(tmp_path):
    attempt = tmp_path / "attempt-01-cpu-tiny-4gen"
    p = profile("cpu-tiny-4gen", "num_gpus=2", "max_steps=3", "save_steps=3", "eval_samples=0", "train_samples=64")
    assert p.distributed
    write_profile(p, attempt)
    argv = dist.attempt_argv(p, attempt, launch_config=dist.write_launch_files(p, attempt, env={}))
    config = yaml.safe_load((attempt / "accelerate.yaml").read_text())
    assert (config["num_processes"], config["use_cpu"]) == (2, True)
    recorder = tmp_path / "recorded_train.py"
    recorder.write_text(RECORDER.format(repo=str(REPO)))
    argv[argv.index(TRAIN_PY)] = str(recorder)
    env = dist.launch_env(p)
    for name in ("GRPO_NUM_MACHINES", "GRPO_INJECT_OOM", "CUDA_VISIBLE_DEVICES"):
        env.pop(name, None)
    assert env["GRPO_TRAIN_NO_UNSLOTH"] == "1"
    result = run_to_end(argv, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = [json.loads((attempt / f"weights-rank{r}.json").read_text()) for r in (0, 1)]
    for rank, record in enumerate(records):
        assert (record["rank"], record["world_size"], record["backend"], record["steps"]) == (rank, 2, "gloo", 3)
        assert record["after"]["trained"] != record["before"]["trained"], "no weight moved: nothing trained"
    assert records[0]["before"]["all"] == records[1]["before"]["all"]
    assert records[0]["after"]["all"] == records[1]["after"]["all"], "the ranks disagree on the weights"
    # each rank wrote its own outcome; the shared files come from rank 0 alone
    ranks = [json.loads((attempt / name).read_text()) for name in ("outcome.json", "outcome-rank1.json")]
    assert [(o["status"], o["steps"]) for o in ranks] == [("ok", 3), ("ok", 3)]
    merged = contract.merge_outcomes(attempt)
    assert (merged.status, merged.steps, merged.ranks) == ("ok", 3, 2)
    assert [json.loads(line)["step"] for line in (attempt / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]
    assert result.stdout.count("attempt 'cpu-tiny-4gen' done:") == 1
    assert result.stdout.count("attempt 'cpu-tiny-4gen': transformers on CPU") == 1
    assert json.loads((attempt / "summary.json").read_text())["steps"] == 3
    assert (attempt / "adapter" / "adapter_config.json").is_file() and (attempt / "report.md").is_file()
    assert sorted(p.name for p in attempt.glob("outcome*")) == ["outcome-rank1.json", "outcome.json"]
    assert not list(attempt.glob(".write-test*"))


def _ended(pid: int) -> bool:
    """Gone, or a zombie waiting for a reaper (it has stopped running either way)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


HANG_S = 600  # a wait that only a hang outlasts


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only (prctl)")
def test_children_get_sigterm_when_the_supervisor_is_killed():
    """A supervisor killed with SIGKILL must not leave a training child or a vLLM server holding the GPU."""
    parent_code = (
        "import subprocess, sys, time\n"
        "from launcher.run.child import parent_death_signal\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],\n"
        "                         preexec_fn=parent_death_signal(), start_new_session=True)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    child_pid = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    finish(parent)
    started = time.monotonic()
    # the kernel signals at once, the child's death takes a moment on a busy machine; the limit only ends a wait
    # that never would
    while not _ended(child_pid) and time.monotonic() - started < HANG_S:
        time.sleep(0.1)
    if not _ended(child_pid):
        os.kill(child_pid, signal.SIGKILL)
        raise AssertionError(f"the child {child_pid} outlived its killed parent by {HANG_S} s (no SIGTERM came)")


def test_the_server_is_started_on_a_local_folder(tmp_path):
    # a folder is used as it is (no download); a hub id is fetched before the health wait starts counting
    assert vs.local_model(str(tmp_path)) == str(tmp_path)
    argv = vs.server_command(profile("multi-2x24gb-llama3.1-8b"), 8011, python="py", model=str(tmp_path))
    assert argv[argv.index("--model") + 1] == str(tmp_path)


def test_a_hub_model_is_fetched_before_the_servers_timed_start(tmp_path, monkeypatch):
    import huggingface_hub

    calls = []

    def fetch(repo_id, **kwargs):
        calls.append(("fetch", repo_id, kwargs["token"], tuple(kwargs["allow_patterns"])))
        return str(tmp_path)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fetch)
    assert vs.local_model("unsloth/Llama-3.1-8B-Instruct", {"HF_TOKEN": "t0k"}) == str(tmp_path)
    assert calls[0][:3] == ("fetch", "unsloth/Llama-3.1-8B-Instruct", "t0k") and "*.safetensors" in calls[0][3]

    class Started(Exception):
        pass

    def start(server):
        calls.append(("start", server.command[server.command.index("--model") + 1]))
        raise Started  # the health wait would begin here

    monkeypatch.setattr(vs.VllmServer, "start", start)
    with pytest.raises(Started):
        vs.start_server(profile("multi-2x24gb-llama3.1-8b"), tmp_path, env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert [c[0] for c in calls] == ["fetch", "fetch", "start"] and calls[-1][1] == str(tmp_path)


def test_a_failed_fetch_is_one_line_with_the_fix(monkeypatch):
    import huggingface_hub

    def refuse(repo_id, **kwargs):
        raise OSError("401 Client Error: Unauthorized for url\nmore detail")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    with pytest.raises(vs.ServerError) as caught:
        vs.local_model("meta-llama/Llama-3.1-8B-Instruct", {})
    assert "401 Client Error" in str(caught.value) and "HF_TOKEN" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_shipped_servers_run_one_copy_of_a_dense_model():
    # TRL 1.15's vllm-serve: "Setting this above `1` for dense models is not supported/useful and will error out"
    # (its --data_parallel_size help); every catalogued model is dense, so a server is one (tensor-parallel) copy
    from trl.scripts.vllm_serve import ScriptArguments

    help_text = ScriptArguments.__dataclass_fields__["data_parallel_size"].metadata["help"]
    assert "dense models" in help_text and "error" in help_text
    for path in sorted(Path("profiles").glob("multi-*.yaml")):
        p = load_profile(path)
        if p.uses_vllm_server:
            argv = vs.server_command(p, 8011, python="py")
            options = dict(zip(argv[4::2], argv[5::2]))
            assert options["--data_parallel_size"] == "1", path.name
            assert int(options["--tensor_parallel_size"]) == p.vllm_server_gpus, path.name
