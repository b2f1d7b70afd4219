"""The sandbox: right programs run, hostile ones end with the reason and nothing left behind, runs in parallel
agree with runs one by one, and the Piston runner turns every failure into a reason."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rewards import sandbox
from rewards.piston import Piston
from rewards.sandbox import (
    CPU,
    ERROR,
    FILE_SIZE,
    MEMORY,
    OK,
    OUTPUT,
    REFUSED,
    TIMEOUT,
    UNAVAILABLE,
    Limits,
    Run,
    run_many,
    run_program,
)

REPO = Path(__file__).resolve().parents[3]
# Short limits, for the programs that run into them: the suite runs on two busy cores
FAST = Limits(wall_s=1.5, cpu_s=1)
# For the programs that behave: they end at once, and a loaded machine must not time them out
ROOMY = Limits(wall_s=60, cpu_s=10)


@pytest.fixture
def scratch_root(tmp_path):
    """A folder for the scratch folders; the test fails when a run leaves anything in it."""
    root = tmp_path / "scratch"
    root.mkdir()
    yield str(root)
    assert os.listdir(root) == []


def run(program: str, stdin: str = "", limits: Limits = FAST, root: str | None = None) -> Run:
    return run_program(program, stdin, limits, scratch_root=root)


# ---------------------------------------------------------------- programs that behave


def test_a_right_program_reads_stdin_and_prints(scratch_root):
    result = run("a, b = map(int, input().split())\nprint(a + b)", "2 3\n", ROOMY, root=scratch_root)
    assert result == Run("5\n", OK, "")


def test_the_standard_library_and_the_scratch_folder_are_there(scratch_root):
    program = (
        "import collections, heapq, itertools, json, math, re, sys\n"
        "P = collections.namedtuple('P', 'x y')\n"
        "sys.setrecursionlimit(10000)\n"
        "open('notes.txt', 'w').write('kept')\n"
        "print(json.dumps([P(1, 2).x, math.isqrt(17), open('notes.txt').read()]))\n"
    )
    assert run(program, limits=ROOMY, root=scratch_root) == Run('[1, 4, "kept"]\n', OK, "")


def test_the_parent_environment_stays_out(scratch_root, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    result = run("import os\nprint(sorted(os.environ))", limits=ROOMY, root=scratch_root)
    assert result.status == OK
    assert "HF_TOKEN" not in result.stdout and "hf_secret" not in result.stdout


@pytest.mark.parametrize(
    "program, status, detail",
    [
        ("print(", ERROR, "SyntaxError"),
        ("raise ValueError('bad')", ERROR, "ValueError: bad"),
        ("import sys\nsys.exit(3)", ERROR, "exit status 3"),
    ],
)
def test_a_failing_program_says_why(scratch_root, program, status, detail):
    result = run(program, limits=ROOMY, root=scratch_root)
    assert result.status == status and detail in result.detail


# ---------------------------------------------------------------- hostile programs


def hostile_cases(outside: Path) -> dict[str, tuple[str, set[str], str]]:
    """name -> (program, the statuses it may end with, a piece of the detail)"""
    return {
        "fork bomb": ("import os\nwhile True:\n    os.fork()", {REFUSED}, "os.fork"),
        "busy loop": ("while True:\n    pass", {CPU, TIMEOUT}, ""),
        "sleep forever": ("import time\ntime.sleep(10**6)", {TIMEOUT}, "ran past"),
        "ignore SIGXCPU": (
            "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass",
            {sandbox.KILLED, TIMEOUT},
            "",
        ),
        "os.system": ("import os\nos.system('touch /tmp/owned')", {REFUSED}, "os.system"),
        "subprocess": ("import subprocess\nsubprocess.run(['id'])", {REFUSED}, "_posixsubprocess"),
        "os.execv": ("import os\nos.execv('/bin/sh', ['sh'])", {REFUSED}, "os.exec"),
        "/etc/passwd": ("print(open('/etc/passwd').read())", {REFUSED}, "/etc/passwd"),
        "os.open /etc/passwd": ("import os\nos.open('/etc/passwd', os.O_RDONLY)", {REFUSED}, "/etc/passwd"),
        "relative escape": ("print(open('../../../../../../etc/passwd').read())", {REFUSED}, "etc/passwd"),
        "the project's README": (f"print(open({str(REPO / 'README.md')!r}).read())", {REFUSED}, "README.md"),
        "write outside": (f"open({str(outside)!r}, 'w').write('x')", {REFUSED}, "open for writing"),
        "remove outside": (f"import os\nos.remove({str(outside)!r})", {REFUSED}, "os.remove"),
        "list the root": ("import os\nprint(os.listdir('/'))", {REFUSED}, "os.listdir"),
        "symlink out": ("import os\nos.symlink('/etc/passwd', 'p')\nprint(open('p').read())", {REFUSED}, "symlink"),
        "chdir out": ("import os\nos.chdir('/')\nprint(open('etc/passwd').read())", {REFUSED}, "os.chdir"),
        "socket": ("import socket\nsocket.socket()", {REFUSED}, "socket."),
        "100 MB of output": ("import sys\nsys.stdout.write('x' * 100_000_000)", {OUTPUT}, "printed more than"),
        "kill the parent": ("import os\nos.kill(os.getppid(), 9)", {REFUSED}, "os.kill"),
        "kill the group": ("import os\nos.killpg(os.getpgid(0), 9)", {REFUSED}, "os.killpg"),
        "fill the disk": ("f = open('big', 'wb')\nfor _ in range(1024):\n    f.write(b'x' * 2**20)", {FILE_SIZE}, ""),
        "many files": (
            "for i in range(1000):\n    open(f'f{i}', 'wb').write(b'x' * 2**20)",
            {REFUSED},
            "open for writing",
        ),
        "allocate 4 GB": ("x = bytearray(4 * 1024**3)", {MEMORY}, "MemoryError"),
        "ctypes": ("import ctypes", {REFUSED}, "ctypes"),
        "sqlite outside": (f"import sqlite3\nsqlite3.connect({str(outside)!r})", {REFUSED}, "sqlite3.connect"),
        "add a hook": ("import sys\nsys.addaudithook(lambda *a: None)", {REFUSED}, "sys.addaudithook"),
        "rebound builtins": (
            "import builtins, os\nbuiltins.type = lambda x: str\nos.path.realpath = lambda p: '/tmp'\n"
            "print(open('/etc/passwd').read())",
            {REFUSED},
            "/etc/passwd",
        ),
        "catching the refusal": (
            "try:\n    open('/etc/passwd')\nexcept BaseException:\n    print('escaped')",
            {REFUSED},
            "/etc/passwd",
        ),
        "change the limits": ("import resource\nresource.setrlimit(resource.RLIMIT_CPU, (100, 100))", {REFUSED}, ""),
        "gc reaching the hook": ("import gc\ngc.get_objects()", {REFUSED}, "gc."),
        "pidfd to the parent": (
            "import os, signal\nsignal.pidfd_send_signal(os.pidfd_open(os.getppid()), 0)\nprint('escaped')",
            {ERROR},
            "no attribute",
        ),
        "renice the parent": ("import os\nos.setpriority(os.PRIO_PROCESS, os.getppid(), 19)", {ERROR}, "no attribute"),
        "a fresh posix": (
            "import sys\ndel sys.modules['posix']\nimport posix\nposix.setpriority(0, 1, 19)",
            {REFUSED},
            "import posix",
        ),
    }


HOSTILE = list(hostile_cases(Path("/unused")))


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_program_is_stopped_and_leaves_nothing(scratch_root, tmp_path, name):
    outside = tmp_path / "outside.txt"
    if name == "remove outside":
        outside.write_text("keep")
    program, statuses, detail = hostile_cases(outside)[name]
    result = run(program, root=scratch_root)
    assert result.status in statuses, result
    assert detail in result.detail
    assert "escaped" not in result.stdout
    assert len(result.stdout.encode()) <= FAST.output_bytes
    if name == "write outside":
        assert not outside.exists()
    if name == "remove outside":
        assert outside.read_text() == "keep"
    assert not Path("/tmp/owned").exists()


def test_a_socket_connection_never_arrives(scratch_root):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.2)
        port = listener.getsockname()[1]
        program = f"import socket\nsocket.create_connection(('127.0.0.1', {port})).sendall(b'hi')"
        result = run(program, root=scratch_root)
        assert result.status == REFUSED and "socket." in result.detail
        with pytest.raises(TimeoutError):
            listener.accept()


def test_a_refused_run_stops_the_program_before_its_next_line(scratch_root):
    result = run("print('before', flush=True)\nimport os\nos.system('true')\nprint('after')", root=scratch_root)
    assert result == Run("before\n", REFUSED, "os.system")


def test_a_stopped_program_leaves_no_process_behind(scratch_root):
    # The run is killed by group: a second run right after finds the machine as it was
    before = {p for p in os.listdir("/proc") if p.isdigit()}
    assert run("while True:\n    pass", root=scratch_root).status in (CPU, TIMEOUT)
    time.sleep(0.1)
    children = []
    for pid in set(os.listdir("/proc")) - before:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
            children.append(pid)
    assert children == []


# ---------------------------------------------------------------- many at once


def test_runs_in_parallel_agree_with_runs_one_by_one(scratch_root):
    jobs = [
        ("print(int(input()) * 2)", "21\n"),
        ("print(", ""),
        ("import os\nos.system('true')", ""),
        ("print(input()[::-1])", "abc\n"),
        ("import sys\nsys.stdout.write('y' * 10**6)", ""),
        ("print(sum(range(int(input()))))", "10\n"),
    ]
    parallel = run_many(jobs, FAST, workers=4, scratch_root=scratch_root)
    serial = [run(program, stdin, root=scratch_root) for program, stdin in jobs]
    assert parallel == serial
    assert [r.status for r in parallel] == [OK, ERROR, REFUSED, OK, OUTPUT, OK]
    assert [r.stdout for r in parallel[:1]] == ["42\n"]


def test_run_many_of_nothing_and_a_runner_that_raises():
    assert run_many([]) == []

    def broken(program, stdin, limits):
        raise RuntimeError("down")

    assert run_many([("p", "")], runner=broken) == [Run("", UNAVAILABLE, "RuntimeError: down")]


@pytest.mark.parametrize(
    "key, value", [("wall_s", 0), ("cpu_s", -1), ("memory_bytes", True), ("processes", -1), ("write_opens", 1.5)]
)
def test_limits_refuse_nonsense(key, value):
    with pytest.raises(ValueError, match=f"Limits: {key}"):
        Limits(**{key: value})


def test_an_unusable_scratch_root_is_unavailable_not_an_error(tmp_path):
    result = run_program("print(1)", "", FAST, scratch_root=str(tmp_path / "missing"))
    assert result.status == UNAVAILABLE and "scratch" in result.detail


# ---------------------------------------------------------------- Piston


class _FakePiston(BaseHTTPRequestHandler):
    requests: list = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, body))
        stdin = body.get("stdin", "")
        if stdin == "hang":
            time.sleep(1.0)
        if stdin == "fail":
            self.send_response(500)
            self.end_headers()
            return
        if stdin == "garbage":
            reply = b"not json"
        elif stdin == "killed":
            reply = json.dumps({"run": {"stdout": "", "code": None, "signal": "SIGKILL"}}).encode()
        else:
            reply = json.dumps({"run": {"stdout": stdin.upper(), "stderr": "", "code": 0, "signal": None}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


@pytest.fixture
def piston_url():
    _FakePiston.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakePiston)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_piston_sends_its_api_and_reads_run_stdout(piston_url):
    result = Piston(piston_url)("print(input().upper())", "abc", Limits(wall_s=2, cpu_s=2))
    assert result == Run("ABC", OK, "")
    path, body = _FakePiston.requests[0]
    assert path == "/api/v2/execute"
    assert body == {
        "language": "python",
        "version": "*",
        "files": [{"name": "main.py", "content": "print(input().upper())"}],
        "stdin": "abc",
        "run_timeout": 2000,
        "run_memory_limit": 512 * 1024 * 1024,
    }


def test_piston_url_may_name_the_api_itself(piston_url):
    assert Piston(piston_url + "/api/v2/").endpoint() == piston_url + "/api/v2/execute"


@pytest.mark.parametrize(
    "stdin, status, detail",
    [
        ("fail", UNAVAILABLE, "HTTP 500"),
        ("garbage", UNAVAILABLE, "JSONDecodeError"),
        ("hang", UNAVAILABLE, "timed out"),
        ("killed", sandbox.KILLED, "SIGKILL"),
    ],
)
def test_piston_failures_are_reasons_not_errors(piston_url, stdin, status, detail):
    result = Piston(piston_url, timeout_s=0.3)("x", stdin, FAST)
    assert result.status == status and detail in result.detail


def test_piston_unreachable_is_unavailable():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = Piston(f"http://127.0.0.1:{port}", timeout_s=0.5)("print(1)", "", FAST)
    assert result.status == UNAVAILABLE and "piston" in result.detail


def test_piston_runs_in_parallel(piston_url):
    runs = run_many([("p", "a"), ("p", "b"), ("p", "c")], FAST, runner=Piston(piston_url), workers=3)
    assert [r.stdout for r in runs] == ["A", "B", "C"]
