"""Small truths of the CLI (issue 41, point 7): each case runs the real ``offload`` command."""
from __future__ import annotations

import pytest

from offload import __version__
from tests.e2e.conftest import offload, one_line

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
    write_config(server)
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
