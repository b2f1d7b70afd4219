"""The runs the vLLM tests judge, each in a process of its own (vLLM starts its engine once per process and
keeps process-wide state: a torch.distributed group in colocate mode, worker processes otherwise):

    python tests_vllm/scenarios.py colocate MODEL_DIR OUT_DIR [--lora]
    python tests_vllm/scenarios.py evaluate MODEL_DIR OUT_DIR
    python tests_vllm/scenarios.py server MODEL_DIR OUT_DIR
    python tests_vllm/scenarios.py server_node MODEL_DIR OUT_DIR

Each writes OUT_DIR/result.json with what it measured; the tests in this folder assert on it. Nothing here
decides pass or fail, so that a broken sync or call shows up as a figure the test names.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CPU_DEFAULT = REPO / "profiles" / "cpu-tiny-8gen.yaml"
COLOCATE_STEPS = 3
LORA_RANK = 16


def _engine_environment() -> None:
    # 1 GiB of KV cache (vLLM's CPU build sizes it from this, not from a share of memory); the project's own
    # environment never holds Unsloth here, said explicitly so that the plain TRL + PEFT path is taken
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ["GRPO_TRAIN_NO_UNSLOTH"] = "1"


def keep_plain_linear_weights() -> None:
    """Make this process's vLLM engines keep plain linear weights, as the GPU build does. The CPU build packs
    each linear layer's weights for oneDNN once they are loaded and drops the originals (the LM head keeps
    its weight but computes from the packed copy), so an in-place update, which TRL's colocate sync is
    (the model's load_weights, one parameter at a time), finds no weight to write ("'Parameter' object has no
    attribute 'weight_loader'") or writes one that generation never reads. With torch's linear on the plain
    weights, what the sync writes is what generates, as on a GPU."""
    import torch
    from vllm.model_executor.layers import utils

    def plain(layer, remove_weight: bool) -> None:
        layer.cpu_linear = torch.nn.functional.linear

    utils.dispatch_cpu_unquantized_gemm = plain


# ------------------------------------------------------------------------------------------------ weights


def fused_weights(weights: dict) -> dict:
    """Hugging Face Llama weights under vLLM's names: q/k/v become one qkv_proj, gate/up one gate_up_proj
    (vLLM concatenates them in that order along the output dimension)."""
    import torch

    out = {}
    for name, value in weights.items():
        if ".self_attn.q_proj." in name:
            parts = [weights[name.replace("q_proj", p)] for p in ("q_proj", "k_proj", "v_proj")]
            out[name.replace("q_proj", "qkv_proj")] = torch.cat(parts, dim=0)
        elif ".mlp.gate_proj." in name:
            parts = [weights[name.replace("gate_proj", p)] for p in ("gate_proj", "up_proj")]
            out[name.replace("gate_proj", "gate_up_proj")] = torch.cat(parts, dim=0)
        elif not any(p in name for p in (".k_proj.", ".v_proj.", ".up_proj.")):
            out[name] = value
    return out


def trained_weights(model) -> dict:
    """The weights the policy generates with, under Hugging Face names: for a PEFT model each adapted matrix
    is W + (alpha / r) B A, computed here from the adapter's own factors (not through PEFT's merge, which is
    what the trainer's sync uses)."""
    import torch

    if not hasattr(model, "peft_config"):
        return {n: p.detach().clone() for n, p in model.named_parameters()}
    config = model.peft_config["default"]
    scaling = config.lora_alpha / config.r
    params = dict(model.named_parameters())
    out = {}
    for name, param in params.items():
        if "lora_" in name:
            continue
        clean = name.removeprefix("base_model.model.").replace(".base_layer", "")
        value = param.detach().clone()
        if ".base_layer." in name:
            stem = name.replace(".base_layer.weight", "")
            a, b = params[f"{stem}.lora_A.default.weight"], params[f"{stem}.lora_B.default.weight"]
            value = value + scaling * (b.detach() @ a.detach())
        out[clean] = value
    return {n: v for n, v in out.items() if v is not None and torch.is_tensor(v)}


def engine_weights(llm) -> dict:
    """The weights a colocated engine holds now, under vLLM's names."""
    model = llm.llm_engine.model_executor.driver_worker.model_runner.model
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def max_difference(engine: dict, expected: dict) -> tuple[float, list[str]]:
    """The largest absolute difference over the weights both sides name, and those names."""
    expected = fused_weights(expected)
    names = sorted(set(engine) & set(expected))
    worst = 0.0
    for name in names:
        held, want = engine[name], expected[name]
        if held.shape != want.shape and held.shape[1:] == want.shape[1:] and held.shape[0] > want.shape[0]:
            held = held[: want.shape[0]]  # vLLM pads the vocabulary rows of the embedding to a multiple of 64
        worst = max(worst, float((held.float() - want.to(held.dtype).float()).abs().max()))
    return worst, names


# ------------------------------------------------------------------------------------------------ colocate


def colocate(model_dir: str, out_dir: Path, lora: bool) -> dict:
    """A few GRPO steps through TRL's colocated vLLM engine, with the project's profile loader, config
    builder, backend (transformers + PEFT, the CPU log-prob fallback) and rewards."""
    _engine_environment()
    from profiles.load import load_profile

    profile = load_profile(
        CPU_DEFAULT,
        [
            f"model={model_dir}",
            f"lora_rank={LORA_RANK if lora else 0}",
            f"lora_alpha={2 * LORA_RANK}",
            "num_generations=4",
            "per_device_train_batch_size=16",
            "max_completion_length=32",
            f"max_steps={COLOCATE_STEPS}",
            "learning_rate=0.01",
            "warmup_ratio=0",
            "lr_scheduler_type=constant",
            "save_steps=1000",
            "eval_samples=0",
            "train_samples=64",
            "gpu_memory_utilization=0.3",
        ],
    )
    from trainer.backends import load_model, open_backend

    backend = open_backend(profile)
    model, tokenizer = load_model(backend, profile, model_dir)
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from rewards import get_reward_funcs
    from tasks import load_task
    from trainer.config import build_grpo_config

    args = build_grpo_config(profile, str(out_dir / "trainer"), device=backend.device, bf16=backend.bf16, use_vllm=True)
    snapshots: dict[int, dict] = {}

    class Snapshots(TrainerCallback):
        """The policy's weights after every optimizer step, by global step."""

        def on_step_end(self, args, state, control, **kwargs):
            snapshots[state.global_step] = trained_weights(model)

    rows = load_task(profile, "train", limit=profile.train_samples, seed=profile.seed)
    reward_funcs, _ = get_reward_funcs(profile.rewards)
    keep_plain_linear_weights()  # TRL starts its engine in this process (external_launcher)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[Snapshots()],
    )
    llm = trainer.vllm_generation.llm
    snapshots[0] = trained_weights(model)
    engine_start = engine_weights(llm)
    started = time.time()
    trainer.train()
    train_seconds = time.time() - started
    engine_end = engine_weights(llm)
    # A step generates before it updates: after the last step, the engine holds the weights of the step
    # before it, pushed by the sync that opened the last step's generation.
    synced_step = COLOCATE_STEPS - 1
    start_vs_initial, names = max_difference(engine_start, snapshots[0])
    end_vs_synced, _ = max_difference(engine_end, snapshots[synced_step])
    end_vs_initial, _ = max_difference(engine_end, snapshots[0])
    trained_moved, _ = max_difference(fused_weights(snapshots[synced_step]), snapshots[0])
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    return {
        "lora": lora,
        "steps": trainer.state.global_step,
        "synced_step": synced_step,
        "compared": names,
        "engine_dtype": str(next(iter(engine_end.values())).dtype),
        "engine_start_vs_initial": start_vs_initial,
        "engine_end_vs_synced": end_vs_synced,
        "engine_end_vs_initial": end_vs_initial,
        "trained_moved": trained_moved,
        "generation_mode": args.vllm_mode,
        "use_vllm": args.use_vllm,
        "rewards_logged": sorted({k for entry in logged for k in entry if k.startswith("rewards/")}),
        "reward_std": [entry.get("reward_std") for entry in logged],
        "train_seconds": round(train_seconds, 1),
    }


