"""No verdict on a clock in the suite. A test runs a process to its end through tests/support/waiting.py (bounded
by the process's progress), never with a timeout that a loaded machine can reach; and no assert reads a clock
(CI's machines differ by 2x and more in speed). Read from the tests' source: a call that waits on a process or a
thread with a timeout, a process run past the helper, or an assert on a clock fails here unless it is listed
below with its reason."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("tests", "tests_vllm")

# Calls that wait on a process or a thread: a `timeout` given to one is a wall-clock limit
WAITS = {"run", "communicate", "wait", "check_output", "check_call", "call", "join"}
# Calls that run a process to its end without the helper
RUNS = {("subprocess", "run"), ("subprocess", "check_output"), ("subprocess", "check_call"), ("subprocess", "call")}

# (file, enclosing function): why its limit or its direct run is no verdict on the machine's speed
ALLOWED = {
    ("tests/support/waiting.py", "finish_all"): "the helper itself: a poll interval, not a limit",
    ("tests_vllm/scenarios.py", "server"): "a stopped server's cleanup: killed when it outlasts the wait",
    ("tests/unit/launcher/test_supervise.py", "test_signal_is_forwarded_child_saves_and_run_exits_130"): (
        "joins a thread that has already signalled; its result is not judged"
    ),
    ("tests/unit/launcher/test_supervise.py", "test_resume_continues_the_latest_run_from_its_checkpoint"): (
        "joins a thread that has already signalled; its result is not judged"
    ),
    ("tests/unit/launcher/test_supervise.py", "test_a_signal_while_the_server_loads_stops_it_and_the_run"): (
        "joins a thread that has already signalled; its result is not judged"
    ),
    (
        "tests/e2e/test_learning.py",
        "test_grpo_raises_held_out_accuracy_well_above_the_warm_start",
    ): "train_py's timeout is accepted and ignored",
    ("tests/conftest.py", "small_disk"): "mount and umount: a system call, no work of the suite's",
    ("tests/cli/test_cli_input.py", "test_output_dir_on_a_read_only_mount"): "mount and umount, as small_disk",
    (
        "tests/cli/test_export_writes_whole.py",
        "test_an_out_on_a_read_only_mount_is_refused_before_loading",
    ): "mount and umount",
    ("tests/rehearsal/test_docker_runtime.py", "image_root"): "a shell script that makes folders",
}


def _functions(tree: ast.AST, kind: type = ast.Call):
    """(enclosing function name, node) for every node of `kind`; module-level ones under the name '<module>'."""
    stack = [("<module>", tree)]
    while stack:
        name, node = stack.pop()
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else name
            if isinstance(child, kind):
                yield name, child
            stack.append((inner, child))


def _findings(path: Path) -> list[tuple[str, int, str]]:
    found = []
    for function, call in _functions(ast.parse(path.read_text(encoding="utf-8"))):
        func = call.func
        attribute = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
        timed = any(keyword.arg == "timeout" for keyword in call.keywords)
        if attribute == "wait" and call.args:  # Popen.wait(60)
            timed = True
        if attribute in WAITS and timed:
            found.append((function, call.lineno, f"{attribute}(..., timeout): a wall-clock limit"))
        elif attribute in ("train_py", "start_train_py") and timed:
            found.append((function, call.lineno, "train_py(..., timeout): ignored, and reads as a limit"))
        elif (owner, attribute) in RUNS or (attribute == "communicate" and not timed):
            found.append((function, call.lineno, f"{owner or '...'}.{attribute}: a run past the helper"))
    return found


def _unlisted(find, allowed: dict) -> tuple[list[str], list]:
    """(every finding of `find` over the suite's sources not in `allowed`, as file:line (function)[: what]; the
    entries of `allowed` nothing was found for)."""
    offending, used = [], set()
    for folder in SOURCES:
        for path in sorted((REPO / folder).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            for function, line, *what in find(path):
                if (relative, function) in allowed:
                    used.add((relative, function))
                else:
                    offending.append(f"{relative}:{line} ({function})" + "".join(f": {w}" for w in what))
    return offending, sorted(set(allowed) - used)


def test_no_test_waits_on_a_process_with_a_wall_clock_limit():
    offending, unused = _unlisted(_findings, ALLOWED)
    assert not offending, (
        "run it with tests/support/waiting.py (run_to_end, finish, finish_all: bounded by progress), or list it in "
        "ALLOWED with the reason it is no verdict on the machine's speed:\n" + "\n".join(offending)
    )
    assert not unused, f"listed but no longer there: {unused}"


# A clock read in an assertion: a verdict on the machine's speed, which CI's machines vary by 2x and more
CLOCKS = {"time", "perf_counter", "monotonic", "process_time", "thread_time"}

# (file, enclosing function): why its clock bound is no verdict on the machine's speed
CLOCK_BOUNDS_ALLOWED = {
    ("tests/unit/rewards/test_code_rewards.py", "test_code_format_is_fast_on_a_completion_full_of_fences"): (
        "5 CPU seconds against 0.06 measured: a pattern that backtracks takes hours"
    ),
    ("tests/unit/rewards/test_rewards.py", "test_odd_inputs_score_zero_quickly"): (
        "30 CPU seconds against 1.3 measured: a pattern that backtracks takes hours"
    ),
}


def _clock_bounds(path: Path) -> list[tuple[str, int]]:
    """(enclosing function, line) of every assert that reads a clock."""
    return [
        (function, check.lineno)
        for function, check in _functions(ast.parse(path.read_text(encoding="utf-8")), ast.Assert)
        if any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in CLOCKS
            for n in ast.walk(check.test)
        )
    ]


def test_no_test_asserts_on_a_clock():
    offending, unused = _unlisted(_clock_bounds, CLOCK_BOUNDS_ALLOWED)
    assert not offending, (
        "bound the work, not the time it took (count the calls, the steps, the bytes; a benchmark times it), or "
        "list it in CLOCK_BOUNDS_ALLOWED with a margin no machine reaches:\n" + "\n".join(offending)
    )
    assert not unused, f"listed but no longer there: {unused}"
