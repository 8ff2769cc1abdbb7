from tests.mcp_server.conftest import model  # noqa: F401  the gated loopback model, shared with tests/mcp_server
