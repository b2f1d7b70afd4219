"""The ledger as evidence: which records count for a plan, how a measurement turns the estimate's verdict, and
that the plan says so with the way out. A record never makes a machine worse for good."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from contract.oom import read_oom
from launcher.memory.ledger import record as ledger_record
from launcher.memory.ledger import store as ledger_store
from launcher.memory.ledger import weigh as ledger_weigh
from launcher.plan.choose import make_plan
from launcher.plan.request import PlanRequest
from profiles.load import load_profile
from support.ledger_machines import card as _card
from support.ledger_machines import cpu as _cpu
from support.ledger_machines import dated_entry as _entry

L4 = "profiles/gpu-24gb-llama3.1-8b.yaml"


def _oom(held: float, asked: float = 2.0, total: float = 22.05, free: float = 0.5):
    return read_oom(
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {asked:.2f} GiB. GPU 0 has a "
        f"total capacity of {total:.2f} GiB of which {free:.2f} GiB is free. Including non-PyTorch "
        f"memory, this process has {held:.2f} GiB memory in use."
    )


@pytest.fixture
def l4():
    return load_profile(L4)


def _verdict(entries, profile, machine, **plan_kwargs):
    (cand,) = make_plan(PlanRequest([profile], machine, measurements=entries, derive=False, **plan_kwargs)).candidates
    return cand


def test_a_later_success_outweighs_an_older_oom(l4):
    oom = _entry(l4, _card(), days_ago=3, status="oom", oom_report=_oom(21.0))  # needs >= 23 GiB: refused
    assert not _verdict([oom], l4, _card()).fits
    success = _entry(l4, _card(), days_ago=1, status="ok", peak_gib=17.5)
    cand = _verdict([oom, success], l4, _card())
    assert cand.fits and cand.measured.need_gib == 17.5 and cand.measured.oom_lower_bound_gib is None
    assert cand.measured.not_counted == 1
    # an OOM after that success counts again
    again = _entry(l4, _card(), days_ago=0, status="oom", oom_report=_oom(21.0))
    cand = _verdict([oom, success, again], l4, _card())
    assert not cand.fits and "an OOM on" in cand.reason and "needs at least 23.00" in cand.reason


def test_the_newest_measurement_counts_not_the_highest(l4):
    """One run on unusual data measured more; the newer measurements of the same shape are what it needs now."""
    big = _entry(l4, _card(), days_ago=2, status="ok", peak_gib=21.9)
    newer = _entry(l4, _card(), days_ago=1, status="probe-ok", peak_gib=16.8)
    found = ledger_weigh.measured_for([big, newer], l4, _card())
    assert found.peak_gib == 16.8 and found.need_gib == 16.8 and found.not_counted == 1


def test_an_oom_that_others_caused_is_judged_against_what_is_free_now(l4):
    # the shape held 12 GiB and asked 2 more while another process held 8: it needs >= 14, not the card
    oom = _entry(l4, _card(free=9.0), status="oom", oom_report=_oom(12.0, total=22.05, free=0.1))
    cand = _verdict([oom], l4, _card(free=22.0))
    assert cand.fits and cand.measured.others_gib == pytest.approx(22.05 - 0.1 - 12.0, abs=1e-3)
    assert "others then holding 9.95 GiB" in cand.reason
    # with the other process still there, the same bound refuses it
    assert not _verdict([oom], l4, _card(free=9.0)).fits


def test_old_records_age_out(l4):
    old = _entry(l4, _card(), days_ago=ledger_weigh.MAX_AGE_DAYS + 1, status="oom", oom_report=_oom(21.0))
    assert ledger_weigh.measured_for([old], l4, _card()) is None and _verdict([old], l4, _card()).fits
    recent = _entry(l4, _card(), days_ago=ledger_weigh.MAX_AGE_DAYS - 1, status="oom", oom_report=_oom(21.0))
    assert not _verdict([recent], l4, _card()).fits
    (effect,) = ledger_weigh.record_effects([old], _card())
    assert not effect.counts and "aged out" in effect.text


def test_a_record_dated_in_the_future_has_no_effect(l4):
    """A clock set wrong (or a ledger from a machine that had one) must not hold the newest place for good."""
    future = _entry(l4, _card(), days_ago=-400, status="oom", oom_report=_oom(21.0))
    assert ledger_weigh.measured_for([future], l4, _card()) is None
    (effect,) = ledger_weigh.record_effects([future], _card())
    assert not effect.counts and "future" in effect.text


def _legacy_injected_line(profile, machine) -> dict:
    """What an older version wrote for `GRPO_INJECT_OOM=cpu-tiny-8gen python train.py --auto` on a 24 GiB
    machine: the injected CUDA message, sized to the host, taken as an OOM's lower bound."""
    entry = json.loads(ledger_record.make_entry(profile, machine, status="oom").to_json())
    entry.update(oom_lower_bound_gib=23.5393)
    for key in ("oom_kind", "others_gib"):
        entry.pop(key)
    return entry


