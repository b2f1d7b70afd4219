"""Reward registry (placeholder names; the real functions replace this file)."""
REWARDS = {name: None for name in ("xml_strict", "xml_soft", "xml_count", "number", "accuracy")}


def describe():
    return {name: "" for name in REWARDS}
