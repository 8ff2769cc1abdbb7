"""Every user-fixable failure is one clear line and a non-zero exit, never a traceback."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.e2e.conftest import cli_env
from offload.home import config_path

pytestmark = pytest.mark.timeout(60)


def offload(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "offload", *args], capture_output=True, text=True, env=cli_env(),
                          timeout=50, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("args,setup,needle", [
    (("config", "set", "delegation.max_concurrent_children", "0"), None, "delegation.max_concurrent_children"),
    (("config", "get", "colour"), None, "unknown config key 'colour'"),
    (("chat",), None, "export OPENAI_API_KEY"),
    (("run", "hello"), "delegation: [unclosed\n", "not valid YAML"),
    (("run", "hello"), "delegation:\n  colour: red\n", "delegation.colour: unknown key"),
    (("chat", "--resume", "sess_nope"), "base_url: http://127.0.0.1:9/v1\n", "no session 'sess_nope'"),
    (("run",), None, "give a prompt"),
    (("inbox", "--ack", "deleg_nope"), None, "not pending: deleg_nope"),
])
def test_user_errors_exit_2_with_a_clear_message(args, setup, needle):
    if setup is not None:
        config_path().write_text(setup, encoding="utf-8")
    before = config_path().read_bytes() if config_path().exists() else None
    done = offload(*args)
    assert done.returncode == 2, done
    assert needle in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert (config_path().read_bytes() if config_path().exists() else None) == before


def test_config_round_trip_through_the_command_line():
    assert offload("config", "set", "delegation.independent_completions", "true").returncode == 0
    done = offload("config", "get", "delegation.independent_completions")
    assert (done.returncode, done.stdout.strip()) == (0, "true")
    assert offload("config", "path").stdout.strip() == str(config_path())
