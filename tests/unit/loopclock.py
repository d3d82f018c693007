"""Timer tests on a loop clock (looptime): the event loop's time jumps to the next timer
whenever nothing is ready to run, so a test of a timer, a backoff or a timeout takes no wall
time and asserts instants exactly, however busy the machine is.

A test opts in with the ``loop_clock`` mark (``tests/unit/conftest.py`` then runs it on one of
looptime's loops, time compaction on) and reads time from :func:`now` (the running loop's clock)
wherever it would read ``time.time()``. Unit tests only: against a real apiserver the
operator's polling loops would spin. looptime's own pytest plugin is off (``pyproject.toml``: it
asks every test's policy for a loop and leaves one unclosed behind sync tests).
"""

from __future__ import annotations

import asyncio

import looptime

__all__ = ["new_loop", "now"]


def new_loop() -> asyncio.AbstractEventLoop:
    """A new event loop on looptime's compacted clock (starting at 0)."""
    return looptime.new_event_loop()


def now() -> float:
    """The running event loop's clock, seconds (what a timer test reads instead of the wall)."""
    return asyncio.get_running_loop().time()
