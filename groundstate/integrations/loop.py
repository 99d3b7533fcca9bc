"""One event loop in a daemon thread, for adapters whose framework calls them synchronously (TRL's environment
methods, Gymnasium's `reset`/`step`): their calls run groundstate's async `Environment` there and wait for it.

A single loop per process serves every environment, so a sandbox opened by one call is used and closed on the
same loop by the next.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


class OnAdapterLoop(RuntimeError):
    """`run_sync` was called from the adapters' own loop, where waiting for a coroutine would wait forever."""


def _forget_after_fork() -> None:
    """A forked child has the parent's loop object but not its thread: start a loop of its own on first use."""
    global _loop, _lock
    _loop, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def _running_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="groundstate-adapters", daemon=True).start()
            _loop = loop
        return _loop


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on the adapters' loop and return its result (its exception is raised here).

    Must not be called from that loop itself (it would wait on itself): `OnAdapterLoop` then."""
    loop = _running_loop()
    try:
        current = asyncio.get_running_loop()
    except RuntimeError:
        current = None
    if current is loop:
        coro.close()
        raise OnAdapterLoop("run_sync was called from the adapters' own event loop")
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


def close_quietly(close: Callable[[], Coroutine[Any, Any, Any]]) -> None:
    """Run `close()` on the adapters' loop, for a finaliser (an environment collected, or alive at exit): from that loop
    itself (a finaliser run there), schedule it instead. A failure is swallowed: a release must not stop training."""
    try:
        run_sync(close())
    except OnAdapterLoop:
        asyncio.get_running_loop().create_task(close())
    except Exception:  # noqa: BLE001 - see above
        pass