# ------------------------------------------------------------------------------------------------ evaluate


class EngineAsUnsloth:
    """The two calls evaluation makes on an Unsloth model with fast_inference (`fast_generate`, which
    is the engine's generate, and `load_lora`, which names a saved adapter as a LoRA request), over a real
    vLLM engine. It records the requests that reach the engine."""

    def __init__(self, llm, generation_config):
        self.llm = llm
        self.generation_config = generation_config
        self.requests: list = []
        self.lora_requests: list = []
        self.sampling: list = []
        self.outputs: list = []

    def load_lora(self, path: str):
        from vllm.lora.request import LoRARequest

        return LoRARequest("adapter", 1, path)

    def fast_generate(self, prompts, sampling_params=None, lora_request=None, use_tqdm=False):
        self.requests.extend(prompts)
        self.lora_requests.append(None if lora_request is None else lora_request.lora_path)
        self.sampling.append(sampling_params)
        outputs = self.llm.generate(
            prompts, sampling_params=sampling_params, lora_request=lora_request, use_tqdm=use_tqdm
        )
        self.outputs.extend(outputs)
        return outputs


def hf_greedy_ids(model, tokenizer, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """Greedy completion ids from transformers' generate, one prompt at a time (no padding), stopping at
    every id evaluation.generate.stop_ids names."""
    import torch

    from evaluation.generate import stop_ids

    out = []
    with torch.no_grad():
        for ids in prompts:
            generated = model.generate(
                torch.tensor([ids]),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=stop_ids(model, tokenizer),
                pad_token_id=tokenizer.pad_token_id,
            )
            out.append([int(t) for t in generated[0, len(ids) :]])
    return out


def _second_stop_token(model, tokenizer, prompts, max_new_tokens: int) -> int:
    """A token the model writes a few tokens into its first greedy completion, and not before: declared an
    extra end-of-sequence id, it must end that completion there in both engines."""
    tokens = hf_greedy_ids(model, tokenizer, prompts[:1], max_new_tokens)[0]
    special = set(tokenizer.all_special_ids)
    for position in range(4, len(tokens) - 4):
        if tokens[position] not in special and tokens[position] not in tokens[:position]:
            return int(tokens[position])
    raise RuntimeError(f"no usable stop token in {tokens}")


def evaluate(model_dir: str, out_dir: Path) -> dict:
    """evaluation through vLLM against the same evaluation through transformers' generate, for the
    base model and a LoRA adapter, with a second end-of-sequence id in the generation config."""
    _engine_environment()
    # the engine in this process, not in worker processes that import vLLM again (tens of seconds on 2 cores)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evaluation import generate as gen
    from evaluation import score as sc
    from tasks import load_task

    max_new = 24
    rows = load_task("arithmetic", "test", limit=8)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = gen.prompt_ids(tokenizer, rows)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    stop = _second_stop_token(base, tokenizer, prompts, max_new)
    # the generation config names both ids, as Gemma's names <eos> and <end_of_turn>
    base.generation_config.eos_token_id = [tokenizer.eos_token_id, stop]
    base.generation_config.save_pretrained(model_dir)

    torch.manual_seed(1)
    adapted = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        LoraConfig(
            r=LORA_RANK,
            lora_alpha=2 * LORA_RANK,
            init_lora_weights=False,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        ),
    )
    adapter_dir = out_dir / "adapter"
    adapted.save_pretrained(adapter_dir)

    from vllm import LLM

    llm = LLM(
        model=model_dir,
        dtype="float32",
        enforce_eager=True,
        max_model_len=256,
        seed=0,
        enable_lora=True,
        max_lora_rank=LORA_RANK,
        max_loras=1,
    )
    engine = EngineAsUnsloth(llm, base.generation_config)
    results = {}
    for label, hf_model, lora_path in (("base", base, None), ("lora", adapted, str(adapter_dir))):
        first = len(engine.outputs)
        greedy = gen.Greedy(max_new, use_vllm=True, lora_path=lora_path)
        texts = gen.generate(engine, tokenizer, rows, greedy)
        vllm_ids = [list(out.outputs[0].token_ids) for out in engine.outputs[first:]]
        hf_ids = hf_greedy_ids(hf_model, tokenizer, prompts, max_new)
        scored = sc.evaluate(engine, tokenizer, rows, greedy)
        results[label] = {
            "vllm_text": texts,
            "hf_text": gen.generate_hf(hf_model, tokenizer, prompts, max_new),
            "vllm_ids": vllm_ids,
            "hf_ids": hf_ids,
            "accuracy": scored["accuracy"],
            "total": scored["total"],
            "well_formed": scored["well_formed"],
        }
    sent = [request.get("prompt_token_ids") if isinstance(request, dict) else request for request in engine.requests]
    return {
        "model_dir": model_dir,
        "rows": len(rows),
        "stop_token": stop,
        "eos_token": tokenizer.eos_token_id,
        "results": results,
        "sent_prompt_ids": sent,
        "training_prompt_ids": prompts,
        "lora_requests": engine.lora_requests,
        "sampling_stop_token_ids": [sorted(getattr(p, "stop_token_ids", None) or []) for p in engine.sampling],
        "sampling_temperature": [getattr(p, "temperature", None) for p in engine.sampling],
        "max_new_tokens": max_new,
    }


