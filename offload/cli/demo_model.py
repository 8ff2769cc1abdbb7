"""``offload chat --demo-model`` / ``offload run --demo-model``: try the CLI without an API key.

Starts the project's scripted loopback model server (``offload/model_server.py`` with the demo's
script, ``offload/demo_script.py``) for the life of this process and points this session at it.
It is NOT a model: every answer is canned, and any prompt starts the demo's fan-out of three
subagents (one runs ``python3 --version && ls`` in the workspace). The session is stored in
the real ``$HERMES_HOME``, so ``--resume`` works later (with ``--demo-model`` again); the
config file is never changed.
"""
from __future__ import annotations

import atexit

from offload.cli.views import Ui

LABEL = ("demo model: a scripted server on {url}, NOT a real model — every answer is canned and any prompt "
         "starts the demo's three subagents. Point offload at a real model to use it for work (docs/configuration.md).")


def start_demo_endpoint(ui: Ui) -> dict[str, str]:
    """Start the scripted server (stopped at exit), label it, return the endpoint override."""
    from offload.config import load_file_config
    from offload.testing.demo_script import DEMO_MODEL, demo_script
    from offload.testing.model_server import ScriptedModelServer

    server = ScriptedModelServer(demo_script, (DEMO_MODEL,)).start()
    atexit.register(server.stop)
    ui.say(LABEL.format(url=server.url), style="bold yellow")
    delegation = load_file_config().delegation
    if delegation.model or delegation.base_url:
        ui.warn("note: delegation.model / delegation.base_url in config.yaml still apply, so subagents will not "
                "use the demo model; unset them (offload config set delegation.base_url null) to try the demo")
    return {"model": DEMO_MODEL, "base_url": server.url}
