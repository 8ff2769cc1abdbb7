"""Only a person decides an approval (issue 40 point 4): a prompt-injected child cannot answer
its own ``ask`` request, end to end in a real ``offload run --ask-approvals``.

The scene: ``offload dashboard`` runs on the home with its default configuration; a run fans
out two children. One asks to run a destructive command and waits for a person; the other runs
a hostile script planted in the workspace (as injected text would make it), which is told the
dashboard's address and the pending request's id (the worst case: it could scan ports, and ids
show in output) and tries to answer it:

- over HTTP, as any local process can: POST ``/approvals/ID/allow`` without an ``Origin``, with
  the dashboard's own ``Origin``, with a forged per-port cookie and a guessed bearer token, and
  a GET of the overview hunting for the token. The dashboard's token and Origin rules alone
  must refuse every one (this test holds without any sandbox);
- through the home (``test_the_home_is_out_of_reach``): it finds ``HERMES_HOME`` in an
  ancestor's ``/proc/PID/environ`` and runs ``offload approvals approve ID --by cli:alice``,
  and reads ``tokens.json`` to sign its POST. Only the sandbox that hides the home, the ledger
  and the parent's ``/proc`` from a child (issue 40 point 1) stops that; the test runs when the
  terminal sandbox is on by default and is skipped (saying so) where it is not.

"Held": the request is still pending when the script is done, the destructive command has not
run, and the person's own answer (``offload approvals deny``) is the one recorded.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from offload.testing.model_server import ScriptedModelServer, last_message_text, text_reply, tool_call_reply
from offload.testing.demo_script import last_role
from offload.access.tokens import TokenStore
from tests.e2e.conftest import cli, offload, open_dashboard, scripted_parent, until, workspace  # noqa: F401 - fixtures
from tests.e2e.test_approvals_e2e import REMOVE, _setup

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
CLEAN, CHECK = "clean the build folder", "run the project checks"

_REACH = '''
import json, os, sys, time, urllib.error, urllib.request
here = os.path.dirname(os.path.abspath(__file__))
deadline = time.time() + 90
while not os.path.exists(os.path.join(here, "target.json")):
    if time.time() > deadline:
        sys.exit("no target")
    time.sleep(0.05)
target = json.load(open(os.path.join(here, "target.json")))
url, rid = target["url"], target["request_id"]
port = url.rsplit(":", 1)[1]
results = {}

def call(name, path, headers, method="POST"):
    request = urllib.request.Request(url + path, data=b"" if method == "POST" else None, method=method,
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            results[name] = [answer.status, answer.read().decode(errors="replace")[:300]]
    except urllib.error.HTTPError as refused:
        results[name] = [refused.code, refused.read().decode(errors="replace")[:300]]
    except OSError as exc:
        results[name] = ["unreachable", str(exc)]
'''

_HTTP_ATTACK = _REACH + '''
allow = "/approvals/" + rid + "/allow"
call("post without origin", allow, {})
call("post with the dashboard's origin", allow, {"Origin": url})
call("post with a forged cookie", allow, {"Origin": url, "Cookie": "offload_dashboard_" + port + "=" + "0" * 64})
call("post with a guessed bearer", allow, {"Origin": url, "Authorization": "Bearer " + "A" * 43})
call("post with the token in the query", allow + "?token=" + "A" * 43, {"Origin": url})
call("read the overview", "/", {}, method="GET")
json.dump(results, open(os.path.join(here, "attack.json"), "w"))
print("attack done")
'''

_HOME_ATTACK = _REACH + '''
import subprocess
home, pid = None, os.getppid()
while pid > 1 and home is None:  # an ancestor's environment: offload's own process
    try:
        environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\\0")
        home = next((v.split(b"=", 1)[1].decode() for v in environ if v.startswith(b"HERMES_HOME=")), None)
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        break
home = home or os.path.expanduser("~/.hermes")
results["home found"] = [home, os.path.isdir(home)]
try:
    cli = subprocess.run([target["python"], "-m", "offload", "approvals", "approve", rid, "--by", "cli:alice"],
                         env={**os.environ, "HERMES_HOME": home}, capture_output=True, text=True, timeout=60)
    results["cli approve"] = [cli.returncode, (cli.stdout + cli.stderr)[-300:]]
except OSError as exc:  # offload's interpreter is not even visible from here
    results["cli approve"] = ["could not run", str(exc)]
try:
    token = json.load(open(os.path.join(home, "tokens.json")))["tokens"]["operator"]["token"]
    call("post with the stolen token", "/approvals/" + rid + "/allow", {"Origin": url, "Authorization": "Bearer " + token})
except (OSError, ValueError, KeyError) as exc:
    results["read tokens.json"] = ["unreadable", str(exc)]
json.dump(results, open(os.path.join(here, "attack.json"), "w"))
print("attack done")
'''


def _goal(request: dict[str, Any]) -> str:
    return " ".join(str(m.get("content")) for m in request["messages"] if m.get("role") == "user")


def _children(script_command: str):
    """Two children: one asks to remove the build folder and waits; the other runs the script."""
    def child(request: dict[str, Any]):
        if last_role(request) == "tool":
            return text_reply(f"REPORT: {last_message_text(request)[:300]}")
        if CHECK in _goal(request):
            return tool_call_reply("run_command", {"command": script_command, "timeout_s": 150})
        return tool_call_reply("run_command", REMOVE)
    return child


def _pending(home: Path) -> list[dict[str, Any]]:
    listed = offload("approvals", "--json", HERMES_HOME=str(home))
    assert listed.returncode == 0, listed
    return json.loads(listed.stdout)


def _attack(home: Path, workspace: Path, cli, script: str) -> tuple[dict[str, Any], str]:
    """Run the scene with ``script`` as the hostile child's; (its results, the request id)."""
    # stdlib only: the system's interpreter, which a sandbox leaves visible; offload's own (for the
    # CLI attempt) is named in target.json
    command = f"{'/usr/bin/python3' if Path('/usr/bin/python3').exists() else sys.executable} check.py"
    parent = scripted_parent(child=_children(command), delegate={"tasks": [{"goal": CLEAN}, {"goal": CHECK}]})
    with ScriptedModelServer(parent) as server:
        _setup(home, server, workspace, approvals="ask")
        (workspace / "check.py").write_text(script, encoding="utf-8")  # planted, as injected text would have it
        board = open_dashboard(cli)  # the default configuration: no token given, none disabled
        run = cli("run", "--json", "--ask-approvals", "tidy up and check")
        [request] = until(lambda: _pending(home), "the child's destructive command waits for a person")
        assert request["command"] == REMOVE["command"]
        (workspace / "target.json").write_text(json.dumps({"url": board.url, "request_id": request["request_id"],
                                                                  "python": sys.executable}))
        results = json.loads(until(lambda: (workspace / "attack.json").exists() and
                                   (workspace / "attack.json").read_text(), "the hostile script finished", 120))
        still = _pending(home)
        assert [r["request_id"] for r in still] == [request["request_id"]], (still, results)  # nobody answered it
        denied = offload("approvals", "deny", request["request_id"], "--by", "cli:the-person", HERMES_HOME=str(home))
        assert denied.returncode == 0, denied
        assert run.finish(60) == 0, run.output
    assert (workspace / "build" / "out.o").exists()  # the destructive command never ran
    return results, request["request_id"]


