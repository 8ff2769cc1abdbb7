import pytest

from tests.mcp_server.mcp_support import GatedModel


@pytest.fixture
def model():
    """The children's loopback model; its gate is opened at teardown so no reply hangs."""
    gated = GatedModel()
    with gated.server:
        yield gated
        gated.gate.set()