def test_an_injected_oom_written_by_an_older_version_is_not_a_measurement(tmp_path):
    eight, four = load_profile("profiles/cpu-tiny-8gen.yaml"), load_profile("profiles/cpu-tiny-4gen.yaml")
    path = tmp_path / "ledger.jsonl"
    path.write_text("".join(json.dumps(_legacy_injected_line(p, _cpu())) + "\n" for p in (eight, four)))
    entries = ledger_store.read(path)
    plan = make_plan(PlanRequest([eight, four], _cpu(), measurements=entries))
    assert plan.chosen.name == "cpu-tiny-8gen" and all(c.measured is None for c in plan.candidates)
    effects = ledger_weigh.record_effects(entries, _cpu())
    assert all(not e.counts and "injected" in e.text for e in effects)


def test_the_plan_says_in_one_line_when_the_ledger_refused_a_shape_and_the_way_out(l4):
    small = load_profile("profiles/gpu-16gb-gemma3-1b.yaml")
    oom = _entry(l4, _card(), status="oom", oom_report=_oom(21.0))
    plan = make_plan(PlanRequest([l4, small], _card(), measurements=[oom], derive=False))
    assert plan.chosen.name == small.name
    (note,) = [n for n in plan.notes if "ledger" in n]
    assert note.startswith(f"the ledger refused {l4.name}, which the estimate fits")
    assert f"--forget {l4.name}" in note and "--ignore-ledger" in note and "\n" not in note
    assert make_plan(PlanRequest([l4, small], _card(), measurements=[], derive=False)).chosen.name == l4.name


def test_an_explicit_profile_is_warned_never_refused_by_the_ledger(l4):
    oom = _entry(l4, _card(), status="oom", oom_report=_oom(21.0))
    plan = make_plan(PlanRequest([l4], _card(), measurements=[oom], named=True, derive=False))
    (cand,) = plan.candidates
    assert plan.chosen is not None and cand.fits
    assert "the ledger warns: ran out of memory here needing at least 23.00 GiB" in cand.reason
    assert oom.date[:10] in cand.reason
    (note,) = [n for n in plan.notes if "ledger" in n or "warning" in n]
    assert note.startswith(f"warning: {l4.name} may run out of memory") and f"--forget {l4.name}" in note
    # what the estimate itself refuses stays refused
    tiny_card = _card(free=6.0, total=8.0)
    assert not make_plan(PlanRequest([l4], tiny_card, measurements=[oom], named=True, derive=False)).candidates[0].fits


def test_records_of_another_machine_have_no_effect_here(l4):
    """A ledger copied from another machine: its records count only on a machine like the one that wrote them."""
    there = _entry(l4, _card(name="NVIDIA A10G", total=22.0), status="oom", oom_report=_oom(21.0))
    assert _verdict([there], l4, _card()).measured is None
    (effect,) = ledger_weigh.record_effects([there], _card())
    assert not effect.counts and effect.text == "another machine: no effect here"


# ---------------------------------------------------------------------------------------------------
# The command line (planning only: instant, no torch)


def test_a_calibration_counts_over_an_earlier_injected_oom(tmp_path):
    """`--calibrate` measured 0.68 GiB, but the plan kept an older version's injected 23.55 GiB."""
    eight = load_profile("profiles/cpu-tiny-8gen.yaml")
    path = tmp_path / "ledger.jsonl"
    legacy = _legacy_injected_line(eight, _cpu())
    legacy["date"] = (datetime.now() - timedelta(hours=1)).isoformat(timespec="seconds")
    path.write_text(json.dumps(legacy) + "\n")
    ledger_store.append(_entry(eight, _cpu(), status="probe-ok", peak_gib=0.68), path)
    (cand,) = make_plan(PlanRequest([eight], _cpu(), measurements=ledger_store.read(path))).candidates
    assert cand.fits and cand.measured.need_gib == 0.68 and "measured 0.68 GiB" in cand.reason
