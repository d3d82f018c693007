"""The budget guard as the budgets see it: read by name, at most once a minute, and every
budget woken when what is in force changes (a part the assembly builds; issue 30, LOW-6).

A quiet budget passes only at the resync (10 minutes by default): without a watch of its own,
its ``Guarded`` condition would lag an edit of the guard by that much (README-only attack:
``True`` for 585 s after the binding was switched to ``Audit``). :meth:`GuardWatch.run` reads
the guard every :data:`GUARD_RECHECK` seconds (or each resync, if shorter) while this replica
leads and calls ``on_change``
(the budget tasks' ``wake_all``) when the answer differs from the last one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from dynquota.operator.ports import LeaderView
from dynquota.policy.budget_guard import GuardSeen

__all__ = ["GUARD_RECHECK", "GuardWatch"]

log = logging.getLogger("dynquota.operator")

GUARD_RECHECK = 60.0
"""Seconds a read of the budget guard (two GETs) is reused; :meth:`GuardWatch.run`'s period."""


class GuardWatch:
    """Reads the budget guard for the budgets' ``Guarded``.

    Args:
        read: one read of the guard (two GETs; never raises: a failure is ``present=None``).
        leader: only the leader reads (a standby writes no status).
        clock: seconds on any clock that does not step back (monotonic).
        recheck: seconds a read is reused and the period of :meth:`run`.
    """

    def __init__(
        self,
        read: Callable[[], Awaitable[GuardSeen]],
        leader: LeaderView,
        clock: Callable[[], float] = time.monotonic,
        recheck: float = GUARD_RECHECK,
    ) -> None:
        self.read = read
        self.leader = leader
        self.clock = clock
        self.recheck = recheck
        self.on_change: Callable[[], None] = lambda: None
        """Called when what is in force changed (the budget tasks' ``wake_all``)."""
        self._last: tuple[GuardSeen, float] | None = None  # (what, when)

    async def seen(self) -> GuardSeen:
        """The guard as last read, read again when older than ``recheck`` seconds."""
        now = self.clock()
        if self._last is None or not 0 <= now - self._last[1] < self.recheck:
            await self.refresh()
        assert self._last is not None
        return self._last[0]

    async def refresh(self) -> bool:
        """Read the guard now; whether what is in force changed since the last read (the
        first read changes nothing)."""
        seen = await self.read()
        before = self._last
        self._last = (seen, self.clock())
        return before is not None and before[0] != seen

    async def run(self) -> None:
        """Every ``recheck`` seconds while leading: read, and call ``on_change`` on a change.
        Runs until cancelled."""
        while True:
            await asyncio.sleep(self.recheck)
            try:
                if self.leader.is_leader and await self.refresh():
                    self.on_change()
            except Exception:  # a bug must not end the watch (the passes still read)
                log.exception("budget guard watch: a read failed")