# ------------------------------------------------------------------------------------------------ server

SERVER_PROFILE = REPO / "profiles" / "multi-2x24gb-llama3.1-8b.yaml"
SERVER_START_TIMEOUT_S = 600


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server(model_dir: str, out_dir: Path) -> dict:
    """Server mode's client side, up to the weight sync: the server the project would start (its
    `trl vllm-serve` command, through TRL's own translation to vLLM's server), started as vLLM's API server
    module (`trl vllm-serve` and `vllm serve` look up the package metadata of `vllm`, and this build is
    `vllm-cpu`); TRL's client at the address the project's GRPOConfig names generates through it, then asks
    for the weight-sync group, which only CUDA can give."""
    import subprocess

    from contract.environment import ENV_VLLM_HOST, ENV_VLLM_PORT
    from launcher.run.vllm_server import server_command
    from profiles.load import load_profile

    port = free_port()
    os.environ[ENV_VLLM_HOST], os.environ[ENV_VLLM_PORT] = "127.0.0.1", str(port)
    profile = load_profile(
        SERVER_PROFILE,
        [
            f"model={model_dir}",
            "max_seq_length=256",
            "max_prompt_length=128",
            "max_completion_length=64",
            "gpu_memory_utilization=0.3",
        ],
    )
    project_command = server_command(profile, port, host="127.0.0.1")
    from trl.scripts.vllm_serve import build_command, make_parser

    script_args, extra = make_parser().parse_args_and_config(
        args=project_command[project_command.index("vllm-serve") + 1 :], return_remaining_strings=True
    )
    trl_command = build_command(script_args, extra)  # [python, -m, vllm.entrypoints.cli.main, serve, MODEL, ...]
    serve = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        trl_command[4],
        *trl_command[5:],
        "--enforce-eager",
    ]
    from trainer.config import grpo_config_kwargs

    config = grpo_config_kwargs(profile, str(out_dir / "trainer"), device="cpu", bf16=False, use_vllm=True)
    env = dict(os.environ, VLLM_SERVER_DEV_MODE="1", VLLM_CPU_KVCACHE_SPACE="1")
    started = time.time()
    with open(out_dir / "server.log", "w", encoding="utf-8") as log:
        process = subprocess.Popen(serve, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        from trl.generation.vllm_client import VLLMClient

        client = VLLMClient(
            base_url=f"http://{config['vllm_server_host']}:{config['vllm_server_port']}",
            connection_timeout=SERVER_START_TIMEOUT_S,
        )
        up_seconds = time.time() - started
        generated = client.generate(
            ["Ava has 7 apples and gets 5 more. How many apples now?"], n=2, max_tokens=8, temperature=1.0
        )
        try:
            client.init_communicator(device="cpu")
            refusal = None
        except Exception as exc:  # what a CPU trainer meets at the weight sync
            refusal = f"{type(exc).__name__}: {exc}"
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
    return {
        "project_command": project_command[2:],
        "served_with": serve[2:],
        "config_mode": config["vllm_mode"],
        "port": port,
        "up_seconds": round(up_seconds, 1),
        "completion_ids": generated.get("completion_ids"),
        "prompt_ids": generated.get("prompt_ids"),
        "weight_sync": refusal,
    }


def engine_server_command(project_command: list[str]) -> list[str]:
    """The project's `trl vllm-serve` command as TRL translates it for vLLM's server, started as vLLM's API
    server module (`trl vllm-serve` looks up the package metadata of `vllm`, and this build is `vllm-cpu`)."""
    from trl.scripts.vllm_serve import build_command, make_parser

    script_args, extra = make_parser().parse_args_and_config(
        args=project_command[project_command.index("vllm-serve") + 1 :], return_remaining_strings=True
    )
    trl_command = build_command(script_args, extra)  # [python, -m, vllm.entrypoints.cli.main, serve, MODEL, ...]
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        trl_command[4],
        *trl_command[5:],
        "--enforce-eager",
    ]


