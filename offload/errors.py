"""Errors a user can fix, shared by the CLI modules without importing the agent runtime."""
from __future__ import annotations

from offload.engine.errors import OffloadError



class CliError(OffloadError):
    """A problem the user must fix (unknown session, bad argument). The message says how."""
