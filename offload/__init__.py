"""offload: background subagents for a parent LLM agent, with a durable ledger."""

__version__ = "0.1.0"
