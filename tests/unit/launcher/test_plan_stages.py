"""The planner as one request and one pipeline of stages (launcher.plan.stages): the order the docs state, a
settled candidate passed by, a new concern plugged in as one stage, and the entry kept short."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import launcher.plan.stages as stages
from launcher.card.detect import Machine, detect_machine
from launcher.plan.choose import make_plan
from launcher.plan.request import PlanRequest
from profiles.load import load_profiles

REPO = Path(__file__).resolve().parents[3]
PLAN = REPO / "launcher" / "plan"


def test_the_docs_name_the_stages_in_their_order():
    names = [stage.__module__.rsplit(".", 1)[-1] for stage in stages.STAGES]
    text = (REPO / "docs" / "planning.md").read_text()
    section = text.split("## How a plan is made", 1)[1].split("\n## ", 1)[0]
    said = re.findall(r"`(\w+)` \(", section.split("**the stages**", 1)[1].split("3. **the choice**", 1)[0])
    assert said == names
    assert {p.stem for p in (PLAN / "stages").glob("*.py")} - {"__init__"} == set(names)


def _shipped_on(gib: float, name: str):
    machine = detect_machine(what_if_gib=gib, what_if_name=name)
    return PlanRequest([p for p in load_profiles(REPO / "profiles") if p.device == "cuda"], machine)


def test_a_new_concern_is_one_stage(monkeypatch):
    """A stage added to STAGES refuses what it refuses, and the choice moves to the next rung that fits."""
    request = _shipped_on(79.6, "NVIDIA H100 80GB HBM3")
    before = make_plan(request)
    assert before.chosen is not None

    def no_first_choice(candidate, planning):
        if candidate.profile.name == before.chosen.name:
            candidate.fits, candidate.reason = False, "refused by the new stage"
        return candidate

    monkeypatch.setattr(stages, "STAGES", (*stages.STAGES, no_first_choice))
    after = make_plan(request)
    refused = next(c for c in after.candidates if c.profile.name == before.chosen.name)
    assert refused.reason == "refused by the new stage"
    assert after.chosen is not None and after.chosen.name != before.chosen.name


def test_a_settled_candidate_is_passed_by(monkeypatch):
    """A cuda profile planned without a GPU is settled by the first stage: no estimate, no step, no run."""
    machine = Machine([], "no GPU here", 24.0, 20.0)
    profile = next(p for p in load_profiles(REPO / "profiles") if p.device == "cuda")
    (candidate,) = make_plan(PlanRequest([profile], machine, derive=False)).candidates
    assert candidate.settled and not candidate.fits and "needs an NVIDIA GPU" in candidate.reason
    assert candidate.estimate is None and candidate.speed is None and candidate.run is None


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            count = len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs)
            count += bool(args.vararg) + bool(args.kwarg) - bool(args.args and args.args[0].arg in ("self", "cls"))
            yield node, count


def test_the_entry_is_short_and_no_planning_function_takes_more_than_six_parameters():
    entry = next(node for node, _ in _functions(PLAN / "choose.py") if node.name == "make_plan")
    assert entry.end_lineno - entry.lineno + 1 <= 40
    assert len(entry.args.args) == 1  # the request
    many = [
        (path.relative_to(REPO).as_posix(), node.name, count)
        for path in sorted(PLAN.rglob("*.py"))
        for node, count in _functions(path)
        if count > 6
    ]
    assert not many, many
