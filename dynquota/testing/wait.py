"""Waiting for a condition with a deadline, the only synchronisation tests use."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeoutError(AssertionError):
    """The condition did not hold before the deadline; the message says what was awaited."""


def wait_until(
    check: Callable[[], T | None], what: str, timeout: float = 60.0, interval: float = 0.1
) -> T:
    """Poll ``check`` until it returns a truthy value and return that value.

    Args:
        check: called every ``interval`` seconds; exceptions propagate.
        what: human description used in the timeout message.
        timeout: seconds before giving up.

    Raises:
        WaitTimeoutError: ``check`` stayed falsy for ``timeout`` seconds (the last value is shown).
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise WaitTimeoutError(
                f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}"
            )
        time.sleep(interval)


def holds_for(
    check: Callable[[], object], what: str, seconds: float, interval: float = 0.5
) -> None:
    """Check that ``check`` stays truthy for ``seconds`` (an absence, a hold), polling every
    ``interval`` seconds; the first falsy value fails at once.

    Raises:
        AssertionError: ``check`` returned a falsy value (it is shown with ``what``).
    """
    start = time.monotonic()
    deadline = start + seconds
    while True:
        value = check()
        assert value, f"{what} stopped holding after {time.monotonic() - start:.1f} s: {value!r}"
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)


async def async_wait_until(
    check: Callable[[], Awaitable[T | None] | T | None],
    what: str,
    timeout: float = 60.0,
    interval: float = 0.1,
) -> T:
    """Async twin of :func:`wait_until`; ``check`` may be sync or async.

    Raises:
        WaitTimeoutError: ``check`` stayed falsy for ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        last = await value if isinstance(value, Awaitable) else value
        if last:
            return last
        if time.monotonic() >= deadline:
            raise WaitTimeoutError(
                f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}"
            )
        await asyncio.sleep(interval)
