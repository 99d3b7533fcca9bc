"""Where a server may listen: loopback, unless the caller says the network may reach it."""

from __future__ import annotations

import ipaddress


def check_host(host: str, allow_remote: bool = False) -> None:
    """Refuse to bind anything but loopback unless `allow_remote` (a token over plain HTTP is readable on the network)."""
    if allow_remote:
        return
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(
            f"refusing to serve over HTTP on non-loopback host {host!r}: use 127.0.0.1 (default), or pass "
            "allow_remote=True (--allow-remote) and put TLS in front of it"
        )
