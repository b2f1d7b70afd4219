"""The step time, the stage that adds HOW LONG a candidate's step takes: on a card by launcher.plan.speed, on the
CPU by launcher.plan.cpu_speed, with its completions as long as the ledger measured them, where it did."""

from __future__ import annotations

from launcher.plan import cpu_speed
from launcher.plan.candidate import Candidate
from launcher.plan.completion_lengths import completion_plan
from launcher.plan.request import Planning
from launcher.plan.speed import predict


def add(candidate: Candidate, planning: Planning) -> Candidate:
    profile = candidate.profile
    if candidate.estimate is None:
        return candidate
    arch = planning.arch(profile.model)
    lengths = completion_plan(profile, arch, measurements=planning.request.measurements)
    if profile.device == "cpu":
        candidate.speed = cpu_speed.predict(profile, arch, lengths, measured=candidate.measured)
    elif planning.gpu is not None:
        candidate.speed = predict(profile, arch, planning.gpu, candidate.estimate, lengths, measured=candidate.measured)
    return candidate
