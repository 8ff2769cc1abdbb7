"""``offload mcp``: durable background subagents for any MCP client.

``delegations`` is the MCP-free core (one namespace's view of an ``Offload``: dispatch, status,
wait for a result, list, stop); ``server`` puts it behind the official ``mcp`` SDK's
``MCPServer`` as five tools; ``offload.cli.mcp`` is the command. This package is named
``mcp_server``, not ``mcp``, so it never reads as (or shadows) the SDK.
"""
