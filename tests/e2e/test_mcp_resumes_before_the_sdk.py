"""``offload mcp`` resumes a dead owner's child before it imports the MCP SDK (issue 44: resume
within 2 s of a long-lived process opening the home; the SDK's import alone took 1-2.5 s of a
3.3 s resume on a busy 2-core machine, ``python -m bench --cases 8``).

The server is started with an ``mcp`` package on its path whose import never ends (a stand-in
for a slow one): the killed ``offload run``'s child still makes its resumed model call, so the
recovery and the start of the resumed unit do not wait for the SDK. Without the SDK at all, the
command still says what to install before it opens anything.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from offload.testing.demo_script import request_role
from offload.testing.model_server import hang_reply, text_reply
from tests.e2e.conftest import HANDLE_RE, ROOT, cli_env, scripted_parent, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _child_requests(server) -> list[dict]:
    return [r for r in server.requests if request_role(r) == "subagent"]


def _shim(tmp_path, body: str):
    """A directory holding an ``mcp`` package whose import runs ``body``."""
    shim = tmp_path / "shim"
    (shim / "mcp").mkdir(parents=True)
    (shim / "mcp" / "__init__.py").write_text(body, encoding="utf-8")
    return shim


def test_a_dead_owners_child_resumes_while_the_sdk_is_still_importing(cli, model_server, write_config, tmp_path,
                                                                       _isolated_hermes_home, workspace):
    def child(request):
        return hang_reply("thinking") if len(_child_requests(server)) == 1 else text_reply("Resumed.")

    server = model_server(scripted_parent(child=child, delegate={"goal": "answer"}, on_result=text_reply("Ok.")))
    write_config(server, resume="auto")
    run = cli("run", "delegate it")
    run.wait_for(HANDLE_RE)
    until(lambda: _child_requests(server), "the child's first model call")
    run.kill()

    stuck = _shim(tmp_path, "import threading\nthreading.Event().wait()  # an import that never ends\n")
    env = {**cli_env(HERMES_HOME=str(_isolated_hermes_home)), "PYTHONPATH": f"{stuck}:{ROOT}"}
    taker = subprocess.Popen([sys.executable, "-m", "offload", "mcp"], env=env, cwd=workspace,
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        until(lambda: len(_child_requests(server)) >= 2 or taker.poll() is not None,
              "the resumed child's model call while the MCP SDK import hangs")
        assert taker.poll() is None, taker.stderr.read().decode()  # still importing the SDK
        assert len(_child_requests(server)) == 2
    finally:
        taker.kill()
        taker.wait(timeout=10)


def test_without_the_sdk_it_says_what_to_install_and_opens_nothing(tmp_path, _isolated_hermes_home):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['mcp'] = None  # as if not installed\n",
                                           encoding="utf-8")
    env = {**cli_env(HERMES_HOME=str(_isolated_hermes_home)), "PYTHONPATH": f"{hide}:{ROOT}"}
    done = subprocess.run([sys.executable, "-m", "offload", "mcp"], env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode != 0
    assert "offload mcp needs the MCP SDK (mcp is missing)" in done.stderr, done.stderr
    assert not (_isolated_hermes_home / "state.db").exists()
