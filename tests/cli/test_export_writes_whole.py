"""`export` checks where it writes before any model loads (a file, a read-only folder, one of another user's),
finds llama-quantize before the merge, writes merged/ whole or not at all (a full disk leaves no half folder),
records a GGUF the reader cannot parse instead of a traceback, prints one JSON object with --json, says and
exits 130 on SIGTERM, and records the status of an attempt that did not finish ok.

The model is a stand-in (trainer.export.merged_model replaced): what is checked is where and how the files
are written, not the merge itself, which tests/cli/test_export.py runs on the tiny model."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from commands import main
from contract.environment import ENV_LLAMA_CPP
from support.waiting import finish
from trainer import export

REPO = Path(__file__).resolve().parents[2]
SMALL = REPO / "profiles" / "cpu-tiny-4gen.yaml"


def attempt(tmp_path: Path, status: str = "ok", steps: int = 4) -> Path:
    folder = tmp_path / "attempt-01-cpu-tiny-4gen"
    (folder / "adapter").mkdir(parents=True)
    (folder / "adapter" / "adapter_config.json").write_text("{}")
    (folder / "profile.yaml").write_text(SMALL.read_text())
    (folder / "outcome.json").write_text(json.dumps({"status": status, "steps": steps}))
    return folder


class FakeModel:
    """What save_pretrained writes: a config first, then the weights (`weight_bytes` of them)."""

    def __init__(self, weight_bytes: int = 1000):
        self.weight_bytes = weight_bytes

    def save_pretrained(self, folder, **_):
        Path(folder, "config.json").write_text("{}")  # as transformers writes it: the config first
        with open(Path(folder, "model.safetensors"), "wb") as handle:
            handle.write(b"\0" * self.weight_bytes)


class FakeTokenizer:
    def save_pretrained(self, folder):
        Path(folder, "tokenizer.json").write_text("{}")


@pytest.fixture
def fake_merge(monkeypatch):
    """trainer.export.merged_model returns the stand-in; the list holds the adapters loaded (empty: none was).
    Appending a number of bytes first makes the stand-in's weights that large."""
    loads: list = []

    def merged_model(profile, adapter_dir, base, dtype, say):
        size = loads.pop() if loads and isinstance(loads[-1], int) else 1000
        loads.append(adapter_dir)
        return export.Merged(FakeModel(size), FakeTokenizer(), "tiny", "cpu", "float16", 123)

    monkeypatch.setattr(export, "merged_model", merged_model)
    return loads


def run(argv, capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_json_is_one_object_on_stdout(tmp_path, fake_merge, capsys):
    code, out, err = run(["export", str(attempt(tmp_path)), "--json"], capsys)
    assert code == 0, err
    record = json.loads(out)
    assert record["merged"]["folder"].endswith("merged") and "exporting" in err


def test_the_merged_folder_is_whole(tmp_path, fake_merge, capsys):
    folder = attempt(tmp_path)
    assert run(["export", str(folder)], capsys)[0] == 0
    merged = folder / "export" / "merged"
    assert sorted(p.name for p in merged.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    assert [p.name for p in (folder / "export").iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("what", ["file", "under-a-file"])
def test_an_out_that_is_a_file_is_refused_before_loading(tmp_path, fake_merge, capsys, what):
    (tmp_path / "a-file").write_text("x")
    out = tmp_path / "a-file" if what == "file" else tmp_path / "a-file" / "inside"
    code, _, err = run(["export", str(attempt(tmp_path)), "--out", str(out)], capsys)
    assert code == 2 and "--out" in err and "a file" in err and fake_merge == []


def test_an_out_on_a_read_only_mount_is_refused_before_loading(tmp_path, fake_merge, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here")
    try:
        code, _, err = run(["export", str(attempt(tmp_path)), "--out", str(folder / "model")], capsys)
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)
    assert code == 2 and "read-only" in err and fake_merge == []


def test_an_out_this_user_cannot_write_is_refused_before_loading(tmp_path, fake_merge, capsys):
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o500)
    code, _, err = run(["export", str(attempt(tmp_path)), "--out", str(folder / "model")], capsys)
    assert code == 2 and "no permission" in err and fake_merge == []


def test_a_full_disk_leaves_no_half_merged_folder(tmp_path, fake_merge, capsys, small_disk):
    fake_merge.append(4 << 20)  # weights four times the disk
    code, _, err = run(["export", str(attempt(tmp_path)), "--out", str(small_disk / "model")], capsys)
    assert code == 1 and "Traceback" not in err and "space" in err
    assert not (small_disk / "model" / "merged").exists()
    assert not [p for p in (small_disk / "model").iterdir() if p.name.startswith(".")]


def _refusals():
    from safetensors import SafetensorError  # what transformers' save_pretrained raises from safetensors' writer

    too_large, quota = ("File too large", "4 GiB"), ("Disk quota exceeded",)
    return [
        pytest.param(
            SafetensorError("Error while serializing: I/O error: File too large (os error 27)"), too_large, id="efbig"
        ),
        pytest.param(OSError(errno.EFBIG, os.strerror(errno.EFBIG)), too_large, id="efbig-oserror"),
        pytest.param(
            SafetensorError("Error while serializing: I/O error: Disk quota exceeded (os error 122)"),
            quota,
            id="edquot",
        ),
        pytest.param(OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)), quota, id="edquot-oserror"),
    ]


