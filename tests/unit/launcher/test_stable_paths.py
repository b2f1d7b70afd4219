"""Stable paths to script against: OUTPUT_DIR/latest -> the newest run folder, RUN/final -> the attempt whose
adapter is the run's result; links replaced in one rename, plain files where the file system has no links;
`sample` and `train --resume` take them. The runs are the supervisor's with the fake child (tests/support/fake_child.py)."""

from __future__ import annotations

import errno
import io
import json
import os

from rich.console import Console
from test_supervise import CPU_MACHINE, FAKE_CHILD, ladder

from commands.sample import find_target
from launcher.plan.choose import make_plan
from launcher.plan.request import PlanRequest
from launcher.run import folder
from launcher.run.folder import FINAL, LATEST, follow, latest_run_dir, point, run_folder_of, stable_target
from launcher.run.request import RunRequest
from launcher.run.supervise import supervise
from support.cli import train_py

OOM_THEN_NEXT = {"a": {"do": "oom", "text": "torch_logits_gib.txt"}, "b": {"do": "ok"}}


def supervised(tmp_path, monkeypatch, behaviour: dict, resume: bool = False) -> tuple[int, str]:
    monkeypatch.setenv("FAKE_CHILD_PLAN", json.dumps(behaviour))
    monkeypatch.delenv("GRPO_INJECT_OOM", raising=False)
    out = io.StringIO()
    plan = make_plan(PlanRequest(ladder(), CPU_MACHINE))
    # "a" shrinks once and fails again, then falls back to "b"
    code = supervise(
        plan,
        RunRequest(tmp_path / "out", resume=resume),
        child_command=FAKE_CHILD,
        console=Console(file=out, width=200, highlight=False),
    )
    return code, out.getvalue()


def test_a_run_with_a_fallback_points_latest_and_final(tmp_path, monkeypatch):
    code, _ = supervised(tmp_path, monkeypatch, OOM_THEN_NEXT)
    assert code == 0
    out = tmp_path / "out"
    run_dir = next(out.glob("run-*"))
    latest, final = out / LATEST, run_dir / FINAL
    assert latest.is_symlink() and os.readlink(latest) == run_dir.name  # relative: the folder may be moved
    assert final.is_symlink() and os.readlink(final) == "attempt-03-b"  # a, a shrunk, then b
    assert (latest / FINAL / "adapter").is_dir()
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # no temporary link left
    # sample takes them
    for given in (latest, latest / FINAL, run_dir, final):
        target = find_target(given)
        assert target.attempt_dir.resolve() == (run_dir / "attempt-03-b").resolve(), given
    assert run_folder_of(latest) == run_dir and run_folder_of(final).resolve() == run_dir.resolve()


def test_latest_follows_the_newest_run_and_final_stays_unset_without_a_result(tmp_path, monkeypatch):
    supervised(tmp_path, monkeypatch, {"a": {"do": "ok"}})
    first = follow(tmp_path / "out" / LATEST)
    code, _ = supervised(tmp_path, monkeypatch, {"a": {"do": "error"}})
    assert code == 1
    second = follow(tmp_path / "out" / LATEST)
    assert second != first and second.name.startswith("run-")
    assert (first / FINAL).is_symlink() and not (second / FINAL).exists()


def test_resume_takes_the_run_latest_names(tmp_path, monkeypatch):
    code, _ = supervised(tmp_path, monkeypatch, {"a": {"do": "error"}})
    runs = sorted((tmp_path / "out").glob("run-*"))
    older = runs[0]
    newer = tmp_path / "out" / "run-99999999-999999"
    newer.mkdir()  # a newer folder by name and time, which latest does not name
    assert latest_run_dir(tmp_path / "out") == older
    point(tmp_path / "out" / LATEST, newer)
    assert latest_run_dir(tmp_path / "out") == newer


def test_plain_files_where_the_file_system_has_no_links(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(folder.os, "symlink", refuse)
    code, _ = supervised(tmp_path, monkeypatch, OOM_THEN_NEXT)
    assert code == 0
    out = tmp_path / "out"
    run_dir = next(out.glob("run-*"))
    assert (out / LATEST).is_file() and not (out / LATEST).is_symlink()
    assert (out / LATEST).read_text() == run_dir.name + "\n"
    assert (run_dir / FINAL).read_text() == "attempt-03-b\n"
    assert stable_target(out / LATEST / FINAL) == run_dir / "attempt-03-b"
    assert find_target(out / LATEST).attempt_dir == run_dir / "attempt-03-b"
    assert find_target(out / LATEST / FINAL).adapter_dir == run_dir / "attempt-03-b" / "adapter"


def test_point_replaces_in_one_rename_and_never_a_real_folder(tmp_path):
    one, two = tmp_path / "run-1", tmp_path / "run-2"
    one.mkdir()
    two.mkdir()
    link = tmp_path / LATEST
    assert point(link, one) is None and follow(link) == one
    assert point(link, two) is None and follow(link) == two
    assert sorted(p.name for p in tmp_path.iterdir()) == [LATEST, "run-1", "run-2"]
    mine = tmp_path / "other"
    mine.mkdir()
    (mine / LATEST).mkdir()
    assert "a folder of its own" in point(mine / LATEST, one)


def test_train_resume_accepts_latest(tmp_path, monkeypatch, capsys):
    supervised(tmp_path, monkeypatch, {"a": {"do": "ok"}})
    result = train_py("train", "--resume", str(tmp_path / "out" / LATEST), "--profiles-dir", str(tmp_path / "none"))
    # the run is found through latest (its folder named in the error of the missing profiles folder, or
    # resumed); a path that is no run is refused by name
    assert "not a run folder" not in result.stderr
    bad = train_py("train", "--resume", str(tmp_path))
    assert bad.returncode == 2 and "not a run folder" in bad.stderr
