"""The measurement kit's one call (docs/gpu.md), rehearsed on the CPU: the carry holds exactly what the GPU
machine lacks, trimmed to what the kit imports; the documented command line, run as written with a fresh
folder as $OUT, leaves the table, env.txt and the log there; the carry and the repository stay within what
one call may take."""

from __future__ import annotations

import json
import math
import os
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from support.cli import train_py
from support.waiting import run_to_end

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import fetch_gpu_kit  # noqa: E402

# where the rehearsal lays out its carry for this interpreter (git-ignored; the downloads are kept for the next run)
REHEARSAL = REPO / "wheels" / "rehearsal"
CALL_LIMIT_MIB = 64.0
# the GPU machine, as environment markers see it (an extra is never asked for)
GPU_MACHINE = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}


def _lock() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements" / "gpu.lock").read_text(encoding="utf-8").splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split()[0].split("==")
            pins[fetch_gpu_kit.normalise(name)] = version
    return pins


def test_the_carry_holds_what_the_gpu_machine_lacks_at_the_locks_versions():
    sections = fetch_gpu_kit.read_list()
    carried = {fetch_gpu_kit.normalise(n): v for n, v in sections["carried"]}
    on_machine = {fetch_gpu_kit.normalise(n) for n in sections["on the machine"]}
    left_out = {fetch_gpu_kit.normalise(n) for n in sections["left out"]}
    lock = _lock()
    assert {name: lock.get(name) for name in carried} == carried  # the lock's versions
    assert not (set(carried) & on_machine) and not (set(carried) & left_out) and not (on_machine & left_out)
    assert {"unsloth", "unsloth-zoo", "trl", "datasets", "pydantic", "bitsandbytes"} <= set(carried)
    assert {"torch", "transformers", "accelerate", "numpy", "pyarrow"} <= on_machine  # never carried
    # every requirement of a carried package is carried, already on that machine, or never imported by the kit
    known = set(carried) | on_machine | left_out
    for name in carried:
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed here (bitsandbytes lives in the vLLM side folder)
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate(GPU_MACHINE):
                continue  # another platform's, another Python's, or an extra
            wanted = fetch_gpu_kit.normalise(requirement.name)
            assert wanted in known, f"{name} needs {wanted}: carry it or say where it comes from"


def _wheel(path: Path, files: dict[str, bytes]) -> Path:
    record = "".join(f"{name},sha256=x,{len(data)}\n" for name, data in files.items())
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("pkg-1.0.dist-info/RECORD", record)
    return path


def test_trimming_leaves_out_what_the_kit_never_imports(tmp_path):
    unsloth = _wheel(
        tmp_path / "unsloth-1.0-py3-none-any.whl",
        {"unsloth/__init__.py": b"x", "studio/app.js": b"y" * 1000, "unsloth_cli/main.py": b"z"},
    )
    saved, gone = fetch_gpu_kit.trim_wheel(unsloth, tmp_path / "out.whl", "unsloth", "130")
    assert gone == ["studio/app.js", "unsloth_cli/main.py"] and saved > 0
    with zipfile.ZipFile(tmp_path / "out.whl") as wheel:
        assert "unsloth/__init__.py" in wheel.namelist() and "studio/app.js" not in wheel.namelist()
        assert "studio/app.js" not in wheel.read("pkg-1.0.dist-info/RECORD").decode()
    libraries = {f"bitsandbytes/libbitsandbytes_{v}.so": b"l" for v in ("cpu", "cuda128", "cuda130", "rocm70")}
    bnb = _wheel(tmp_path / "bitsandbytes-1.0-py3-none-any.whl", {"bitsandbytes/__init__.py": b"x", **libraries})
    _, gone = fetch_gpu_kit.trim_wheel(bnb, tmp_path / "bnb.whl", "bitsandbytes", "130")
    assert gone == ["bitsandbytes/libbitsandbytes_cuda128.so", "bitsandbytes/libbitsandbytes_rocm70.so"]
    plain = _wheel(tmp_path / "trl-1.0-py3-none-any.whl", {"trl/__init__.py": b"x"})
    assert fetch_gpu_kit.trim_wheel(plain, tmp_path / "trl.whl", "trl", "130") == (0, [])


def test_another_python_is_refused_unless_asked(capsys):
    assert fetch_gpu_kit.main(["--python-version", "3.11"]) == 2
    assert "--other-python" in capsys.readouterr().err
    assert fetch_gpu_kit.main(["--python-version", "three"]) == 2
    assert fetch_gpu_kit.main(["--cuda", "13.0"]) == 2


def test_the_script_leaves_the_kit_no_less_than_gpu_check_accepts():
    # a shorter budget would pass the script and be refused by gpu-check, after the install took its time
    import re

    from measure.kit import MIN_BUDGET_S

    script = (REPO / "scripts" / "gpu-kit.sh").read_text(encoding="utf-8")
    (floor,) = re.findall(r'if \[ "\$budget" -lt (\d+) \]', script)
    assert int(floor) == math.ceil(MIN_BUDGET_S)


@pytest.mark.parametrize("call_s", ["abc", "1e9", "-5", "0570", "99999999999999999999"])
def test_a_call_limit_that_is_not_a_number_of_seconds_is_refused_before_the_install(tmp_path, call_s):
    env = dict(os.environ, KIT_CALL_S=call_s, KIT_CARRY=str(tmp_path / "no-carry"))
    done = run_to_end(["bash", REPO / "scripts" / "gpu-kit.sh", tmp_path / "out"], env=env)
    assert done.returncode == 2 and f"KIT_CALL_S={call_s} is not a whole number" in done.stderr, done.stderr
    assert not (tmp_path / "out" / "kit.log").exists()  # nothing installed, nothing run


