"""The apiserver's time, kept on this process's monotonic clock (no I/O).

Persisted stamps (a quota's ``last-upscale``/``last-change`` annotations, an override's
``granted-at``, a terminating pod's ``deletionTimestamp``) are the cluster's, so they are judged
against the cluster's time, not against this machine's wall clock: :class:`ServerClock` reads
the local wall clock once, at construction, and from then on advances only with the monotonic
clock — a local wall-clock step (NTP, a VM restored, ``date -s``) changes nothing — and is
re-anchored to the apiserver's ``Date`` response header (:meth:`ServerClock.observe_date`)
when the two differ by more than ``tolerance`` seconds. So a stamp written by a replica whose
clock ran ahead lies in the future of this clock and is repaired by the rules that repair
future stamps, never obeyed.

In-memory windows and cooldowns (peak windows, warn-once caches, hold logs) run on
:attr:`ServerClock.monotonic` itself: not even a re-anchoring moves them.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import Callable

__all__ = ["ServerClock", "parse_http_date"]

log = logging.getLogger(__name__)


def parse_http_date(value: str) -> float | None:
    """An HTTP ``Date`` header (RFC 9110 IMF-fixdate, 1 s resolution) as seconds since the
    epoch; ``None`` when it does not parse. Pure."""
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.timestamp()


class ServerClock:
    """Seconds since the epoch on the apiserver's clock, advancing with ``monotonic``.

    Args:
        monotonic: the monotonic clock (seconds; default ``time.monotonic``, which is what the
            asyncio loop's ``time()`` reads), injectable for tests.
        wall: the local wall clock, read once here as the first anchor (seconds since the
            epoch), injectable for tests.
        tolerance: seconds the apiserver's ``Date`` may differ from this clock before it is
            re-anchored (``Date`` has 1 s resolution, plus the request's latency).

    Call it for the time. ``offset`` is the last observed difference, apiserver minus this
    clock's previous reading (seconds; ``None`` before any ``Date``); ``reanchors`` counts the
    re-anchorings.
    """

    def __init__(
        self,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        tolerance: float = 2.0,
    ) -> None:
        self.monotonic = monotonic
        self.tolerance = tolerance
        self._anchor_mono = monotonic()
        self._anchor_wall = wall()
        self.offset: float | None = None
        self.reanchors = 0

    def __call__(self) -> float:
        """The apiserver's time now (estimated), seconds since the epoch."""
        return self._anchor_wall + (self.monotonic() - self._anchor_mono)

    def observe_date(self, header: str | None, received: float | None = None) -> None:
        """An apiserver response's ``Date`` header, received at monotonic ``received``
        (default: now). The server wrote it within the second it names: its time at receipt
        is taken as that second + 0.5 s. Re-anchors when off by more than ``tolerance``."""
        if not header:
            return
        server = parse_http_date(header)
        if server is None:
            return
        at = self.monotonic() if received is None else received
        server += 0.5
        estimate = self._anchor_wall + (at - self._anchor_mono)
        self.offset = server - estimate
        if abs(self.offset) > self.tolerance:
            log.warning(
                "the apiserver's clock differs from ours by %.1f s: stamps are judged by its time",
                self.offset,
            )
            self._anchor_mono, self._anchor_wall = at, server
            self.reanchors += 1
