"""The history's owner filter takes a pid or a host on both backends: on PostgreSQL the host
each row's owner stamped, on SQLite this host (every owner of a SQLite ledger runs on it), and
the page names the host beside each owner pid on both."""
from __future__ import annotations

import re

import pytest

from offload.dashboard.app import create_app
from offload.ledger.protocol import local_host
from offload.runtime import Offload
from tests.dashboard.test_history import LOOPBACK, _ids, _row
from tests.dashboard.conftest import signed_in

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=["sqlite", "postgresql"])
def client(request, tmp_path, monkeypatch):
    if request.param == "postgresql":
        from tests.postgres_support import FreshSchema

        schema = FreshSchema()
        request.addfinalizer(schema.drop)
        monkeypatch.setenv("OFFLOAD_LEDGER_URL", schema.url)
    with Offload(home=tmp_path / "home") as off, signed_in(create_app(off)) as c:
        yield off, c


def test_a_host_keeps_the_rows_its_owners_ran_and_a_pid_its_own(client):
    off, http = client
    made = [_row(off.ledger(), n, "completed" if n % 2 else "running", ago_s=100 - n) for n in range(4)]
    page = http.get("/history", params={"owner": local_host()}).text
    assert _ids(page) == list(reversed(made))
    owners = re.findall(r"<td>(\d+) on ([^ <]+) \(", page)
    assert {host for _pid, host in owners} == {local_host()} and len(owners) == 4
    assert _ids(http.get("/history", params={"owner": "4001"}).text) == [made[1]]  # owner_pid 4000 + n % 3
    assert "no delegations match" in http.get("/history", params={"owner": "another-host"}).text
    listed = http.get("/api/delegations", params={"owner": local_host()}).json()["delegations"]
    assert [d["id"] for d in listed] == list(reversed(made))
