"""Read models of the ledger for the CLI, the dashboard and the MCP server: the rows as
plain data, the ledger as listed, the result document. They read; they never write.
"""