@pytest.mark.parametrize("refusal, words", _refusals())
def test_a_file_system_that_refuses_a_large_file_ends_in_one_line_and_keeps_the_earlier_export(
    tmp_path, monkeypatch, capsys, refusal, words
):
    """FAT32 stops a file at 4 GiB, a quota or `ulimit -f` sooner: safetensors' writer fails part way through the
    weights. Exit 1, one line naming the folder, the limit and the fix; the earlier export stands, whole."""
    folder = attempt(tmp_path)
    out = tmp_path / "usb-stick"
    monkeypatch.setattr(
        export, "merged_model", lambda *a: export.Merged(FakeModel(), FakeTokenizer(), "tiny", "cpu", "float16", 1)
    )
    assert run(["export", str(folder), "--out", str(out)], capsys)[0] == 0
    earlier = sorted(p.name for p in (out / "merged").iterdir())

    class RefusedModel(FakeModel):
        def save_pretrained(self, folder, **_):
            super().save_pretrained(folder)  # the config and part of the weights are written, then refused
            raise refusal

    monkeypatch.setattr(
        export, "merged_model", lambda *a: export.Merged(RefusedModel(), FakeTokenizer(), "tiny", "cpu", "float16", 1)
    )
    code, _, err = run(["export", str(folder), "--out", str(out)], capsys)
    lines = err.strip().splitlines()
    assert code == 1 and "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith(f"error: cannot write to {out}: ") and "(fix: " in lines[0]
    assert "--out" in lines[0] and "--output-dir" not in lines[0]  # export's own option, not train's
    assert all(w in lines[0] for w in words), lines[0]
    assert sorted(p.name for p in (out / "merged").iterdir()) == earlier  # the earlier export, whole
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # no half-written folder beside it


def test_the_limit_that_refused_a_large_file_is_named(tmp_path, monkeypatch):
    import resource

    from contract import failure

    usb = tmp_path / "usb"
    usb.mkdir()
    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/root / ext4 rw 0 0\n/dev/sdb1 {usb} vfat rw,relatime 0 0\n")
    monkeypatch.setattr(failure, "MOUNTS", mounts)
    efbig = OSError(errno.EFBIG, os.strerror(errno.EFBIG))
    assert failure.write_problem(efbig) == failure.TOO_LARGE
    text = failure.write_failure_text(efbig, usb / "model", option="--out")
    assert f"vfat at {usb} is FAT, which keeps every file under 4 GiB" in text and "(fix: give --out" in text
    # another file system: named, with its own limit or a quota as the cause
    text = failure.write_failure_text(efbig, tmp_path / "elsewhere")
    assert "ext4 at / refuses a file this large" in text and "--output-dir" in text
    # a process limit (`ulimit -f`) is the cause where one is set, and the fix says how to lift it
    monkeypatch.setattr(resource, "getrlimit", lambda which: (2**20, resource.RLIM_INFINITY))
    text = failure.write_failure_text(efbig, tmp_path / "elsewhere")
    assert "at most 1.0 MiB (`ulimit -f`)" in text and "ulimit -f unlimited" in text
    # a mounts table that cannot be read still gives the line
    monkeypatch.setattr(failure, "MOUNTS", tmp_path / "no-such-file")
    assert "File too large" in failure.write_failure_text(efbig, tmp_path)


# ---------------------------------------------------------------------------------------------------
# GGUF


@pytest.fixture
def converter(tmp_path, monkeypatch):
    """A stand-in for llama.cpp's converter that writes `GARBAGE` as the GGUF file; no llama-quantize."""
    folder = tmp_path / "llama.cpp"
    folder.mkdir()
    (folder / export.CONVERTER).write_text(
        "import sys\n"
        "def main():\n"
        "    out = sys.argv[sys.argv.index('--outfile') + 1]\n"
        "    open(out, 'wb').write(b'GARBAGE not a gguf file')\n"
    )
    monkeypatch.setattr(export, "LLAMA_CPP_PLACES", ())
    monkeypatch.setenv(ENV_LLAMA_CPP, str(folder))
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    return folder


def test_a_missing_quantizer_is_refused_before_the_merge(tmp_path, fake_merge, converter, capsys):
    folder = attempt(tmp_path)
    code, _, err = run(["export", str(folder), "--gguf", "q4_k_m"], capsys)
    assert code == 2 and "llama-quantize" in err and fake_merge == []
    assert not (folder / "export").exists()


def test_a_gguf_the_reader_cannot_parse_is_recorded(tmp_path, fake_merge, converter, capsys):
    folder = attempt(tmp_path)
    code, _, err = run(["export", str(folder), "--gguf", "q8_0"], capsys)
    assert code == 1 and "Traceback" not in err and "cannot be read back" in err
    record = json.loads((folder / "export" / "export.json").read_text())
    assert record["gguf"]["header"] is None and "read_back_error" in record["gguf"]


def test_a_gguf_the_file_system_refuses_is_not_left_and_ends_in_one_line(tmp_path, fake_merge, converter, capsys):
    """A 7B model's q8_0 file is over FAT32's 4 GiB: the converter fails part way through; its part is removed."""
    (converter / export.CONVERTER).write_text(
        "import errno, os, sys\n"
        "def main():\n"
        "    out = sys.argv[sys.argv.index('--outfile') + 1]\n"
        "    open(out, 'wb').write(b'GGUF and then nothing')\n"
        "    raise OSError(errno.EFBIG, os.strerror(errno.EFBIG), out)\n"
    )
    folder = attempt(tmp_path)
    code, _, err = run(["export", str(folder), "--gguf", "q8_0"], capsys)
    lines = err.strip().splitlines()
    assert code == 1 and "Traceback" not in err and len(lines) == 1, err
    assert "File too large" in lines[0] and "4 GiB" in lines[0] and "(fix: give --out" in lines[0]
    assert [p.name for p in (folder / "export").glob("*.gguf")] == []  # no half a GGUF file looking like one
    assert (folder / "export" / "merged" / "model.safetensors").is_file()  # the merged model stands


# ---------------------------------------------------------------------------------------------------
# Stops and unfinished attempts


def test_sigterm_during_export_exits_130_and_says_so(tmp_path, monkeypatch, capsys):
    def merged_model(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("the signal should have stopped the export")

    monkeypatch.setattr(export, "merged_model", merged_model)
    before = signal.getsignal(signal.SIGTERM)
    code, _, err = run(["export", str(attempt(tmp_path))], capsys)
    assert code == 130 and "interrupted" in err
    assert signal.getsignal(signal.SIGTERM) is before
    assert not (tmp_path / "attempt-01-cpu-tiny-4gen" / "export" / "merged").exists()


def test_an_interrupted_attempts_export_records_its_status(tmp_path, fake_merge, capsys):
    folder = attempt(tmp_path, status="interrupted", steps=3)
    code, out, err = run(["export", str(folder), "--json"], capsys)
    assert code == 0
    assert json.loads(out)["attempt_status"] == {"status": "interrupted", "steps": 3}
    assert "interrupted" in err


@pytest.mark.parametrize("command", ["export", "sample"])
def test_latest_naming_a_live_run_names_the_finished_one(tmp_path, fake_merge, capsys, command):
    from launcher.run.folder import point_latest

    out = tmp_path / "out"
    finished = out / "run-20260101-000000"
    attempt(finished)
    live = out / "run-20260102-000000"
    (live / "attempt-01-cpu-tiny-4gen").mkdir(parents=True)
    # a supervisor of that run, as /proc shows one: a process whose command line names train.py
    supervisor = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", "train.py"], stdin=subprocess.PIPE
    )
    try:
        (live / "run.lock").write_text(f"{supervisor.pid}\n")
        point_latest(out, live)
        code, _, err = run([command, str(out / "latest")], capsys)
    finally:
        finish(supervisor, input=b"")  # its stdin closed: it ends
    assert code == 2 and f"still training (process {supervisor.pid})" in err and str(finished) in err
    assert fake_merge == []
