"""Errors a user can fix, shared by every layer without importing any of them: a bad config
(``ConfigError``, raised by whoever reads ``config.yaml``) and a bad CLI request (``CliError``)."""
from __future__ import annotations

from offload.engine.errors import OffloadError


class ConfigError(OffloadError):
    """The config file cannot be used as it is. The message says where and how to fix it."""


class CliError(OffloadError):
    """A problem the user must fix (unknown session, bad argument). The message says how."""
