"""Waiting with a bound: the attempt's time limit on tool and user-simulator calls, and the grading bound.

`within(awaitable, seconds, error)` awaits and, when the bound runs out, cancels the awaitable and raises
`error`; `in_daemon_thread(fn, *args)` runs a blocking call where a hung one can be abandoned (a daemon thread
cannot hold up the process's exit, unlike the event loop's default executor).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class GradingTimeout(RuntimeError):
    """Grading ran past its bound (`--grade-timeout`): a system error, never the agent's failure."""


async def within(
    awaitable: Awaitable[T], seconds: float | None, error: Callable[[], BaseException], on_timeout: Callable[[], None] | None = None
) -> T:
    """Await `awaitable`; after `seconds` (None: no bound) cancel it, call `on_timeout` and raise `error()`.

    Only the bound's own expiry becomes `error()`: a `TimeoutError` raised by the awaitable itself passes through.
    """
    if seconds is None:
        return await awaitable
    try:
        async with asyncio.timeout(seconds) as scope:
            return await awaitable
    except TimeoutError:
        if not scope.expired():
            raise
        if on_timeout is not None:
            on_timeout()
        raise error() from None


async def bounded(awaitable: Awaitable[T], seconds: float | None, what: str) -> T:
    """Await a grading step; raise `GradingTimeout` naming `what` after `seconds`."""
    return await within(awaitable, seconds, lambda: GradingTimeout(f"{what} ran past the grading bound of {seconds:g} s (--grade-timeout)"))


async def in_daemon_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking call in a daemon thread and await it (cancellable: a hung call cannot hold up exit)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if fut.done():
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(value)

    def target() -> None:
        try:
            value, error = fn(*args), None
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting coroutine
            value, error = None, e
        with contextlib.suppress(RuntimeError):  # the loop closed while the call hung: nobody awaits it any more
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=target, name="groundstate-tool", daemon=True).start()
    return await fut
