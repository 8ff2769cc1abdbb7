"""A resumed child is seen in its trace (issue 44 point 5), by a loopback OTLP receiver: the
process that resumes a killed owner's unit (``offload run --resume``) exports the child's
``offload.subagent`` span with ``offload.resumed`` and the ``offload.resume.*`` attributes (from
which step, after which owner, how many model calls were issued twice, which calls were answered
"the host died while it ran") and a ``resumed`` event when it continued."""
from __future__ import annotations

import socket

import pytest
import yaml

from offload.testing.model_server import text_reply
from tests.dashboard.test_resumed_browser import killed_and_resumed
from tests.e2e.conftest import offload, scripted_parent

pytestmark = pytest.mark.timeout(150)


def test_the_resumed_subagent_span_says_from_which_step_and_after_which_owner(receiver, tmp_path, model_server):
    _home, did, owner = killed_and_resumed(tmp_path, model_server, **receiver.env(OTEL_SERVICE_NAME="offload-taker"))
    spans = receiver.wait_for(lambda got: any(s.name == "offload.subagent" for s in got))
    [child] = [s for s in spans if s.name == "offload.subagent" and s.service == "offload-taker"]
    attrs = child.attributes
    assert attrs["offload.resumed"] is True and attrs["offload.resume.from_step"] == 2
    assert attrs["offload.resume.after_pid"] == owner and attrs["offload.resume.after_host"] == socket.gethostname()
    assert attrs["offload.resume.model_calls_reissued"] == 0 and attrs["offload.resume.resumes"] == 1
    assert attrs["offload.resume.unknown_calls"] == ["run_command"] and attrs["offload.resume.calls_rerun"] == 0
    [event] = [a for n, a in child.events if n == "resumed"]
    assert event["offload.resume.from_step"] == 2 and event["offload.resume.after_pid"] == owner
    assert "offload.resume.model_calls_reissued" not in event  # not known yet when it continues
    units = [s for s in spans if s.name == "offload.delegation" and s.attributes.get("offload.delegation_id") == did]
    assert units and child.parent_id in {u.span_id for u in units}  # under the resumed unit's span


def test_a_subagent_that_was_not_resumed_carries_no_resume_attributes(receiver, tmp_path, model_server):
    home = tmp_path / "home"
    home.mkdir()
    server = model_server(scripted_parent(child=lambda r: text_reply("Done."), delegate={"goal": "answer"}))
    (home / "config.yaml").write_text(yaml.safe_dump({"model": "demo-model", "base_url": server.url,
                                                      "toolsets": ["delegation"], "delegation": {"resume": "auto"}}))
    done = offload("run", "go", HERMES_HOME=str(home), **receiver.env(OTEL_SERVICE_NAME="offload-plain"))
    assert done.returncode == 0, done.stderr
    receiver.wait_for(lambda got: any(s.name == "offload.subagent" for s in got))
    [child] = receiver.named("offload.subagent")
    assert not any(k.startswith("offload.resume") for k in child.attributes) and "resumed" not in child.event_names
