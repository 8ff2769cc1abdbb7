"""Every error offload raises on purpose derives from ``OffloadError``, so an app can tell a
fixable, explained failure from a bug with one ``except``."""
from __future__ import annotations

import pytest

from offload.agent.llm_errors import LLMError, ModelNotFoundError
from offload.agent.session_store import SessionStoreError
from offload.engine.errors import OffloadError
from offload.ledger import LedgerError
from offload.errors import CliError
from offload.subagents.config import ConfigError
from offload.toolsets.toolspec import ToolError


@pytest.mark.parametrize("error", [LedgerError, ConfigError, ToolError, LLMError, ModelNotFoundError,
                                   SessionStoreError, CliError])
def test_each_error_kind_is_an_offload_error(error):
    assert issubclass(error, OffloadError)


def test_the_root_is_not_a_catch_all():
    assert not issubclass(KeyError, OffloadError) and not issubclass(OSError, OffloadError)
