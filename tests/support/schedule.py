"""The order the suite's tests are handed to pytest-xdist's workers in (tests/conftest.py applies it).

Under `--dist worksteal`, each worker first gets a contiguous slice of the collection (the slices' sizes as
`slice_sizes` cuts them), and a worker left without tests takes the back half of the longest queue. So the order
is built slice by slice: the costly units are dealt longest first, each to the slice with the least cost so far,
and lead their slice; the cheap tests fill each slice to its size after them, so that what a thief takes from a
queue's end is cheap. A unit is the tests that share a module- or class-scoped fixture (set up on two workers, it
would run twice), or one test.

A unit's cost comes from tests/durations.json: the seconds each test took when last measured (`make durations`
writes it: every test that took KEPT_S or more, and every slow or heavy one as tests/conftest.py marks them),
setup and teardown included. A test missing from it counts UNKNOWN_SLOW_S when marked slow (a new one) and no test
of its unit was timed (a shared fixture's cost lies on the timed one), else nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
DURATIONS = REPO / "tests" / "durations.json"
UNKNOWN_SLOW_S = 10.0  # a slow test not yet measured: among the costly ones, behind the measured long runs
COSTLY_S = 0.5  # a unit costing less fills the slices instead of leading them
KEPT_S = 0.5  # `make durations` keeps the tests that took at least this long (and every slow or heavy one)


def slice_sizes(count: int, workers: int) -> list[int]:
    """How many tests each worker gets first: xdist's worksteal splits the collection evenly, in order."""
    sizes, left = [], count
    for index in range(workers):
        size = left // (workers - index)
        sizes.append(size)
        left -= size
    return sizes


def group_units(items: Sequence[T], unit_of: Callable[[T], Hashable]) -> list[list[T]]:
    """The items grouped by unit_of, each unit where its first item stood, its items in their order."""
    units: dict[Hashable, list[T]] = {}
    for item in items:
        units.setdefault(unit_of(item), []).append(item)
    return list(units.values())


def order(units: Sequence[Sequence[T]], cost: Callable[[T], float], workers: int) -> list[T]:
    """The tests of `units` in the order that gives each of `workers` worksteal slices its share of the costly
    units, longest first (workers <= 1: the costly units longest first, then the rest in their order)."""
    costed = [(sum(cost(item) for item in unit), index, list(unit)) for index, unit in enumerate(units)]
    costly = sorted((c for c in costed if c[0] >= COSTLY_S), key=lambda c: (-c[0], c[1]))
    cheap = [item for c in costed if c[0] < COSTLY_S for item in c[2]]
    if workers <= 1:
        return [item for c in costly for item in c[2]] + cheap
    sizes = slice_sizes(sum(len(c[2]) for c in costed), workers)
    slices: list[list[T]] = [[] for _ in sizes]
    loads = [0.0] * workers
    for unit_cost, _, unit in costly:
        roomy = [i for i in range(workers) if len(slices[i]) + len(unit) <= sizes[i]] or range(workers)
        target = min(roomy, key=lambda i: (loads[i], i))
        slices[target].extend(unit)
        loads[target] += unit_cost
    rest = iter(cheap)
    for index, size in enumerate(sizes):
        while len(slices[index]) < size:
            item = next(rest, None)
            if item is None:
                break
            slices[index].append(item)
    return [item for part in slices for item in part] + list(rest)


SHARED_SCOPES = ("class", "module", "package")


def unit_of(item) -> str:
    """The tests that must go to one worker: those sharing a module- or class-scoped fixture (on two workers it
    would be set up twice); any other test is a unit of its own."""
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs.values() if info is not None else ()
    shared = {defs[-1].scope for defs in definitions if defs and defs[-1].scope in SHARED_SCOPES}
    if not shared:
        return item.nodeid
    if "package" in shared or "module" in shared:
        return item.nodeid.split("::")[0]
    return item.nodeid.rsplit("::", 1)[0]


def deal(config, items: list, durations: dict[str, float]) -> None:
    """Put pytest's `items` in the order above (pytest_collection_modifyitems). On an xdist worker (the controller
    collects nothing) they are dealt for worksteal's slices, as `make test` runs the suite; elsewhere the costly
    go first."""

    timed_units = {unit_of(item) for item in items if item.nodeid in durations}

    def cost(item) -> float:
        if item.nodeid in durations:
            return durations[item.nodeid]
        new = item.get_closest_marker("slow") is not None and unit_of(item) not in timed_units
        return UNKNOWN_SLOW_S if new else 0.0

    worker = getattr(config, "workerinput", None)
    workers = int(worker["workercount"]) if worker else 1
    items[:] = order(group_units(items, unit_of), cost, workers)


def read_durations(path: Path = DURATIONS) -> dict[str, float]:
    """{test id: seconds} from `path`; empty when it is missing or unreadable (the order then only knows slow)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float)) and v >= 0}


def gone_from_its_file(node_id: str, root: Path = REPO) -> bool:
    """Whether a pytest node id ("tests/x.py::test_y[case]") names a test function its file no longer defines
    (the file gone, or the function renamed or removed). Anything else is not a node id, and not gone."""
    file, separator, rest = node_id.partition("::")
    if not separator:
        return False
    name = rest.split("[", 1)[0].rpartition("::")[2]
    try:
        return f"def {name}(" not in (root / file).read_text(encoding="utf-8")
    except OSError:
        return True


def write_durations(seconds: dict[str, float], kept_anyway: set[str], path: Path = DURATIONS) -> int:
    """Record this run's tests in `path`: those that took KEPT_S or more, and every one of `kept_anyway` (the slow
    and the heavy: missing, one would count as slow, or UNKNOWN_SLOW_S), rounded to 0.1 s; a quicker one leaves.
    Tests the run did not reach keep their entries, so a run of part of the suite updates that part only, unless
    their test is gone. How many entries it holds."""
    kept = {test: took for test, took in read_durations(path).items() if not gone_from_its_file(test)}
    for test, took in seconds.items():
        if took >= KEPT_S or test in kept_anyway:
            kept[test] = round(took, 1)
        else:
            kept.pop(test, None)
    path.write_text(json.dumps(dict(sorted(kept.items())), indent=0) + "\n", encoding="utf-8")
    return len(kept)
