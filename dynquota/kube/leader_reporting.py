"""What the leader elector tells others: leadership changes and Lease request failures.

:class:`LeadershipReporter` is the reporting half of :class:`dynquota.kube.leader.LeaderGate`:
it hands each change of leadership to ``on_change`` in order, one at a time, from a task of
its own (a slow callback never delays a renewal), and logs failed Lease requests (WARNING on
the first failure and then at most every :data:`WARN_EVERY` seconds, saying what it means).
It logs on the elector's logger, ``dynquota.kube.leader``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
from collections.abc import Awaitable, Callable

from dynquota._k8s.errors import KubeError

__all__ = ["WARN_EVERY", "Callback", "LeadershipReporter"]

log = logging.getLogger("dynquota.kube.leader")

Callback = Callable[[bool], Awaitable[None]]
"""``async (is_leader)``: called when leadership is gained (True) or lost (False)."""

WARN_EVERY = 30.0
"""Seconds between two WARNINGs about repeated Lease failures."""


class LeadershipReporter:
    """Announces leadership changes and logs Lease request failures for one candidate.

    Args:
        identity: the candidate's identity (in every log line).
        lease_name: ``namespace/name`` of the Lease (in every log line).
        on_change: awaited with ``True``/``False`` for each change (may be set later).
    """

    def __init__(self, identity: str, lease_name: str, on_change: Callback | None) -> None:
        self.identity = identity
        self.lease_name = lease_name
        self.on_change = on_change
        self.announced = False
        """The state last announced (True: leading)."""
        self.transitions = 0
        """Times this replica started leading (a count)."""
        self.failures = 0
        """Lease requests that failed in a row (0 after a success)."""
        self._last_warning = -math.inf
        self._pending: collections.deque[bool] = collections.deque()
        self._notifier: asyncio.Task[None] | None = None

    def announce(self, leading: bool) -> None:
        """Record the new state (a no-op if it is the one announced) and have ``on_change``
        hear it, in order, from a task of its own; without a running loop it is delivered
        with the next change."""
        if leading == self.announced:
            return
        self.announced = leading
        if leading:
            self.transitions += 1
        log.info(
            "%s %s the Lease %s",
            self.identity,
            "holds" if leading else "no longer holds",
            self.lease_name,
        )
        self._pending.append(leading)
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): delivered with the next change
            return
        if self._notifier is None or self._notifier.done():
            self._notifier = asyncio.create_task(
                self._notify(), name=f"dynquota-lease-notify-{self.identity}"
            )

    async def _notify(self) -> None:
        while self._pending:
            leading = self._pending.popleft()
            if self.on_change is None:
                continue
            try:
                await self.on_change(leading)
            except Exception:
                log.exception("on_change(%s) failed", leading)

    async def settled(self) -> None:
        """Wait until ``on_change`` has heard every change announced so far."""
        while self._notifier is not None and not self._notifier.done():
            await asyncio.shield(self._notifier)

    def failed(self, exc: Exception, now: float, meaning: str) -> None:
        """One Lease request failed at ``now`` (monotonic seconds); ``meaning`` says what it
        means for this replica (e.g. how long it still leads)."""
        self.failures += 1
        if self.failures == 1 or now - self._last_warning >= WARN_EVERY:
            self._last_warning = now
            log.warning(
                "%s: Lease %s request failed (%d in a row): %s; %s",
                self.identity,
                self.lease_name,
                self.failures,
                exc if isinstance(exc, KubeError) else repr(exc),
                meaning,
                exc_info=not isinstance(exc, KubeError),
            )
        else:
            log.debug("%s: Lease %s request failed: %r", self.identity, self.lease_name, exc)

    def succeeded(self) -> None:
        """A Lease request succeeded: say so after failures, and reset the count."""
        if self.failures:
            log.info(
                "%s: Lease %s requests succeed again after %d failures",
                self.identity,
                self.lease_name,
                self.failures,
            )
        self.failures = 0
        self._last_warning = -math.inf
