"""``offload run`` in a script (issue 26, item 9): the agent's answers alone on stdout, everything
else on stderr; the prompt from stdin (``-``, or a piped stdin); no "done" after a failed turn;
and a reader that closes the pipe early (``| head -1``) is no error."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from offload.testing.demo_script import DEMO_PROMPT
from tests.e2e.conftest import cli_env, offload, one_line
from tests.e2e.test_exit_codes import closed_port_url

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _run(*args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "offload", "run", *args], input=stdin, capture_output=True,
                          text=True, env=cli_env(**env), timeout=100,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


def test_stdout_holds_the_answers_and_nothing_else():
    done = _run("--demo-model", DEMO_PROMPT)
    assert done.returncode == 0, done
    answers = done.stdout.splitlines()
    assert len(answers) >= 2, done.stdout  # the first answer, and the answer to each landed result
    for line in answers:
        assert line and not line.startswith(("agent>", "you>", "↳", "⇠", "  ", "waiting", "done", "demo model",
                                             "offload run", "tokens used")), line
    err = done.stderr
    for needle in ("demo model: a scripted server", f"you> {DEMO_PROMPT}", "delegated 3 task(s)", "waiting for",
                   "landed: Subagent Task", "tokens used by this run", "done; continue with: offload chat --resume"):
        assert needle in err, needle
    assert not any(answer in err for answer in answers)


def test_a_failed_turn_says_how_it_ended_not_done():
    done = _run("hello", OFFLOAD_BASE_URL=closed_port_url(), OFFLOAD_MODEL="any")
    assert done.returncode == 3, done
    assert "done;" not in done.stderr + done.stdout
    assert "the model endpoint failed (exit 3); the session is kept: offload chat --resume sess_" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("args", [("--demo-model",), ("--demo-model", "-")])
def test_the_prompt_can_come_from_stdin(args):
    done = _run(*args, stdin="Compare YAML and TOML, please.\n")
    assert done.returncode == 0, done
    assert "you> Compare YAML and TOML, please." in done.stderr
    assert "delegated 3 task(s)" in done.stderr and done.stdout.strip()


def test_an_empty_stdin_is_refused_with_the_fix():
    dash = _run("-", stdin="")
    assert dash.returncode == 2 and "stdin was empty" in one_line(dash.stderr)
    bare = _run(stdin="")
    assert bare.returncode == 2 and "pipe it in" in one_line(bare.stderr)


def test_a_reader_that_leaves_early_is_no_error_and_loses_nothing():
    proc = subprocess.Popen([sys.executable, "-m", "offload", "run", "--demo-model", DEMO_PROMPT], env=cli_env(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()  # `| head -1`
        assert first.strip(), "no answer on stdout"
        proc.stdout.close()
        err = proc.stderr.read()
        assert proc.wait(timeout=100) == 0, err
    finally:
        proc.kill()
    assert "Traceback" not in err and "Broken pipe" not in err and "Exception ignored" not in err, err
    assert "done; continue with" in err  # it went on: every result was delivered and stored
    inbox = offload("inbox", "--json")
    assert inbox.returncode == 0 and '"pending": []' in inbox.stdout, inbox


@pytest.mark.parametrize("args", [("agents",), ("agents", "--json"), ("inbox", "--all"), ("sessions",),
                                  ("config", "show"), ("--help",)])
def test_every_command_survives_a_reader_that_is_already_gone(args):
    proc = subprocess.Popen([sys.executable, "-m", "offload", *args], env=cli_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # `offload … | true`: nobody reads
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err  # its own exit code, not click's 1 for a broken pipe
    assert err == ""


def test_run_json_with_a_bad_config_still_prints_a_document_saying_why(_isolated_hermes_home):
    (_isolated_hermes_home / "config.yaml").write_text("model: [broken\n", encoding="utf-8")
    done = offload("run", "--json", "hello")
    assert done.returncode == 2
    document = json.loads(done.stdout)
    assert (document["schema"], document["session"], document["answers"], document["delegations"],
            document["exit_code"]) == ("offload.run/1", None, [], [], 2)
    assert "config.yaml is not valid YAML" in document["error"]
    assert one_line(done.stderr) == f"offload: {document['error']}"


def _prompt_server(model_server, write_config):
    from offload.testing.model_server import text_reply

    server = model_server(text_reply("Reviewed."))
    write_config(server)
    return server


def _user_text(server) -> str:
    from offload.testing.model_server import last_message_text

    return last_message_text(server.requests[0])


def test_piped_content_and_a_prompt_reach_the_model_together(model_server, write_config, _isolated_hermes_home):
    server = _prompt_server(model_server, write_config)
    done = subprocess.run([sys.executable, "-m", "offload", "run", "review this"], input="def f(): return 1\n",
                          capture_output=True, text=True, env=cli_env(HERMES_HOME=str(_isolated_hermes_home)),
                          timeout=100)
    assert done.returncode == 0, done
    assert _user_text(server) == "def f(): return 1\n\nreview this"  # the content first, as llm does
    assert done.stdout.strip() == "Reviewed."


def test_a_pipe_held_open_and_silent_is_not_waited_for(model_server, write_config, _isolated_hermes_home):
    """Under cron, CI or a parent that never closes the pipe, `offload run "..."` does not hang."""
    server = _prompt_server(model_server, write_config)
    proc = subprocess.Popen([sys.executable, "-m", "offload", "run", "just this"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env(HERMES_HOME=str(_isolated_hermes_home)))
    try:
        code = proc.wait(timeout=60)  # stdin stays open the whole time: never written, never closed
        out, err = proc.stdout.read(), proc.stderr.read()
    finally:
        proc.kill()
        proc.stdin.close()
    assert code == 0, err
    assert _user_text(server) == "just this" and out.strip() == "Reviewed."
