"""Agent runtime: the tool-calling loop over Chat Completions, the LLM client, the toolset
registry and the session store."""
