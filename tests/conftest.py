"""Every test gets its own HERMES_HOME, so no test reads or writes ~/.hermes; ``runtime`` is an
``offload.Offload`` on it; ``model_server`` starts loopback scripted model servers and stops
them at teardown.

``OFFLOAD_TEST_LEDGER=postgresql`` runs the tests with the ledger in PostgreSQL instead
(``OFFLOAD_LEDGER_URL`` on a fresh schema of ``.ci/postgres-up``'s server per test), so the
engine, restore and chaos suites prove the same promises on both backends.
"""
import os
import signal
from typing import Any, Callable, Iterator

import pytest


def pytest_configure(config):
    """The default dispositions of SIGINT and SIGHUP, whatever launched the suite: a run started
    in the background (``cmd &`` ignores SIGINT) or under ``nohup`` (SIGHUP) would hand its
    ignoring to every ``offload`` process the tests start, and the tests of what Ctrl-C, a
    closed terminal or the driver's own handler do would then test the launcher instead."""
    for signum, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGHUP, signal.SIG_DFL)):
        if signal.getsignal(signum) is signal.SIG_IGN:
            signal.signal(signum, default)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("OFFLOAD_TEST_LEDGER", "") != "postgresql":
        return
    skip = pytest.mark.skip(reason="about the SQLite file itself; this run uses OFFLOAD_TEST_LEDGER=postgresql")
    for item in items:
        if "sqlite_only" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_hermes_home(tmp_path, monkeypatch):
    home = tmp_path / "hermes-home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OFFLOAD_API_KEY", "OFFLOAD_BASE_URL", "OFFLOAD_MODEL",
                "OFFLOAD_LEDGER_URL", "OFFLOAD_HOST_ID"):
        monkeypatch.delenv(key, raising=False)
    if os.environ.get("OFFLOAD_TEST_LEDGER", "") != "postgresql":
        yield home
        return
    from tests.postgres_support import FreshSchema

    schema = FreshSchema()
    monkeypatch.setenv("OFFLOAD_LEDGER_URL", schema.url)
    yield home
    from tools import async_delegation_delivery

    from tests.postgres_support import drop_per_home_schemas

    async_delegation_delivery.reset_for_tests()  # close pools before the schemas go
    schema.drop()
    drop_per_home_schemas()


@pytest.fixture
def runtime(_isolated_hermes_home):
    """An ``offload.Offload`` on this test's home (and ledger), closed at teardown."""
    from offload.runtime import Offload

    with Offload(home=_isolated_hermes_home) as off:
        yield off


@pytest.fixture
def model_server() -> Iterator[Callable[..., Any]]:
    """``model_server(script_or_reply, **kwargs)`` -> a started ``ScriptedModelServer``."""
    from offload.testing.model_server import Reply, ScriptedModelServer

    servers: list[ScriptedModelServer] = []

    def start(script: Callable[[dict], Reply] | Reply, **kwargs: Any) -> ScriptedModelServer:
        fn = (lambda request: script) if isinstance(script, Reply) else script
        server = ScriptedModelServer(fn, **kwargs).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
