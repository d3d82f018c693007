"""A coalescing asyncio workqueue keyed by namespace, with timed re-queues and backoff.

The semantics follow client-go's ``util/workqueue`` (kubernetes/kubernetes
``staging/src/k8s.io/client-go/util/workqueue``: ``Type.Add``/``Get``/``Done`` with its
*dirty* and *processing* sets, ``delayingType.AddAfter``, ``ItemExponentialFailureRateLimiter``):

- a key is processed by at most one worker at a time;
- adding a key that is already queued does nothing (a burst of events is one decision);
- adding a key that is being processed marks it dirty: it is processed once more afterwards;
- with a coalescing window, :meth:`WorkQueue.add` is a leading-edge throttle: the first event
  of a quiet key (not queued, not running, no run started within the window) makes it
  runnable at once; later events make at most one more run, at the end of the window counted
  from the last run's start (trailing edge), so a burst still coalesces;
- :meth:`WorkQueue.add_at` schedules a key at a wall-clock instant; for one key the earliest
  pending instant wins (a later one is dropped: the run at the earlier instant schedules the
  next one again);
- a failed run is retried after an exponential backoff per key (``base * 2**failures`` capped
  at ``cap`` seconds), reset by the next success.

Times given to :meth:`WorkQueue.add_at` and returned by the handler are seconds since the epoch
(the same clock as ``time.time()``); the queue converts them to the loop's monotonic clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

__all__ = ["Outcome", "WorkQueue"]

log = logging.getLogger(__name__)

# A timer never fires before its instant: asyncio may run a callback up to one clock
# resolution early, and the wall clock and the monotonic clock drift apart slightly.
_TIMER_SLACK = 0.005


@dataclass(frozen=True)
class Outcome:
    """What a handler run asks of the queue.

    ``requeue_at``: run the key again at this instant (seconds since the epoch), or ``None``.
    ``retry``: the run failed transiently; run again after the key's backoff (``requeue_at``
    is then ignored).
    """

    requeue_at: float | None = None
    retry: bool = False


Handler = Callable[[str], Awaitable[Outcome]]


class WorkQueue:
    """Coalescing, per-key serialised work for ``workers`` concurrent asyncio workers.

    Args:
        handler: ``async (key) -> Outcome``; an exception counts as ``Outcome(retry=True)``
            (and is logged).
        workers: concurrent runs (of distinct keys).
        coalesce: the coalescing window in seconds: a quiet key runs at once, and events
            arriving within the window of its last run's start make one more run at the
            window's end (0: every add is :meth:`add_now`).
        backoff_base, backoff_cap: retry delays in seconds, ``base * 2**n`` up to ``cap``.
        clock: wall clock (seconds since the epoch), injectable for tests.
    """

    def __init__(
        self,
        handler: Handler,
        *,
        workers: int = 4,
        coalesce: float = 0.0,
        backoff_base: float = 0.5,
        backoff_cap: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._handler = handler
        self._workers = workers
        self._coalesce = coalesce
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._clock = clock
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._processing: set[str] = set()
        self._dirty: set[str] = set()
        self._timers: dict[str, tuple[float, asyncio.TimerHandle]] = {}
        self._failures: dict[str, int] = {}
        self._started: dict[str, float] = {}  # wall-clock start of each key's last run
        self._leading: set[str] = set()  # queued by the first event of a quiet key
        self._running_leading: set[str] = set()  # ... and now running
        self._tasks: list[asyncio.Task[None]] = []
        self._idle = asyncio.Event()
        self._idle.set()
        self.runs = 0
        """Handler runs so far (a count, for metrics and tests)."""

    # -- adding work ------------------------------------------------------------------------

    def add(self, key: str) -> None:
        """Make ``key`` runnable: at once when it is quiet (leading edge), otherwise at the end
        of the coalescing window that its last run's start opened (trailing edge)."""
        if self._coalesce <= 0:
            self.add_now(key)
            return
        if key in self._queued:
            return  # the queued run has not read anything yet: it will see this event too
        now = self._clock()
        last = self._started.get(key)
        if key not in self._processing and (last is None or now - last >= self._coalesce):
            self.add_now(key)
            self._leading.add(key)
            return
        self.add_at(key, (now if last is None else last) + self._coalesce)

    def add_now(self, key: str) -> None:
        """Make ``key`` runnable at once, skipping the coalescing window."""
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._idle.clear()
        self._queue.put_nowait(key)

    def add_all(self, keys: Iterable[str]) -> None:
        """:meth:`add` every key."""
        for key in keys:
            self.add(key)

    def add_at(self, key: str, when: float) -> None:
        """Run ``key`` at ``when`` (seconds since the epoch); a past instant means now.

        If an earlier instant is already pending for ``key``, this one is dropped.
        """
        delay = when - self._clock()
        if delay <= 0:
            self._cancel_timer(key)
            self.add_now(key)
            return
        pending = self._timers.get(key)
        if pending is not None:
            if pending[0] <= when:
                return
            pending[1].cancel()
        loop = asyncio.get_running_loop()
        handle = loop.call_later(delay + _TIMER_SLACK, self._fire, key)
        self._timers[key] = (when, handle)

    def leading(self, key: str) -> bool:
        """Whether the run of ``key`` in progress was started by the first event of a quiet
        key (leading edge), not by a burst's trailing edge, a timer or :meth:`add_now`; the
        handler may then trust what the watches just delivered (nothing else is in flight)."""
        return key in self._running_leading

    def scheduled(self, key: str) -> float | None:
        """The pending instant for ``key`` (seconds since the epoch), or ``None``."""
        pending = self._timers.get(key)
        return pending[0] if pending is not None else None

    def forget(self, key: str) -> None:
        """Drop the pending timer and the failure count of ``key`` (e.g. namespace deleted)."""
        self._cancel_timer(key)
        self._failures.pop(key, None)
        self._started.pop(key, None)
        self._leading.discard(key)

    # -- introspection ----------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys runnable now or being processed (timers not counted)."""
        return len(self._queued) + len(self._processing)

    async def wait_idle(self, timeout: float | None = None) -> None:
        """Wait until nothing is queued or processing (pending timers are ignored).

        Raises:
            TimeoutError: still busy after ``timeout`` seconds.
        """
        async with asyncio.timeout(timeout):
            while True:
                await self._idle.wait()
                # a run may re-add its own key just before finishing: check again
                await asyncio.sleep(0)
                if not len(self):
                    return

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the workers in the running loop."""
        if self._tasks:
            return
        self._tasks = [
            asyncio.create_task(self._worker(), name=f"dynquota-worker-{i}")
            for i in range(self._workers)
        ]

    async def stop(self) -> None:
        """Cancel the workers (a run in flight is cancelled) and every timer."""
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    # -- internals ------------------------------------------------------------------------------

    def _cancel_timer(self, key: str) -> None:
        pending = self._timers.pop(key, None)
        if pending is not None:
            pending[1].cancel()

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self.add_now(key)

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._processing.add(key)
            if key in self._leading:
                self._leading.discard(key)
                self._running_leading.add(key)
            self._started[key] = self._clock()
            try:
                outcome = await self._run(key)
            finally:
                self._processing.discard(key)
                self._running_leading.discard(key)
            if outcome.retry:
                failures = self._failures.get(key, 0)
                self._failures[key] = failures + 1
                delay = min(self._backoff_cap, self._backoff_base * 2**failures)
                self.add_at(key, self._clock() + delay)
            else:
                self._failures.pop(key, None)
                if outcome.requeue_at is not None:
                    self.add_at(key, outcome.requeue_at)
            if key in self._dirty:
                self._dirty.discard(key)
                self.add_now(key)
            if not self._queued and not self._processing:
                self._idle.set()

    async def _run(self, key: str) -> Outcome:
        self.runs += 1
        try:
            return await self._handler(key)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("reconcile of %s failed; retrying with backoff", key)
            return Outcome(retry=True)
