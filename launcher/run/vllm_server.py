"""HOW the vLLM server of server mode runs: `trl vllm-serve` on GPUs of its own (machine 0's after its training
GPUs, or a node of its own that `train.py serve` runs), started and health-checked for each attempt, stopped
after it whatever the outcome. Its port is the one every machine computes (launcher.card.topology.vllm_endpoint).
Nothing here imports vLLM or TRL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from contract.attempt import SERVER_LOG, VLLM_SERVER_TIMEOUT_S
from contract.environment import ENV_VLLM_PORT
from launcher.card.topology import free_port, gpu_assignment, server_node, topology, visible_gpu_ids, vllm_endpoint
from launcher.run.child import StopWhen, parent_death_signal

# The server node's word on its server for one attempt, in the attempt folder: {"status": "starting" | "ready"
# | "failed", "url", "error"}; machine 0 stops the attempt when it says failed
SERVER_STATE = "vllm-server.json"
STARTING, READY, FAILED = "starting", "ready", "failed"


def write_server_state(attempt_dir, status: str, url: str | None = None, error: str | None = None) -> None:
    import json

    from contract.safe_write import write_atomic

    write_atomic(Path(attempt_dir) / SERVER_STATE, json.dumps({"status": status, "url": url, "error": error}) + "\n")


class ServerWatch(StopWhen):
    """While an attempt trains against a server on its own node: reads that node's SERVER_STATE each second
    and, when it says the server failed, keeps its words in `failure` and asks the attempt to stop, so that
    the trainers do not wait out TRL's connection timeout."""

    def __init__(self, path, runner, interval: float = 1.0):
        super().__init__(self._failed, runner, interval, name="server watch")
        self.path = Path(path)

    @property
    def failure(self) -> str | None:
        return self.fired

    def _failed(self) -> str | None:
        import json

        try:
            state = json.loads(self.path.read_text(encoding="utf-8"))
        except ValueError:  # written as it is read: asked again
            return None
        if isinstance(state, dict) and state.get("status") == FAILED:
            return str(state.get("error") or "the vLLM server on its own node failed to start")
        return None


# What vLLM reads from a model repository: configuration, weights, tokenizer and chat template.
SERVER_MODEL_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja"]


