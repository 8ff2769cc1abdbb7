"""``offload.testing``'s public API: every exported name resolves to the double it names, and
importing the package loads nothing else of offload (a user's test suite pays for what it uses)."""
from __future__ import annotations

import subprocess
import sys

import offload.testing
from offload.ledger.memory import MemoryLedger
from offload.testing.clock import FakeClock
from offload.testing.demo_script import DEMO_MODEL, demo_script
from offload.testing.model_server import ScriptedModelServer, text_reply


def test_every_exported_name_resolves():
    exported = {name: getattr(offload.testing, name) for name in offload.testing.__all__}
    assert exported["FakeClock"] is FakeClock and exported["MemoryLedger"] is MemoryLedger
    assert exported["ScriptedModelServer"] is ScriptedModelServer and exported["text_reply"] is text_reply
    assert (exported["demo_model_script"], exported["DEMO_MODEL"]) == (demo_script, DEMO_MODEL)
    assert set(offload.testing.__all__) <= set(dir(offload.testing))


def test_an_unknown_name_says_so():
    try:
        offload.testing.NoSuchDouble
    except AttributeError as exc:
        assert "NoSuchDouble" in str(exc)
    else:
        raise AssertionError("an unknown name resolved")


def test_importing_the_package_loads_nothing_else_of_offload():
    code = "import sys, offload.testing; print(sorted(m for m in sys.modules if m.startswith('offload')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=True)
    assert done.stdout.strip() == "['offload', 'offload.testing']"
