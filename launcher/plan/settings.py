"""WHAT a candidate will run with: the profile keys the fit solver moves, as one flat dict for the plan's JSON
(`plan --json` candidates carry it as `settings`), so that tools read what will run without the YAML."""

from __future__ import annotations

from profiles.schema import LEVER_KEYS

# The keys the solver moves (tagged `lever` in the schema), with the model and optimizer they run with and the
# run's length (its optimizer steps, launcher.plan.duration).
SETTINGS_KEYS = ("model", "optim", "max_steps") + LEVER_KEYS


def settings_of(profile) -> dict:
    """The solver's keys of a profile, with the completions per optimizer step they make."""
    out = {key: getattr(profile, key) for key in SETTINGS_KEYS}
    out["effective_batch"] = profile.effective_batch
    return out
