"""DNS rebinding (issue 26, item 12): ``offload dashboard`` answers only to the names it serves.

A page whose name was rebound to 127.0.0.1 sends ``Host: evil.example:PORT`` and a matching
same-origin ``Origin``; the served dashboard must refuse it — reading and buttons alike — while
127.0.0.1, localhost, [::1] and the names given with ``--allow-host`` work as before."""
from __future__ import annotations

from typing import Iterator

import httpx
import pytest

from offload.access.http import HostCheck
from tests.dashboard.conftest import Served, serve_cli_dashboard

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def served() -> Iterator[Served]:
    yield from serve_cli_dashboard()


@pytest.fixture
def url(served) -> str:
    return served.url


@pytest.fixture
def with_allowed_name() -> Iterator[Served]:
    yield from serve_cli_dashboard("--allow-host", "Dash.Internal")


def _get(served: Served, host: str, path: str = "/") -> httpx.Response:
    return served.get(path, headers={"Host": host})


def test_a_rebound_name_can_neither_read_nor_act(served, url):
    port = url.rsplit(":", 1)[1]
    evil = f"evil.example:{port}"
    for path in ("/", "/history", "/roster", "/metrics", "/d/deleg_0"):
        refused = _get(served, evil, path)
        assert refused.status_code == 403, (path, refused.status_code)
        assert "--allow-host evil.example" in refused.text
    for action in ("interrupt", "ack", "drop"):
        posted = httpx.post(f"{url}/d/deleg_0/{action}", headers={**served.headers, "Host": evil,
                                                                  "Origin": f"http://{evil}"})
        assert posted.status_code == 403, action


def test_the_served_names_still_work(served, url):
    port = url.rsplit(":", 1)[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}", "127.0.0.1"):
        assert _get(served, host).status_code == 200, host
    same_origin = httpx.post(f"{url}/d/deleg_0/drop", headers={**served.headers, "Host": f"localhost:{port}",
                                                               "Origin": f"http://localhost:{port}"})
    assert same_origin.status_code == 303  # reached the app: "no delegation" comes back on the detail page


def test_allow_host_adds_a_name(with_allowed_name):
    assert _get(with_allowed_name, "dash.internal:8765").status_code == 200
    assert _get(with_allowed_name, "other.internal").status_code == 403


def test_an_address_host_is_accepted_only_when_every_interface_is_bound():
    assert not HostCheck("127.0.0.1").accepts("10.1.2.3:8765")
    assert HostCheck("0.0.0.0").accepts("10.1.2.3:8765") and HostCheck("::").accepts("[fd00::1]:80")
    assert not HostCheck("0.0.0.0").accepts("evil.example:8765")
    assert HostCheck("192.168.1.5").accepts("192.168.1.5:8765")
    assert not HostCheck("127.0.0.1").accepts("127.0.0.1@evil.example") and not HostCheck("127.0.0.1").accepts("")
    assert HostCheck("127.0.0.1").accepts(None)  # no Host header: not a browser
