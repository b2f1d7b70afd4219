"""Run folders of one --output-dir: two runs started there at the same moment each get a folder of their own."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from launcher.run.folder import RunLock, new_run_dir


def _open_run(output: str) -> str:
    run = new_run_dir(Path(output))
    RunLock(run).acquire()  # each supervisor takes its own folder's lock; none refuses the other's
    return run.name


def test_runs_started_at_once_in_one_output_dir_get_their_own_folders(tmp_path):
    with multiprocessing.get_context("fork").Pool(4) as pool:
        names = pool.map(_open_run, [str(tmp_path)] * 8)
    assert len(set(names)) == 8 and all(n.startswith("run-") for n in names)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
