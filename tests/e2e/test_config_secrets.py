"""offload never prints the database password of a ``ledger.url`` (issue 26, item 13): ``config
set``, ``get``, ``show`` and ``show --json`` mask it, and so does an error about the value; the
file keeps it, since the ledger needs it."""
from __future__ import annotations

import pytest

from offload.home import config_path
from tests.e2e.conftest import offload

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

URL = "postgresql://offload:hunter2@db.example:5432/offload"


def test_the_password_is_masked_wherever_the_config_is_printed():
    done = offload("config", "set", "ledger.url", URL)
    assert done.returncode == 0, done
    assert "postgresql://offload:***@db.example:5432/offload" in done.stdout
    for args in (("config", "get", "ledger.url"), ("config", "show"), ("config", "show", "--json")):
        shown = offload(*args)
        assert shown.returncode == 0 and "offload:***@db.example" in shown.stdout, (args, shown)
        assert "hunter2" not in shown.stdout + shown.stderr, args
    refused = offload("config", "set", "ledger.url", "mysql://offload:hunter2@db.example/offload")
    assert refused.returncode == 2 and "hunter2" not in refused.stdout + refused.stderr, refused
    assert "hunter2" in config_path().read_text(encoding="utf-8")  # stored as given: the ledger needs it
