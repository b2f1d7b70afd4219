"""The planner plans today what it planned when the golden grid was kept (tests/support/plan_golden.py says what
the grid holds and how to regenerate it when a change of plan is meant)."""

from __future__ import annotations

import pytest

from support.plan_golden import GOLDEN, cases, render

CASES = cases()


def test_the_grid_covers_what_it_says():
    names = set(CASES)
    assert {p.stem for p in GOLDEN.glob("*.json")} == names, "a case without its kept output, or the reverse"
    assert sum(n.startswith("fit-") for n in names) == 17 * 5
    assert sum(n.startswith("plan-nvidia") or n == "plan-tesla-t4" for n in names) == 9


@pytest.mark.parametrize("name", sorted(CASES))
def test_plan_is_byte_identical_to_the_kept_one(name, tmp_path):
    kept = (GOLDEN / f"{name}.json").read_text()
    assert render(CASES[name], tmp_path) + "\n" == kept, (
        f"{name}: the plan changed; if meant, regenerate with `python -m support.plan_golden --write` from tests/"
    )
