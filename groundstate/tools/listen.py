"""Serving on a network: where a server may listen (loopback, unless the caller says the network may reach it), and its
start-up heap out of the collector's way while it serves."""

from __future__ import annotations

import contextlib
import gc
import ipaddress
from collections.abc import Iterator


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


@contextlib.contextmanager
def startup_heap_frozen() -> Iterator[None]:
    """While serving, every object alive at its start (imported modules, the built app, the domain) is out of the
    cyclic collector's reach: a server allocates per request, and each full collection would otherwise walk the whole
    start-up heap again. On the OpenEnv server at 1,000 sessions that was a fifth of its CPU per session
    (benchmarks/RESULTS.md). The heap is unfrozen when the block ends, however it ends (a refused option, a test
    serving in its own process); a process serving twice at once unfreezes both at the first end."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
