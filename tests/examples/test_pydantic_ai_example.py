"""examples/pydantic_ai_agent.py: a pydantic-ai agent (offline, ``FunctionModel``) whose tool
delegates through offload and which receives each result later as a new turn. It runs as its
docstring says (a subprocess, exit 0), and run on a home of ours every result lands in the
agent's conversation and is acknowledged in the ledger only after that turn."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai", reason="the example needs pydantic-ai-slim (in the test extra)")

from offload import Offload  # noqa: E402
from offload.testing import DEMO_MODEL, ScriptedModelServer, demo_model_script  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pydantic_ai_agent.py"


def load_example():
    spec = importlib.util.spec_from_file_location("pydantic_ai_agent_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_example_runs_as_written():
    done = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=180,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Both comparisons are running in the background")
    assert sorted(lines[1:]) == [f"The {topic} comparison is in: noted for the config decision."
                                 for topic in ("TOML", "YAML")]


def test_each_result_is_a_new_turn_of_the_agent_and_acknowledged_after_it(tmp_path):
    example = load_example()
    with ScriptedModelServer(demo_model_script) as model, \
            Offload(home=tmp_path / "home", model=DEMO_MODEL, base_url=model.url) as off:
        answers = example.main(off, session="s-example")
        assert len(answers) == 3 and all("comparison is in" in a for a in answers[1:])
        listed = off.list("s-example")
        assert len(listed) == 2 and {i["delivery_state"] for i in listed} == {"delivered"}
        assert sorted(c["goal"] for doc in listed for c in doc["children"]) == sorted(example.GOALS)
