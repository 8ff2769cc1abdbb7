"""Every test gets its own HERMES_HOME, so no test reads or writes ~/.hermes; ``model_server``
starts loopback scripted model servers and stops them at teardown."""
from typing import Any, Callable, Iterator

import pytest


@pytest.fixture(autouse=True)
def _isolated_hermes_home(tmp_path, monkeypatch):
    home = tmp_path / "hermes-home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OFFLOAD_API_KEY", "OFFLOAD_BASE_URL", "OFFLOAD_MODEL"):
        monkeypatch.delenv(key, raising=False)
    yield home


@pytest.fixture
def model_server() -> Iterator[Callable[..., Any]]:
    """``model_server(script_or_reply, **kwargs)`` -> a started ``ScriptedModelServer``."""
    from offload.model_server import Reply, ScriptedModelServer

    servers: list[ScriptedModelServer] = []

    def start(script: Callable[[dict], Reply] | Reply, **kwargs: Any) -> ScriptedModelServer:
        fn = (lambda request: script) if isinstance(script, Reply) else script
        server = ScriptedModelServer(fn, **kwargs).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
