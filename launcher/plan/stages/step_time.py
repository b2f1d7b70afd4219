"""The step time, the stage that adds HOW LONG a GPU candidate's step takes (launcher.plan.speed), with its
completions as long as the ledger measured them, where it did."""

from __future__ import annotations

from launcher.plan.candidate import Candidate
from launcher.plan.completion_lengths import completion_plan
from launcher.plan.request import Planning
from launcher.plan.speed import predict


def add(candidate: Candidate, planning: Planning) -> Candidate:
    profile = candidate.profile
    if profile.device != "cuda" or planning.gpu is None or candidate.estimate is None:
        return candidate
    arch = planning.arch(profile.model)
    lengths = completion_plan(profile, arch, measurements=planning.request.measurements)
    candidate.speed = predict(profile, arch, planning.gpu, candidate.estimate, lengths, measured=candidate.measured)
    return candidate