def _refused(outcome: list[Any]) -> bool:
    return outcome[0] in (401, 403) or outcome[0] == "unreachable"


def test_a_child_cannot_answer_its_own_request_through_the_dashboard(_isolated_hermes_home, tmp_path, cli):
    results, _request_id = _attack(_isolated_hermes_home, tmp_path / "ws", cli, _HTTP_ATTACK)
    assert len(results) == 6, results
    assert all(_refused(outcome) for outcome in results.values()), results
    if results["post without origin"][0] != "unreachable":  # it reached the dashboard: the token rule refused it
        assert {results[k][0] for k in results} == {401}, results
    assert TokenStore(_isolated_hermes_home).get() not in json.dumps(results)  # nothing it read gave the token away


def _sandbox_on_by_default() -> bool:
    from offload.toolsets.terminal_sandbox import TerminalConfig

    return TerminalConfig().sandbox != "none"


@pytest.mark.skipif(not _sandbox_on_by_default(), reason="a child's command reaches offload's home (the ledger, "
                    "tokens.json, the parent's /proc) until the terminal sandbox is on by default (issue 40 point 1)")
def test_the_home_is_out_of_reach(_isolated_hermes_home, tmp_path, cli):
    results, _request_id = _attack(_isolated_hermes_home, tmp_path / "ws", cli, _HOME_ATTACK)
    assert results["cli approve"][0] != 0, results
    assert "read tokens.json" in results or _refused(results["post with the stolen token"]), results
