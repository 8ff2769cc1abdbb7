"""fetch_url never reaches a non-public address unless the operator allowed it (issue 29 item 5).

Real sockets, but only to 127.0.0.1: names resolve through a fake resolver, refused addresses
are refused before any socket opens, and an autouse guard fails the test if any connection to
another address is even attempted. Servers on 127.0.0.1 stand for what must be allowed.
"""
from __future__ import annotations

import ipaddress
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import httpcore
import pytest

from offload.config import ConfigError, OffloadConfig, get_value, set_value
from offload.runtime import tool_settings_of
from offload.toolsets.net_guard import AddressPolicy, BlockedAddress, GuardedBackend, refused_kind
from offload.toolsets.toolspec import ToolContext, ToolError
from offload.toolsets.web_tool import fetch_url

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(autouse=True)
def only_loopback_sockets(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every address fetch_url's transport connects to; anything but 127.0.0.1 fails the test."""
    attempts: list[str] = []
    real = httpcore.SyncBackend.connect_tcp

    def connect_tcp(self: Any, host: str, port: int, **kwargs: Any) -> Any:
        attempts.append(host)
        if host != "127.0.0.1":
            raise AssertionError(f"the test tried to connect to {host}:{port}")
        return real(self, host, port, **kwargs)

    monkeypatch.setattr(httpcore.SyncBackend, "connect_tcp", connect_tcp)
    return attempts


class Server:
    """A loopback HTTP server: /page answers text, /redirect?to=URL redirects there."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []  # (path, Host header)
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                seen.append((self.path, self.headers.get("Host", "")))
                if self.path.startswith("/redirect?to="):
                    self.send_response(302)
                    self.send_header("Location", self.path.split("=", 1)[1])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = b"hello from loopback"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    yield srv
    srv.close()


class Resolver:
    """Names to scripted answers, one list per lookup in turn (the last one repeats)."""

    def __init__(self, **answers: list[list[str]]) -> None:
        self.answers = {name.replace("_", "."): list(lists) for name, lists in answers.items()}
        self.lookups: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        queue = self.answers[host]
        return queue.pop(0) if len(queue) > 1 else queue[0]


def fetch(url: str, workspace: Path, allowed: list[str] | None = None, resolver: Resolver | None = None) -> str:
    settings: dict[str, Any] = {"web_allowed_hosts": allowed or []}
    if resolver is not None:
        settings["web_resolve"] = resolver
    return fetch_url.handler({"url": url}, ToolContext(workspace=workspace, settings=settings))


# -- the address policy ----------------------------------------------------------------------
@pytest.mark.parametrize("address,kind", [
    ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"),
    ("10.0.0.5", "private"), ("172.16.3.4", "private"), ("192.168.1.1", "private"), ("fc00::1", "private"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
    ("224.0.0.251", "multicast"), ("ff02::1", "multicast"),
    ("240.0.0.1", "reserved"), ("255.255.255.255", "reserved"), ("100.64.0.1", "reserved"),
    ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("::ffff:127.0.0.1", "loopback (IPv4 127.0.0.1 inside an IPv6 address)"),
    ("::ffff:169.254.169.254", "link-local (IPv4 169.254.169.254 inside an IPv6 address)"),
    ("2002:a00:1::", "private (IPv4 10.0.0.1 inside an IPv6 address)"),
    ("64:ff9b::7f00:1", "loopback (IPv4 127.0.0.1 inside an IPv6 address)"),
    ("93.184.216.34", None), ("2606:4700::1111", None), ("::ffff:93.184.216.34", None),
])
def test_each_kind_of_address(address: str, kind: str | None) -> None:
    assert refused_kind(ipaddress.ip_address(address)) == kind


def test_one_refused_address_refuses_the_host() -> None:
    with pytest.raises(BlockedAddress, match="mixed.test resolves to 10.0.0.1, a private address"):
        AddressPolicy().check("mixed.test", ["93.184.216.34", "10.0.0.1"])
    assert AddressPolicy().check("public.test", ["93.184.216.34"]) == ["93.184.216.34"]


def test_allowed_networks_and_names() -> None:
    policy = AddressPolicy.from_entries(["10.0.0.0/8", "*.corp.example", "wiki.lan"])
    assert policy.check("x.test", ["10.9.8.7"]) == ["10.9.8.7"]
    assert policy.check("git.corp.example", ["192.168.0.2"]) == ["192.168.0.2"]
    assert policy.check("WIKI.lan.", ["127.0.0.1"]) == ["127.0.0.1"]
    with pytest.raises(BlockedAddress):
        policy.check("corp.example.evil.test", ["192.168.0.2"])  # a wildcard matches below its dot only
    with pytest.raises(BlockedAddress):
        policy.check("x.test", ["::ffff:10.9.8.7"])  # an IPv4 network does not allow IPv6 forms


def test_the_backend_connects_to_the_address_it_checked(only_loopback_sockets: list[str]) -> None:
    """No second lookup at connect: the socket goes to the checked address, not the name."""
    backend = GuardedBackend(AddressPolicy(), Resolver(public_test=[["93.184.216.34"]]))
    with pytest.raises(AssertionError, match="93.184.216.34:80"):
        backend.connect_tcp("public.test", 80)
    assert only_loopback_sockets == ["93.184.216.34"]


# -- fetch_url end to end over loopback --------------------------------------------------------
def test_loopback_is_refused_naming_the_config_key(server: Server, workspace: Path,
                                                   only_loopback_sockets: list[str]) -> None:
    for url in (f"http://127.0.0.1:{server.port}/page", f"http://[::1]:{server.port}/page",
                f"http://[::ffff:127.0.0.1]:{server.port}/page", "http://169.254.169.254/latest/meta-data/",
                "http://0.0.0.0:1/"):
        with pytest.raises(ToolError) as info:
            fetch(url, workspace)
        assert "web.allowed_hosts" in str(info.value) and "offload config set" in str(info.value)
    assert server.seen == [] and only_loopback_sockets == []


def test_a_name_resolving_to_a_private_address_is_refused(workspace: Path, only_loopback_sockets: list[str]) -> None:
    resolver = Resolver(internal_test=[["10.0.0.5"]])
    with pytest.raises(ToolError, match="internal.test resolves to 10.0.0.5, a private address"):
        fetch("https://internal.test/admin", workspace, resolver=resolver)
    assert resolver.lookups == ["internal.test"] and only_loopback_sockets == []


def test_allowed_network_is_fetched(server: Server, workspace: Path) -> None:
    out = fetch(f"http://127.0.0.1:{server.port}/page", workspace, allowed=["127.0.0.0/8"])
    assert "hello from loopback" in out and server.seen == [("/page", f"127.0.0.1:{server.port}")]


def test_allowed_name_is_fetched_at_its_resolved_address(server: Server, workspace: Path) -> None:
    resolver = Resolver(wiki_lan=[["127.0.0.1"]])
    out = fetch(f"http://wiki.lan:{server.port}/page", workspace, allowed=["wiki.lan"], resolver=resolver)
    assert "hello from loopback" in out and server.seen == [("/page", f"wiki.lan:{server.port}")]


@pytest.mark.parametrize("target,why", [
    ("http://internal.test/secrets", "internal.test resolves to 10.0.0.5, a private address"),
    ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"),
    ("http://[fe80::1]/", "fe80::1 is a link-local address"),
])
def test_a_redirect_to_a_refused_address_is_refused(server: Server, workspace: Path, target: str, why: str,
                                                    only_loopback_sockets: list[str]) -> None:
    resolver = Resolver(internal_test=[["10.0.0.5"]])
    with pytest.raises(ToolError) as info:
        fetch(f"http://127.0.0.1:{server.port}/redirect?to={target}", workspace, allowed=["127.0.0.1"],
              resolver=resolver)
    assert why in str(info.value) and "web.allowed_hosts" in str(info.value)
    assert [path for path, _ in server.seen] == [f"/redirect?to={target}"]
    assert only_loopback_sockets == ["127.0.0.1"]


def test_each_hop_is_resolved_again_so_rebinding_is_refused(server: Server, workspace: Path,
                                                             only_loopback_sockets: list[str]) -> None:
    """The name answers 127.0.0.1 (allowed) first, then a private address: the second hop of
    the same host is looked up again, checked, and refused before it connects."""
    resolver = Resolver(rebind_test=[["127.0.0.1"], ["10.0.0.7"]])
    follow = f"http://rebind.test:{server.port}/page"
    with pytest.raises(ToolError, match="rebind.test resolves to 10.0.0.7"):
        fetch(f"http://rebind.test:{server.port}/redirect?to={follow}", workspace, allowed=["127.0.0.1/32"],
              resolver=resolver)
    assert resolver.lookups == ["rebind.test", "rebind.test"]
    assert [path for path, _ in server.seen] == [f"/redirect?to={follow}"]
    assert only_loopback_sockets == ["127.0.0.1"]


def test_proxy_variables_do_not_bypass_the_check(server: Server, workspace: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.port}")
    monkeypatch.setenv("ALL_PROXY", f"http://127.0.0.1:{server.port}")
    with pytest.raises(ToolError, match="10.0.0.5"):
        fetch("http://internal.test/", workspace, allowed=["127.0.0.1"], resolver=Resolver(internal_test=[["10.0.0.5"]]))
    assert server.seen == []


# -- the config key ----------------------------------------------------------------------------
def test_the_allow_list_is_validated_and_reaches_the_tools() -> None:
    with pytest.raises(ConfigError, match="web.allowed_hosts.*neither a host name"):
        set_value("web.allowed_hosts", "[not a host!]")
    set_value("web.allowed_hosts", "[10.0.0.0/8, wiki.lan, '*.corp.example']")
    assert get_value("web.allowed_hosts") == ["10.0.0.0/8", "wiki.lan", "*.corp.example"]
    settings = tool_settings_of(OffloadConfig.model_validate({"web": {"allowed_hosts": ["wiki.lan"]}}))
    assert settings["web_allowed_hosts"] == ["wiki.lan"]


def test_a_bad_setting_is_the_operators_error(workspace: Path) -> None:
    with pytest.raises(ToolError, match="web_allowed_hosts.*operator"):
        fetch("http://internal.test/", workspace, allowed=["exa mple"])
