"""trainer.backends.collector_paused: the cyclic garbage collector is off while an attempt imports Unsloth, TRL and
torch, and what they built is frozen after, so no later collection walks it again; everything allocated after the
imports (the model first) is collected as before."""

from __future__ import annotations

import gc
import json
import os
import sys
import weakref
from pathlib import Path

import pytest

from support.waiting import run_to_end
from trainer.backends import collector_paused

REPO = Path(__file__).resolve().parents[3]


class Node:
    def __init__(self):
        self.other = self  # a cycle: only the collector frees it


def test_the_suites_own_collector_is_on_again_once_collection_is_done():
    # tests/conftest.py turns it off while the test modules import and freezes what they built
    assert gc.isenabled() and gc.get_freeze_count() > 0


def test_off_inside_back_on_after_with_what_was_built_inside_frozen():
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    with collector_paused():
        assert not gc.isenabled()
        built = [Node() for _ in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen + len(built)


def test_a_collector_that_was_off_stays_off_and_an_error_inside_still_restores_it():
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(ImportError), collector_paused():
        raise ImportError("no module named unsloth")
    assert gc.isenabled()


def test_what_is_allocated_afterwards_is_collected_as_usual():
    with collector_paused():
        pass
    node = Node()
    gone = weakref.ref(node)
    del node
    gc.collect()
    assert gone() is None


# Records, as each library is first imported, whether the collector was on at that moment
PROBE = """
import gc, json, sys
seen = {}
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name in ("torch", "transformers", "trl", "peft", "unsloth") and name not in seen:
            seen[name] = gc.isenabled()
        return None
sys.meta_path.insert(0, Watch())
from profiles.load import load_profile
from trainer.backends import open_backend
backend = open_backend(load_profile("profiles/cpu-tiny-4gen.yaml"))
print(json.dumps({"backend": backend.name, "collector_on_at_import": seen, "enabled": gc.isenabled(),
                  "frozen": gc.get_freeze_count()}))
"""


@pytest.mark.parametrize("no_unsloth", ["", "1"], ids=["unsloth-cpu", "transformers"])
def test_an_attempt_imports_its_libraries_with_the_collector_off(no_unsloth):
    env = {k: v for k, v in os.environ.items() if k != "GRPO_TRAIN_NO_UNSLOTH"}
    if no_unsloth:
        env["GRPO_TRAIN_NO_UNSLOTH"] = no_unsloth
    done = run_to_end([sys.executable, "-c", PROBE], cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["backend"] == ("transformers" if no_unsloth else "unsloth-cpu")
    libraries = {"torch", "transformers", "trl", "peft"} | (set() if no_unsloth else {"unsloth"})
    assert seen["collector_on_at_import"] == dict.fromkeys(libraries, False)
    assert seen["enabled"] is True  # on again for the model and everything after
    assert seen["frozen"] > 100_000  # the libraries' objects, left out of every later collection