def server_node(model_dir: str, out_dir: Path) -> dict:
    """Server mode across two training "machines" and a server node of its own, up to the weight sync: the
    project's supervisor on machine 0 (plan, decision), its follower on machine 1 (the two meet at a c10d
    rendezvous on 127.0.0.1), and `train.py serve`'s loop on the server node running vLLM's CPU build at the
    port every machine computes; each machine's ranks (tests_vllm/server_rank.py in place of the trainer) reach
    it through TRL's client and generate; rank 0 asks for the weight-sync group, which needs CUDA."""
    import subprocess

    from launcher.run.vllm_server import server_command
    from profiles.load import load_profile

    main_port, server_port, group_port = free_port(), free_port(), free_port()
    settings = [
        f"model={model_dir}",
        "num_gpus=2",
        "max_seq_length=256",
        "max_prompt_length=128",
        "max_completion_length=64",
        "gpu_memory_utilization=0.3",
        "max_steps=1",
        "save_steps=1",
    ]
    profile = load_profile(SERVER_PROFILE, settings)
    serve = engine_server_command(server_command(profile, server_port, host="127.0.0.1"))
    output = out_dir / "shared-output"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GRPO_", "SLURM_"))}
    base.update(
        GRPO_RUN_ID="engine-job",
        GRPO_SERVER_NODE="127.0.0.1",
        GRPO_VLLM_PORT=str(server_port),
        GRPO_VLLM_GROUP_PORT=str(group_port),
        GRPO_MAX_RESTARTS="0",
        GRPO_MACHINE_TIMEOUT="600",
        GRPO_TRAIN_LEDGER=str(out_dir / "ledger.jsonl"),
        PYTHONUNBUFFERED="1",
    )
    machines = {
        "server": {
            **base,
            "VLLM_SERVER_DEV_MODE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "ENGINE_SERVER_COMMAND": json.dumps(serve),
        }
    }
    for rank in (1, 0):
        machines[f"machine-{rank}"] = {
            **base,
            "GRPO_NUM_MACHINES": "2",
            "GRPO_MACHINE_RANK": str(rank),
            "GRPO_MAIN_ADDRESS": "127.0.0.1",
            "GRPO_MAIN_PORT": str(main_port),
            "GRPO_RDZV_TIMEOUT": "600",
        }
    train = [
        "train",
        "--profile",
        str(SERVER_PROFILE),
        *[x for s in settings for x in ("--set", s)],
        "--gpu-memory",
        "24",
        "--gpus",
        "1",
        "--ignore-ledger",
        "--output-dir",
        str(output),
    ]
    driver = [sys.executable, str(Path(__file__).resolve().parent / "machine.py")]
    started = time.time()
    procs = {}
    for name, env in machines.items():
        argv = ["serve", "--output-dir", str(output)] if name == "server" else train
        with open(out_dir / f"{name}.log", "w", encoding="utf-8") as log:
            procs[name] = subprocess.Popen([*driver, *argv], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    codes = {}
    try:
        for name, proc in procs.items():
            codes[name] = proc.wait()  # the suite bounds the scenario, these machines its children, by progress
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    run = next(output.glob("run-*"), None)
    ranks, state, records = [], None, []
    if run is not None:
        from launcher.run.attempts import read_attempts

        records = read_attempts(run)
        for folder in sorted(run.glob("attempt-*")):
            ranks += [json.loads(path.read_text()) for path in sorted(folder.glob("server-rank*.json"))]
            if (folder / "vllm-server.json").is_file():
                state = json.loads((folder / "vllm-server.json").read_text())
    return {
        "codes": codes,
        "seconds_to_end": round(time.time() - started, 1),
        "ports": [server_port, group_port],
        "statuses": [r["status"] for r in records],
        "ranks": ranks,
        "server_state": state,
        "served_with": serve[2:],
    }


def main(argv: list[str]) -> int:
    name, model_dir, out_dir = argv[0], argv[1], Path(argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    if name == "colocate":
        result = colocate(model_dir, out_dir, lora="--lora" in argv[3:])
    elif name == "evaluate":
        result = evaluate(model_dir, out_dir)
    elif name == "server":
        result = server(model_dir, out_dir)
    elif name == "server_node":
        result = server_node(model_dir, out_dir)
    else:
        raise SystemExit(f"unknown scenario {name!r}: colocate, evaluate, server or server_node")
    result["seconds"] = round(time.time() - started, 1)
    (out_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":  # vLLM starts worker processes that import this file again
    sys.path.insert(0, str(REPO))
    sys.exit(main(sys.argv[1:]))
