"""The gateway on Matrix: ``MatrixPlatform`` over mautrix's asyncio client API (see docs/gateway.md)."""
