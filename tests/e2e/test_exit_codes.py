"""``offload run`` tells scripts what happened: the README's exit codes, errors on stderr.

Each case runs the real CLI as a subprocess and checks the exit code, the stream the message
went to, and the message itself.
"""
from __future__ import annotations

import signal
import socket
import subprocess
import sys

import pytest

from offload.testing.model_server import Reply, hang_reply, text_reply
from tests.e2e.conftest import cli_env, offload

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]



def closed_port_url() -> str:
    """A loopback URL nothing listens on (a port the OS just handed out and took back)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_an_unreachable_endpoint_exits_3_with_the_error_on_stderr():
    done = offload("run", "hello", OFFLOAD_BASE_URL=closed_port_url(), OFFLOAD_MODEL="any")
    assert done.returncode == 3, done
    assert "agent error: could not reach http://127.0.0.1:" in done.stderr
    assert "could not reach" not in done.stdout  # stdout carries answers only
    assert "Traceback" not in done.stderr
    assert "reported no usage" not in done.stderr  # nothing answered: no server kept its usage quiet


def test_a_model_the_endpoint_does_not_know_exits_4(model_server):
    server = model_server(text_reply("unused"), model_ids=("demo-model",))
    done = offload("run", "hello", OFFLOAD_BASE_URL=server.url, OFFLOAD_MODEL="no-such-model")
    assert done.returncode == 4, done
    assert "model 'no-such-model' does not exist" in done.stderr
    assert "does not exist" not in done.stdout


def test_ctrl_c_during_the_turn_exits_130(model_server, write_config):
    server = model_server(hang_reply("thinking…"))
    write_config(server)
    # SIGINT back to its default: a test run started in the background (`cmd &`) inherits it ignored.
    proc = subprocess.Popen([sys.executable, "-m", "offload", "run", "hello"], env=cli_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert server.wait_for_requests(1, timeout_s=60), "the turn never reached the model"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, (out, err)
    assert "(turn interrupted)" in err
    assert "Traceback" not in err


def test_a_success_exits_0_with_the_answer_alone_on_stdout(model_server, write_config):
    write_config(model_server(text_reply("Hi there.")))
    done = offload("run", "hello")
    assert done.returncode == 0, done
    assert done.stdout == "Hi there.\n"
    assert "you> hello" in done.stderr and "done; continue with" in done.stderr


def test_a_bad_base_url_in_the_environment_is_blamed_on_the_variable():
    done = offload("run", "hello", OFFLOAD_BASE_URL="not-a-url")
    assert done.returncode == 2, done
    [line] = done.stderr.strip().splitlines()
    assert "$OFFLOAD_BASE_URL" in line and "Fix or unset $OFFLOAD_BASE_URL" in line
    assert "Fix the file" not in line


def test_run_with_the_demo_model_needs_no_key_and_says_it_is_not_a_real_model():
    done = offload("run", "--demo-model", "Compare YAML and TOML")
    assert done.returncode == 0, done
    err = done.stderr
    assert "demo model: a scripted server on http://127.0.0.1:" in err and "NOT a real model" in err
    assert "delegated 3 task(s) in the background" in err
    assert "landed: Subagent Task" in err
    assert done.stdout.strip()  # the answers


def test_chat_with_the_demo_model_answers_and_leaves_cleanly():
    proc = subprocess.run([sys.executable, "-m", "offload", "chat", "--demo-model"], input="hello\n/quit\n",
                          capture_output=True, text=True, env=cli_env(), timeout=80)
    assert proc.returncode == 0, proc
    assert "NOT a real model" in proc.stdout and "model demo-model at http://127.0.0.1:" in proc.stdout
    assert "landed: Subagent Task" in proc.stdout


# -- unfinished work is not success (issue 28) -----------------------------------------------

def test_an_answer_cut_off_at_the_output_limit_exits_5_and_says_so(model_server, write_config):
    write_config(model_server(text_reply("Cats are small, furry", finish_reason="length")))
    done = offload("run", "Write a paragraph about cats.")
    assert done.returncode == 5, done
    assert done.stdout == "Cats are small, furry\n"  # the answer alone on stdout
    assert "the answer above is incomplete" in done.stderr and "finish_reason=length" in done.stderr


@pytest.mark.parametrize("child_reply, code", [
    (text_reply(""), 6),  # ran, but said nothing usable: failed, and no endpoint to blame
    (Reply(status=400, error_message="the request was malformed"), 3),  # every child: the endpoint refused
])
def test_a_background_result_in_which_every_child_failed_is_not_success(model_server, write_config, child_reply,
                                                                        code):
    from tests.e2e.conftest import scripted_parent, until

    parent = scripted_parent(child=lambda request: child_reply,
                             delegate={"tasks": [{"goal": "count the files"}, {"goal": "list the users"}]})
    write_config(model_server(parent, model_ids=None))
    done = offload("run", "fan out")
    assert done.returncode == code, done.stdout + done.stderr
    assert "landed: Subagent Tasks Failed" in done.stderr


def test_a_background_result_with_a_cut_off_child_exits_5(model_server, write_config):
    from tests.e2e.conftest import scripted_parent, until

    parent = scripted_parent(child=lambda request: text_reply("half an ans", finish_reason="length"),
                             delegate={"goal": "write a poem"})
    write_config(model_server(parent, model_ids=None))
    done = offload("run", "delegate it")
    assert done.returncode == 5, done
    assert "TRUNCATED" in done.stderr


def test_ctrl_c_during_the_turn_also_stops_the_background_work_it_started(model_server, write_config):
    """A script's one Ctrl-C ends `offload run`: landing while the turn still runs (the parent's
    model call after it delegated), it stops the subagents that turn started too, instead of
    waiting on them (a child hung on its model would hold the run for its whole time cap)."""
    from offload.testing.demo_script import request_role
    from tests.e2e.conftest import scripted_parent, until

    server = model_server(scripted_parent(child=lambda request: hang_reply("child thinking…"),
                                          delegate={"goal": "a long job"}, after_tool=hang_reply("parent thinking…")))
    write_config(server)
    proc = subprocess.Popen([sys.executable, "-m", "offload", "run", "hello"], env=cli_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        def both_in_flight() -> bool:
            roles = [request_role(r) for r in server.requests]
            return roles.count("subagent") >= 1 and roles.count("parent") >= 2
        until(both_in_flight, "the child's and the parent's second model calls both arrived")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, (out, err)
    assert "(turn interrupted)" in err and "stopping 1 background delegation(s) this run started" in err, err
