"""Small truths of the CLI (issue 41, point 7): each case runs the real ``offload`` command."""
from __future__ import annotations

import subprocess
import sys

import pytest

from offload import __version__
from tests.e2e.conftest import cli_env, offload, one_line

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_version_is_a_command_and_h_is_help():
    assert offload("version").stdout.strip() == f"offload {__version__}" == offload("--version").stdout.strip()
    short, long = offload("-h"), offload("--help")
    assert short.returncode == 0 and short.stdout == long.stdout and "Usage: offload" in short.stdout
    assert "Usage: offload config" in offload("config", "-h").stdout


def test_config_unset_of_the_last_key_leaves_no_empty_section(_isolated_hermes_home):
    assert offload("config", "set", "delegation.max_queued", "30").returncode == 0
    assert offload("config", "set", "model", "some-model").returncode == 0
    assert offload("config", "unset", "delegation.max_queued").returncode == 0
    assert (_isolated_hermes_home / "config.yaml").read_text(encoding="utf-8") == "model: some-model\n"
    assert offload("config", "unset", "model").returncode == 0
    assert (_isolated_hermes_home / "config.yaml").read_text(encoding="utf-8") == ""  # not "{}"


@pytest.mark.parametrize("command", [("inbox",), ("agents",), ("sessions",)])
def test_a_mistyped_hermes_home_is_no_such_directory_not_an_empty_listing(tmp_path, command):
    missing = tmp_path / "no-such-home"
    done = offload(*command, HERMES_HOME=str(missing))
    assert done.returncode == 2, done
    assert one_line(done.stderr) == (f"offload: HERMES_HOME={missing} is no such directory; check the path, "
                                     "or unset HERMES_HOME to use ~/.hermes")


def test_the_gateways_help_does_not_say_it_needs_allowed_chat_ids():
    text = " ".join(offload("gateway", "--help").stdout.split())
    assert "Needs gateway.telegram.allowed_chat_ids" not in text
    assert "it serves no chat: write to the bot and it answers with your chat's id" in text


def test_inbox_after_a_crash_says_the_recovery_once(cli, model_server, write_config, _isolated_hermes_home):
    from offload.testing.model_server import hang_reply, text_reply
    from tests.e2e.conftest import HANDLE_RE, scripted_parent

    server = model_server(scripted_parent(child=lambda r: hang_reply("working; "), delegate={"goal": "slow work"},
                                          after_tool=text_reply("Started it in the background.")))
    write_config(server, resume="never")  # about inbox's recovery line: a resumable unit is left to resume
    run = cli("run", "go")
    did = run.wait_for(HANDLE_RE).group(1)
    run.wait_for(r"agent> Started it")
    run.kill()  # SIGKILL while the child is still running: its row stays `running` with a dead owner
    done = offload("inbox", HERMES_HOME=str(_isolated_hermes_home))
    assert done.returncode == 0, done
    said = [line for line in (done.stdout + done.stderr).splitlines() if "recovered" in line.lower()]
    assert len(said) == 1, done.stdout + done.stderr
    assert "recovered 1 delegation(s) whose owner process had exited" in said[0]
    assert did[:12] in done.stdout


def test_a_base_url_without_v1_is_warned_at_config_time_and_named_at_the_404(
        model_server, write_config, _isolated_hermes_home, workspace):
    from offload.testing.model_server import text_reply

    server = model_server(lambda request: text_reply("hello"))
    root = server.url.removesuffix("/v1")
    assert root != server.url
    warned = offload("config", "set", "base_url", root, HERMES_HOME=str(_isolated_hermes_home))
    assert warned.returncode == 0, warned
    assert one_line(warned.stderr) == (
        f"offload: warning: base_url {root} has no version segment such as /v1 in its path, where "
        f"OpenAI-compatible servers serve their API: offload config set base_url {root}/v1 "
        "(ignore this if yours serves it there)")
    for fine in (server.url, "https://openrouter.ai/api/v1", "https://api.groq.com/openai/v1",
                 "https://generativelanguage.googleapis.com/v1beta/openai"):
        done = offload("config", "set", "base_url", fine, HERMES_HOME=str(_isolated_hermes_home))
        assert done.returncode == 0 and done.stderr == "", done

    write_config(server)
    offload("config", "set", "base_url", root, HERMES_HOME=str(_isolated_hermes_home))
    run = subprocess.run([sys.executable, "-m", "offload", "run", "hi"], capture_output=True, text=True,
                         cwd=workspace, env=cli_env(HERMES_HOME=str(_isolated_hermes_home)),
                         stdin=subprocess.DEVNULL, timeout=60)
    assert run.returncode != 0
    said = run.stdout + run.stderr
    assert f"HTTP 404 from {root}: no API there" in said and f"offload config set base_url {root}/v1" in said, said
    assert "does not exist" not in said  # not blamed on the model
