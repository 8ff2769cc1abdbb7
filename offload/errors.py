"""Errors a user can fix, shared by every layer without importing any of them: a bad config
(``ConfigError``, raised by whoever reads ``config.yaml``), a bad CLI request (``CliError``) and a bad
call of the Python API (``RequestError``)."""
from __future__ import annotations

from offload.engine.errors import OffloadError


class ConfigError(OffloadError):
    """The config file cannot be used as it is. The message says where and how to fix it."""


class CliError(OffloadError):
    """A problem the user must fix (unknown session, bad argument). The message says how."""


class RequestError(OffloadError, ValueError):
    """A call of the Python API that cannot be served as it is (an empty or placeholder goal, an
    unknown delegation id, a closed ``Offload``); nothing was started or changed. The message
    says what to pass instead."""


def install_extra(extra: str) -> str:
    """The command that installs one of offload's extras. offload is not on the package index
    (and a name anyone could register there is no install hint), so it is the editable install
    from a clone, as the README's first lines do."""
    return f"from your offload clone: pip install -e '.[{extra}]'"
