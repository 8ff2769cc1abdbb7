"""``OffloadError``: the one root of every error offload raises on purpose.

Each layer has its own kind (``LedgerError``, ``ConfigError``, ``ToolError``, ``LLMError``,
``SessionStoreError``, ``CliError``), and every one of them says who must act and how. An app
catches ``OffloadError`` to tell such a fixable, explained failure from a bug. This module
sits below every layer (it imports nothing), so any of them may derive from it.
"""


class OffloadError(Exception):
    """A failure whose message names the problem and the fix."""
