"""Run folders of one --output-dir: two runs started there at the same moment each get a folder of their own."""

from __future__ import annotations

from launcher.run.folder import RunLock
from support.at_once import run_at_once

# what each supervisor does first in the output folder: a run folder of its own, and that folder's lock (none
# refuses the other's)
_OPEN_RUN = """
import sys
from pathlib import Path
from launcher.run.folder import RunLock, new_run_dir
run = new_run_dir(Path(sys.argv[1]))
RunLock(run).acquire()
print(run.name)
"""


def test_runs_started_at_once_in_one_output_dir_get_their_own_folders(tmp_path):
    names = [out.strip() for out in run_at_once(_OPEN_RUN, [[tmp_path]] * 8)]
    assert len(set(names)) == 8 and all(n.startswith("run-") for n in names)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)


# ---------------------------------------------------------------------------------------------------
# A stale run.lock whose pid now belongs to another process


def test_a_lock_naming_a_process_that_is_not_a_supervisor_is_taken_over(tmp_path):
    import os

    from launcher.run.folder import LOCK_FILE

    (tmp_path / LOCK_FILE).write_text("1\n")  # pid 1: the machine's init, never this run's supervisor
    lock = RunLock(tmp_path).acquire()
    assert (tmp_path / LOCK_FILE).read_text().split()[0] == str(os.getpid())
    lock.release()


def test_a_lock_older_than_the_process_holding_its_pid_is_stale(tmp_path):
    import os
    import subprocess
    import sys

    from launcher.run.folder import LOCK_FILE

    # a stand-in that lives until the test kills it (an hour: no busy machine makes the test outlast it)
    later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)", "train.py"])
    try:
        path = tmp_path / LOCK_FILE
        path.write_text(f"{later.pid}\n")
        hour_ago = path.stat().st_mtime - 3600  # written before that process started: its pid was reused
        os.utime(path, (hour_ago, hour_ago))
        RunLock(tmp_path).acquire().release()
    finally:
        later.kill()
        later.wait()


def test_a_lock_held_by_a_live_supervisor_is_refused(tmp_path):
    import subprocess
    import sys

    import pytest

    from contract.errors import UsageError
    from launcher.run.folder import LOCK_FILE

    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)", "train.py", "train"])
    try:
        (tmp_path / LOCK_FILE).write_text(f"{owner.pid}\n")
        with pytest.raises(UsageError, match=f"kill -INT {owner.pid}"):
            RunLock(tmp_path).acquire()
    finally:
        owner.kill()
        owner.wait()