def _documented_call() -> str:
    """The command line docs/gpu.md gives for the GPU machine, exactly as written there."""
    text = (REPO / "docs" / "gpu.md").read_text(encoding="utf-8")
    (line,) = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("bash scripts/gpu-kit.sh")]
    assert len(line) < 2000 and '"$OUT"' in line
    return line


def test_the_documented_call_runs_as_written_and_leaves_its_files_in_out(tmp_path):
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    laid = run_to_end(
        [
            sys.executable,
            str(REPO / "scripts" / "fetch_gpu_kit.py"),
            "--python-version",
            version,
            "--other-python",
            "--dest",
            str(REHEARSAL),
            "--json",
        ],
        cwd=REPO,
    )
    assert laid.returncode == 0, laid.stderr[-3000:]
    sizes = json.loads(laid.stdout)
    assert sizes["fits"] and sizes["with_repository_mib"] < CALL_LIMIT_MIB and sizes["carry_mib"] < 24
    assert {"unsloth", "bitsandbytes"} <= set(sizes["trimmed"])
    out = tmp_path / "out"  # fresh, as $OUT is at every call
    env = dict(os.environ)
    for key in ("GRPO_INJECT_OOM", "GRPO_RANDOM_WEIGHTS", "GRPO_PROBE_ONLY", "GRPO_TRAIN_NO_UNSLOTH"):
        env.pop(key, None)
    env.update(
        OUT=str(out),
        KIT_CARRY=str(REHEARSAL / "kit-carry"),
        PYTHON=sys.executable,
        GRPO_TRAIN_CACHE=str(tmp_path / "cache"),
        TMPDIR=str(tmp_path),
    )
    done = run_to_end(["bash", "-c", _documented_call()], cwd=REPO, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    names = sorted(p.name for p in out.iterdir())
    assert names == ["cpu.json", "cpu.md", "env.txt", "kit.log"]
    assert len(names) <= 8 and all(p.stat().st_size < 16 << 20 for p in out.iterdir())
    report = json.loads((out / "cpu.json").read_text(encoding="utf-8"))
    table = (out / "cpu.md").read_text(encoding="utf-8")
    assert report["imports"]["bitsandbytes"]["imports"] is True  # installed from the carry
    # on the CPU every planned case runs: Unsloth's CPU fallback, then TRL + PEFT
    assert [(row["path"], row["status"]) for row in report["probes"]] == [("unsloth", "ok"), ("trl+peft", "ok")]
    for row in report["probes"]:
        assert row["architecture"] == "tiny" and row["probe"]["random_weights"] is True
        timed = row["timed"]  # a wave and a step at each of two lengths, each beside its prediction
        assert [w["completion_tokens"] for w in timed["generation"]] == report["lengths_timed"]
        assert all(e["seconds"] > 0 and e["predicted_s"] > 0 for e in timed["generation"] + timed["training"])
        assert timed["predicted"]["completion_tokens"] == max(report["lengths_timed"])
        # generated as the trainer generates: through the unwrap its generating method binds
        assert all(w["through"].endswith("unwrap_model_for_generation") for w in timed["generation"])
        assert {c["component"] for c in row["component_rows"]} >= {"weights", "lora", "forward", "optimizer"}
        assert row["measured"]["peak_gib"] > 0 and 0.2 < row["measured_over_estimate"] < 5
        assert f"| tiny | {row['path']} | float32 | adamw_torch |" in table
    assert report["probes"][1]["backend"] == "transformers"  # the plain path trained through transformers + PEFT
    # Unsloth's path is timed at the shape the plan decides on too: the CPU ladder's choice, its whole generation
    # batch in one wave and its micro-batch in one step, each beside its prediction
    planned = report["probes"][0]["timed"]["planned"]
    assert planned["plan"]["profile"] == "cpu-tiny-8gen" and "planned" not in report["probes"][1]["timed"]
    (wave,), (step,) = planned["generation"], planned["training"]
    assert (wave["sequences"], wave["completion_tokens"]) == (
        planned["plan"]["sequences"],
        planned["plan"]["wave_tokens"],
    )
    assert (step["sequences"], step["completion_tokens"]) == (
        planned["plan"]["micro_batch"],
        planned["plan"]["step_tokens"],
    )
    assert wave["prompt_tokens"] == step["prompt_tokens"] == planned["plan"]["prompt_tokens"]
    assert all(e["seconds"] > 0 and e["predicted_s"] > 0 for e in (wave, step))
    assert "## Time at the plan's shape" in table and "| tiny | unsloth | float32 | cpu-tiny-8gen |" in table
    oom = report["oom_fallback"]
    assert oom["status"] == "ok" and oom["oom_read"] and oom["fell_back_and_finished"], oom
    assert [a["status"] for a in oom["attempts"]][0] == "oom" and oom["attempts"][-1]["status"] == "ok"
    assert "## Memory by component" in table and "## Time at the shapes timed" in table
    env_txt = (out / "env.txt").read_text(encoding="utf-8")
    assert "python: Python" in env_txt and "torch:" in env_txt and "trl==" in env_txt.lower()
    log = (out / "kit.log").read_text(encoding="utf-8")
    assert log.startswith("installed ") and "probe(s) measured" in log
    assert not list(tmp_path.glob("grpo-kit-site.*"))  # the install folder goes with the call
    # a second run on the same card and libraries continues the table: nothing measured again
    env.pop("OUT")
    again = train_py("gpu-check", "--out-dir", out, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    continued = json.loads((out / "cpu.json").read_text(encoding="utf-8"))
    assert len(continued["runs"]) == 2 and continued["probes"] == report["probes"]
