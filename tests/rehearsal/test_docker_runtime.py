"""The GPU image's runtime, reproduced without a Docker daemon: the folders the Dockerfile makes (its own
scripts/image-dirs.sh, run under a scratch root), the environment its ENV instructions set (paths moved under
that root), and the process running as the image's uid 1000 or as another uid (`--user`), against host folders
as the documented `docker run` mounts them: made by the user beforehand, or made by Docker (root's), or another
uid's. A fresh named volume starts as a copy of the image's folder, modes included, which the scratch root is.

Acting as other uids needs root; elsewhere these tests skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from support.cli import REPO, tiny_model_folder, train_py

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_docker import read_image  # noqa: E402

from support.waiting import run_to_end

SETPRIV = shutil.which("setpriv")
pytestmark = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or SETPRIV is None,
    reason="acting as other uids needs root and setpriv (util-linux)",
)
IMAGE_UID = int(read_image().variables["APP_UID"])
OTHER_UID, THIRD_UID = 1234, 2345
IMAGE_PATHS = ("/home/app", "/app")


@pytest.fixture
def base():
    """A scratch folder every uid can reach (pytest's own tmp_path is root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="image-runtime-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def image_root(base: Path) -> Path:
    root = base / "image"
    subprocess.run(["bash", str(REPO / "scripts" / "image-dirs.sh"), str(root), str(IMAGE_UID)], check=True)
    return root


def image_env(root: Path) -> dict:
    """The ENV of the Dockerfile, its image paths moved under `root`; this machine's PATH and interpreter."""
    image = read_image()
    names = set()
    for instruction in image.all("ENV"):
        from test_docker import key_values

        names |= set(key_values(instruction.args))
    env = {}
    for name in sorted(names - {"PATH", "VIRTUAL_ENV"}):
        value = image.variables[name]
        for prefix in IMAGE_PATHS:
            if value == prefix or value.startswith(prefix + "/"):
                value = str(root) + value
                break
        env[name] = value
    env.update(PATH=os.environ.get("PATH", ""), COLUMNS="400", HF_HUB_OFFLINE="1")
    # the suite's thread policy (`make test`: one torch thread a run), or a run on every core beside the other
    # worker's takes ten times as long
    if "OMP_NUM_THREADS" in os.environ:
        env["OMP_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"]
    return env


def host_folder(base: Path, name: str, owner: int | None) -> Path:
    """A host folder as it is before `docker run` mounts it: made by the user (`owner` = the user's uid), or by
    Docker for a path that did not exist (root's), or another uid's; mode 0755 as mkdir leaves it."""
    folder = base / "host" / name
    folder.mkdir(parents=True)
    (base / "host").chmod(0o755)
    os.chown(folder, owner, owner)
    folder.chmod(0o755)
    return folder


def _reachable_by_anyone(path: Path) -> bool:
    return all(os.stat(folder).st_mode & 0o001 for folder in path.resolve().parents)


def python_for_any_uid() -> tuple[str, dict]:
    """An interpreter that another uid can start, as the image's /opt/venv/bin/python is, and the environment
    that gives it this environment's packages: this one where every folder above it is open, else the system's
    interpreter of the same version with this environment's site-packages on PYTHONPATH (an interpreter under
    root's home cannot be started by the supervisor's children)."""
    import sysconfig

    if _reachable_by_anyone(Path(sys.executable)):
        return sys.executable, {}
    system = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    if not system.is_file():
        pytest.skip(
            f"{sys.executable} lies where other uids cannot reach, and there is no {system}", allow_module_level=True
        )
    return str(system), {"PYTHONPATH": sysconfig.get_paths()["purelib"]}


PYTHON, PYTHON_ENV = python_for_any_uid() if SETPRIV else (sys.executable, {})

# Another uid runs this checkout's code, as the image's /app is readable by any uid: a clone under a folder only
# its owner may enter (mktemp -d makes 0700 ones) cannot be rehearsed that way
if SETPRIV and not _reachable_by_anyone(REPO / "train.py"):
    pytest.skip(f"{REPO} lies where other uids cannot reach (a folder above it is closed)", allow_module_level=True)


def as_uid(uid: int) -> list[str]:
    """The wrapper that runs a command as `uid` with no other group and no capability, as `docker run --user
    uid:uid` runs it. setpriv (util-linux) switches before exec, so the interpreter under root's home still
    starts; the process itself then has no more rights than that uid."""
    return [SETPRIV, "--reuid", str(uid), "--regid", str(uid), "--clear-groups"]


def run_as(uid: int, argv: list[str], env: dict) -> subprocess.CompletedProcess:
    """`argv` as `uid` (see as_uid)."""
    if argv[0] == sys.executable:
        argv = [PYTHON, *argv[1:]]
    return run_to_end(
        [*as_uid(uid), *argv],
        cwd=REPO,
        env={**env, **PYTHON_ENV},
    )


def train_py_as(uid: int, *args: str, env: dict) -> subprocess.CompletedProcess:
    """`python train.py ARGS` as `uid` (see as_uid), through the one runner."""
    return train_py(*args, env={**env, **PYTHON_ENV}, python=PYTHON, prefix=as_uid(uid))


WRITES = r"""
import getpass, json, sys
from pathlib import Path
from launcher.memory.ledger.store import ledger_path
from launcher.run.folder import new_run_dir
from launcher.run.preflight import cache_folders, unwritable_cache
from profiles.load import load_profile

hub_model = load_profile("profiles/gpu-24gb-llama3.1-8b.yaml")
run_dir = new_run_dir(Path(sys.argv[1]))
(run_dir / "plan.json").write_text("{}")
ledger = ledger_path()
ledger.parent.mkdir(parents=True, exist_ok=True)
with open(ledger, "a") as handle:
    handle.write("{}\n")
inductor = __import__("os").environ["TORCHINDUCTOR_CACHE_DIR"]
Path(inductor, "probe").mkdir(parents=True, exist_ok=True)
print(json.dumps({"problem": unwritable_cache(hub_model), "caches": [str(f) for f in cache_folders(hub_model)],
                  "run_dir": str(run_dir), "ledger": str(ledger), "user": getpass.getuser()}))
"""


@pytest.mark.parametrize("uid", [IMAGE_UID, OTHER_UID])
def test_the_documented_run_writes_everything_it_needs_as_any_uid(base, uid):
    """`mkdir -p outputs` by the user, `--user "$(id -u):$(id -g)"`, a fresh named volume on /home/app/.cache:
    the run folder, the ledger, the Hugging Face cache and the compilers' caches are all writable."""
    root = image_root(base)
    outputs = host_folder(base, "outputs", uid)
    env = image_env(root)
    done = run_as(uid, [sys.executable, "-c", WRITES, str(outputs)], env)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["problem"] is None
    cache = root / "home" / "app" / ".cache"
    assert found["ledger"] == str(cache / "grpo-train" / "ledger.jsonl")  # on the volume, not in the container
    assert found["caches"] == [str(cache / "grpo-train"), str(cache / "huggingface" / "hub")]
    assert found["user"] == "app"  # getpass answers for a uid with no passwd entry
    assert Path(found["run_dir"]).stat().st_uid == uid  # the user's own files on the host


@pytest.mark.parametrize("owner", [0, THIRD_UID], ids=["made-by-docker", "another-uids"])
def test_an_outputs_folder_the_user_did_not_make_is_named_with_its_owner_and_the_fix(base, owner):
    root = image_root(base)
    outputs = host_folder(base, "outputs", owner)
    done = train_py_as(OTHER_UID, "train", "--output-dir", str(outputs), env=image_env(root))
    text = done.stdout + done.stderr
    assert done.returncode == 2, text[-3000:]  # refused as bad input, before anything loads
    assert (
        f"cannot write to {outputs}" in text and f"{outputs} is owned by uid {owner}, you are uid {OTHER_UID}" in text
    )
    assert "mkdir -p" in text and '--user "$(id -u):$(id -g)"' in text
    assert "free disk space" not in text and "Traceback" not in text


@pytest.mark.parametrize("owner", [0, THIRD_UID], ids=["made-by-docker", "another-uids"])
def test_a_hugging_face_cache_mount_the_user_cannot_write_is_named_before_any_download(base, owner):
    """The old documented command mounted $HOME/.cache/huggingface: where the host folder did not exist Docker
    made it root's, and the first download failed with EACCES. Now the run stops before its first attempt,
    naming the folder, its owner and the fix."""
    root = image_root(base)
    outputs = host_folder(base, "outputs", OTHER_UID)
    hf_home = host_folder(base, "huggingface", owner)
    env = dict(image_env(root), HF_HOME=str(hf_home))
    done = train_py_as(
        OTHER_UID, "train", "--output-dir", str(outputs), "--set", "model=Qwen/Qwen2.5-0.5B-Instruct", env=env
    )
    text = done.stdout + done.stderr
    assert done.returncode == 1, text[-3000:]
    assert f"cannot write to {hf_home / 'hub'}" in text and f"{hf_home} is owned by uid {owner}" in text
    assert "grpo-train-cache:/home/app/.cache" in text and "free disk space" not in text
    assert not list(outputs.glob("run-*/attempt-*"))  # no attempt was started


def test_two_runs_as_another_uid_share_the_ledger_on_the_volume(base, tiny_cache, tiny_seed):
    """The whole documented sequence as uid 1234 on the CPU: `train` trains the tiny model into the user's
    outputs folder and records the attempt in the ledger on the cache volume; the next `plan` reads it. The
    volume already holds the tiny model, as an earlier run by that uid left it (the session's build, copied:
    the build itself is the same code as every CPU run's)."""
    root = image_root(base)
    outputs = host_folder(base, "outputs", OTHER_UID)
    env = image_env(root)
    model = tiny_model_folder(tiny_seed)
    volume = root / "home" / "app" / ".cache" / "grpo-train"
    shutil.copytree(tiny_cache / model, volume / model)
    for path in [volume, *volume.rglob("*")]:
        os.chown(path, OTHER_UID, OTHER_UID)
    done = train_py_as(
        OTHER_UID,
        "train",
        "--output-dir",
        str(outputs),
        "--set",
        "max_steps=2",
        "--set",
        "eval_samples=2",
        env=env,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    ledger = root / "home" / "app" / ".cache" / "grpo-train" / "ledger.jsonl"
    entries = [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]
    assert entries and ledger.stat().st_uid == OTHER_UID
    assert all(p.stat().st_uid == OTHER_UID for p in outputs.rglob("*"))
    plan = train_py_as(OTHER_UID, "plan", "--json", env=env)
    assert plan.returncode == 0, plan.stderr[-2000:]