def local_model(model: str, env: Mapping[str, str] | None = None) -> str:
    """`model` as a local folder: a folder as it is, a hub id downloaded (or found in the cache) first, so that
    the server's health wait times loading alone and not a download of tens of GB. The token comes from the
    environment and is never shown; HF_HUB_OFFLINE keeps it to the cache."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        return str(folder)
    env = os.environ if env is None else env
    from huggingface_hub import snapshot_download  # no torch: the launcher stays light

    token = env.get("HF_TOKEN") or env.get("HUGGING_FACE_HUB_TOKEN") or None
    print(
        f"fetching {model} for the vLLM server (resumable; the server's start-up wait begins after it)",
        file=sys.stderr,
        flush=True,
    )
    try:
        return snapshot_download(repo_id=model, allow_patterns=SERVER_MODEL_FILES, token=token)
    except Exception as exc:  # network, authorisation, offline without a cached copy: one line for the log
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ServerError(
            f"cannot fetch {model} for the vLLM server: {first} (fix: set HF_TOKEN for a gated "
            "model, or give a local folder as `model`)"
        ) from exc


def server_command(
    profile, port: int, host: str = "0.0.0.0", python: str | None = None, model: str | None = None
) -> list[str]:
    """`trl vllm-serve` for the profile: data-parallel copies x tensor-parallel slices = vllm_server_gpus.
    `model`: a local folder holding the profile's model (vLLM takes any existing path as local)."""
    python = python or sys.executable
    tp = profile.vllm_tensor_parallel
    command = [
        python,
        "-m",
        "trl.cli.main",
        "vllm-serve",
        "--model",
        model or profile.model,
        "--tensor_parallel_size",
        str(tp),
        "--data_parallel_size",
        str(profile.vllm_server_gpus // tp),
        "--host",
        host,
        "--port",
        str(port),
        "--gpu_memory_utilization",
        str(profile.gpu_memory_utilization),
        "--max_model_len",
        str(profile.max_seq_length),
    ]
    if profile.trust_remote_code:
        command.append("--trust_remote_code")
    return command


class ServerError(RuntimeError):
    """The vLLM server did not come up (its exit status and the end of its log say why)."""


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


class VllmServer:
    """One `trl vllm-serve` process for an attempt: start, wait until /health answers, stop.
    `command` replaces the real server (tests run a small HTTP server)."""

    def __init__(
        self,
        profile,
        attempt_dir,
        gpu_ids: list[str],
        port: int | None = None,
        host: str = "127.0.0.1",
        command: list[str] | None = None,
        env: dict | None = None,
    ):
        self.profile = profile
        self.attempt_dir = Path(attempt_dir)
        self.gpu_ids = list(gpu_ids)
        self.host = host
        self.port = port or free_port()
        self.command = command or server_command(profile, self.port)
        self.base_env = dict(os.environ if env is None else env)
        self.proc: subprocess.Popen | None = None
        self.log_path = self.attempt_dir / SERVER_LOG

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> VllmServer:
        env = dict(self.base_env)
        if self.gpu_ids:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpu_ids)
        env["PYTHONUNBUFFERED"] = "1"
        self.attempt_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            # its own session, so that stop() reaches vLLM's worker processes too
            self.proc = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                preexec_fn=parent_death_signal(),
            )
        return self

    def healthy(self, timeout: float = 2.0) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=timeout) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def wait_healthy(self, timeout: float = VLLM_SERVER_TIMEOUT_S, interval: float = 1.0) -> float:
        """Block until /health answers 200; seconds waited. ServerError when the server exits or the time
        runs out (loading a large model into vLLM takes minutes: the default allows VLLM_SERVER_TIMEOUT_S)."""
        if self.proc is None:
            raise ServerError("the vLLM server was not started")
        started = time.monotonic()
        while True:
            if self.healthy():
                return time.monotonic() - started
            code = self.proc.poll()
            if code is not None:
                raise ServerError(
                    f"the vLLM server exited with status {code} before it answered "
                    f"{self.url}/health; end of {self.log_path}:\n{_log_tail(self.log_path)}"
                )
            if time.monotonic() - started > timeout:
                self.stop()
                raise ServerError(
                    f"the vLLM server did not answer {self.url}/health within {timeout:.0f} s; "
                    f"end of {self.log_path}:\n{_log_tail(self.log_path)}"
                )
            time.sleep(interval)

    def stop(self, grace: float = 30.0) -> int | None:
        """SIGTERM to the server's process group, SIGKILL after `grace` seconds; its exit status."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    break
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        return proc.poll()


def port_taken(port: int, host: str = "0.0.0.0") -> bool:
    """Whether `port` is already bound on this machine (another server, an earlier run)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def server_gpu_ids(profile, env: Mapping[str, str] | None = None, own_node: bool = False) -> list[str]:
    """The GPUs the server runs on: on a node of its own its first vllm_server_gpus; on machine 0 those after
    its training GPUs. UsageError when the node shows too few."""
    env = os.environ if env is None else env
    if not own_node:
        return gpu_assignment(profile, topology(env), env)[1]
    ids = visible_gpu_ids(env, profile.vllm_server_gpus)
    if len(ids) < profile.vllm_server_gpus:
        from contract.errors import UsageError

        raise UsageError(
            f"profile '{profile.name}' serves on {profile.vllm_server_gpus} GPUs; this node shows "
            f"{len(ids)} (CUDA_VISIBLE_DEVICES) (fix: give the server node more GPUs, or lower "
            "vllm_server_gpus)"
        )
    return ids[: profile.vllm_server_gpus]


def start_server(
    profile,
    attempt_dir,
    env: dict | None = None,
    timeout: float = VLLM_SERVER_TIMEOUT_S,
    command: list[str] | None = None,
    own_node: bool = False,
    log_name: str = SERVER_LOG,
) -> VllmServer | None:
    """Start and health-check the attempt's vLLM server; None when the profile has none (or where it does not
    run: machines other than 0, or every training machine when it has a node of its own). `own_node`: this is
    that node (`train.py serve`). The caller stops it when the attempt ends, whatever its outcome."""
    env = dict(os.environ if env is None else env)
    if not profile.uses_vllm_server or profile.device == "cpu":
        return None
    if not own_node and (topology(env).machine_rank != 0 or server_node(env) is not None):
        return None
    server_ids = server_gpu_ids(profile, env, own_node)
    endpoint = vllm_endpoint(env, topology({}) if own_node else None)
    port = endpoint.port
    if port_taken(port):
        raise ServerError(
            f"port {port} is already in use on this machine, so the vLLM server cannot listen "
            f"there (fix: stop what holds it, or set {ENV_VLLM_PORT} to a free port, the same on "
            "every machine)"
        )
    if command is None:
        command = server_command(profile, port, model=local_model(profile.model, env))
    server = VllmServer(profile, attempt_dir, server_ids, port=port, command=command, env=env)
    server.log_path = server.attempt_dir / log_name
    server.start()
    try:
        server.wait_healthy(timeout=timeout)
    except BaseException:
        server.stop()
        raise
    return server
