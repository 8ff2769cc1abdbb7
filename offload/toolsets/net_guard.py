"""Which network addresses ``fetch_url`` may connect to, enforced where the socket is opened.

Owns the address policy (``AddressPolicy``: refuse loopback, private, link-local, multicast,
reserved and unspecified addresses, IPv4 and IPv6, also an IPv4 address carried inside an IPv6
one; let through what the operator lists in ``web.allowed_hosts``, see ``web_config``) and
the httpx transport that applies it (``GuardedTransport``).

Invariants:

* The check runs on the RESOLVED addresses, inside the connection itself: the transport's
  network backend resolves the host, checks every address, and opens the socket to an address
  it checked, so a DNS answer that changes between a check and the connect (rebinding) cannot
  swap it. If any address of a host is refused, the host is refused.
* The transport keeps no connection alive, so each request (each redirect hop of fetch_url)
  resolves and is checked anew; it ignores proxy variables, which would hide the real target.
* A refusal is a ``ToolError`` naming the host, the address, why, and the config key
  (``web.allowed_hosts``) an operator uses to allow it.
"""
from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import httpcore
import httpx

from offload.toolsets.toolspec import ToolError
from offload.toolsets.web_config import ALLOW_KEY, Network, parse_allow_entry

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]  # (host, port) -> addresses, as getaddrinfo gives them
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# Checked in this order, because the categories overlap (127.0.0.1 is also "private" to Python).
_KINDS: tuple[tuple[str, str], ...] = (
    ("unspecified", "is_unspecified"), ("loopback", "is_loopback"), ("link-local", "is_link_local"),
    ("multicast", "is_multicast"), ("reserved", "is_reserved"), ("private", "is_private"),
)


class BlockedAddress(ToolError):
    """fetch_url was about to reach an address agents may not reach."""


def _embedded_ipv4(ip: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, Teredo client, NAT64), if any."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF)
    return None


def refused_kind(ip: Address) -> str | None:
    """Why ``ip`` is refused ("loopback", "private", ...), or None for a public address."""
    inner = _embedded_ipv4(ip)
    if inner is not None:  # the IPv4 address is what the packets reach
        kind = refused_kind(inner)
        return None if kind is None else f"{kind} (IPv4 {inner} inside an IPv6 address)"
    for kind, test in _KINDS:
        if getattr(ip, test):
            return kind
    return None if ip.is_global else "reserved"  # shared (100.64/10), documentation ranges


@dataclass(frozen=True)
class AddressPolicy:
    """Refuse non-public addresses except the hosts and networks the operator allowed."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[Network, ...] = ()

    @classmethod
    def from_entries(cls, entries: Iterable[str]) -> AddressPolicy:
        parsed = [parse_allow_entry(e) for e in entries]
        return cls(frozenset(p for p in parsed if isinstance(p, str)),
                   tuple(p for p in parsed if not isinstance(p, str)))

    def host_allowed(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return host in self.hosts or any(h.startswith("*.") and host.endswith(h[1:]) for h in self.hosts)

    def check(self, host: str, addresses: Iterable[str]) -> list[str]:
        """``addresses`` (of ``host``) if every one may be reached; BlockedAddress otherwise."""
        checked = list(dict.fromkeys(addresses))
        if self.host_allowed(host):
            return checked
        for text in checked:
            ip = ipaddress.ip_address(text.split("%", 1)[0])  # an IPv6 scope (%eth0) is no part of the address
            kind = refused_kind(ip)
            if kind is not None and not any(ip in net for net in self.networks if net.version == ip.version):
                raise BlockedAddress(_refusal(host, text, kind))
        return checked


def _refusal(host: str, address: str, kind: str) -> str:
    what = f"{host} resolves to {address}, a" if host != address else f"{address} is a"
    return (f"fetch_url: refused: {what} {kind} address. Agents may not reach loopback, private, link-local, "
            "multicast, reserved or unspecified addresses (local services, other hosts of this network, cloud "
            f"metadata), at any redirect hop. Only the operator can allow it, by adding the host or its network to "
            f"the config key {ALLOW_KEY} (offload config set {ALLOW_KEY} '[{host}]'); do not retry this address.")


def system_resolve(host: str, port: int) -> list[str]:
    """The addresses the system resolver gives for ``host``, in its order."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise httpcore.ConnectError(f"cannot resolve the host name {host!r}: {exc}") from exc
    return [str(info[4][0]) for info in infos]


class GuardedBackend(httpcore.NetworkBackend):
    """httpcore's network backend, resolving and checking each host before the socket opens."""

    def __init__(self, policy: AddressPolicy, resolve: Resolver | None = None) -> None:
        self._policy = policy
        self._resolve = resolve or system_resolve
        self._inner = httpcore.SyncBackend()

    def _addresses(self, host: str, port: int) -> list[str]:
        bare = host.strip("[]")
        try:
            ipaddress.ip_address(bare.split("%", 1)[0])
            return self._policy.check(bare, [bare])  # a literal address needs no resolver
        except ValueError:
            return self._policy.check(host, self._resolve(host, port))

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        failure: Exception = httpcore.ConnectError(f"{host!r} resolved to no address")
        for address in self._addresses(host, port):
            try:  # to the checked address itself: no second lookup that an attacker's DNS could answer
                return self._inner.connect_tcp(address, port, timeout=timeout, local_address=local_address,
                                               socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        raise failure

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        raise BlockedAddress("fetch_url: unix sockets are never fetched")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class GuardedTransport(httpx.HTTPTransport):
    """``httpx.HTTPTransport`` over a ``GuardedBackend``, without keep-alive or proxies."""

    def __init__(self, policy: AddressPolicy, resolve: Resolver | None = None) -> None:
        # Not super().__init__(): it builds its pool with no way to pass a network backend.
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(), max_keepalive_connections=0,
            network_backend=GuardedBackend(policy, resolve))
