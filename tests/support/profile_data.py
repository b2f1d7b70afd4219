"""Profiles as the schema tests write them: a minimal valid mapping, the error a refused one raises, a YAML file
of given text."""

from __future__ import annotations

import pytest

from contract.errors import ProfileError
from profiles.load import profile_from_dict


def valid(**keys) -> dict:
    data = {"dataset": "arithmetic"}
    data.update(keys)
    return data


def refused(data, source="<test>") -> ProfileError:
    with pytest.raises(ProfileError) as info:
        profile_from_dict(data, source)
    return info.value


def write(tmp_path, text, name="p.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path
