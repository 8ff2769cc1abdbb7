"""The ``web:`` section of config.yaml: which non-public hosts and networks ``fetch_url`` may
reach (``web.allowed_hosts``). Kept apart from ``net_guard`` so reading the config loads no
HTTP client. Invariant: an entry is valid here exactly when ``net_guard`` can apply it.
"""
from __future__ import annotations

import ipaddress
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

ALLOW_KEY = "web.allowed_hosts"
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_HOST_NAME = re.compile(r"^(\*\.)?([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")


def parse_allow_entry(entry: str) -> str | Network:
    """A host name (``intranet.example``, ``*.corp.example``) or an address / CIDR block
    (``10.1.2.3``, ``10.0.0.0/8``, ``fd00::/8``); ValueError saying which forms are valid."""
    text = entry.strip().lower()
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        pass
    if text and _HOST_NAME.match(text):
        return text
    raise ValueError(f"{entry!r} is neither a host name (intranet.example, *.corp.example) nor an address "
                     "or CIDR block (10.1.2.3, 10.0.0.0/8, fd00::/8)")


class WebConfig(BaseModel):
    """The ``web:`` section of config.yaml: what the web toolset may reach."""

    model_config = ConfigDict(extra="forbid")

    allowed_hosts: list[str] = Field(default_factory=list, description=(
        "host names (intranet.example, *.corp.example), addresses and CIDR blocks (10.0.0.0/8) fetch_url may "
        "reach although they are loopback, private, link-local or reserved; everything else non-public is refused"))

    @field_validator("allowed_hosts")
    @classmethod
    def _valid_entries(cls, value: list[str]) -> list[str]:
        for entry in value:
            parse_allow_entry(entry)
        return value
