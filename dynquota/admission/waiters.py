"""Requests waiting for a verdict, their deadlines, and the evaluator's counters.

Port of ``admissionWaiter`` and ``defaultDeny`` of kubernetes/kubernetes ``staging/src/k8s.io/
apiserver/pkg/admission/plugin/resourcequota/controller.go``, with the deadline rule of
:mod:`dynquota.admission.evaluator`: a request whose verdict is not delivered before its
deadline (event-loop time, ``loop.time()``) is denied with :class:`QuotaTimeoutError`,
whatever phase it was in.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from .errors import DefaultDenyError, QuotaTimeoutError
from .types import AdmissionAttributes

__all__ = [
    "DeadlineExceededError",
    "Deadlines",
    "EvaluatorStats",
    "UndecidedError",
    "Waiter",
    "bounded",
]

log = logging.getLogger("dynquota.admission.evaluator")

T = TypeVar("T")


class UndecidedError(DefaultDenyError):
    """Marker of a waiter that has no verdict yet."""


class DeadlineExceededError(Exception):
    """An accessor call of a batch outlived the latest deadline of the requests it serves."""


@dataclass(eq=False)
class Waiter:
    """One request waiting for its verdict (upstream ``admissionWaiter``)."""

    attributes: AdmissionAttributes
    deadline: float  # event-loop time (loop.time())
    done: asyncio.Future[None]
    result: BaseException | None
    abandoned: bool = False  # the caller got its answer (deadline) or went away
    requeued: bool = False  # sent back to the namespace's queue after a conflict
    charged: bool = False  # every quota document carrying its charge was written

    @property
    def pending(self) -> bool:
        return isinstance(self.result, UndecidedError) and not self.abandoned

    def finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


@dataclass
class EvaluatorStats:
    """Counters of one evaluator since creation.

    Attributes:
        requests: requests that needed a quota check (waiters).
        batches: batches evaluated (one per namespace turn of a worker).
        max_batch: the largest batch.
        rounds: fold-and-write rounds (a batch's first round, its retries, and a fold
            repeated because a deadline passed during it).
        conflict_rounds: rounds whose failed writes were all 409 Conflicts.
        error_rounds: rounds with another write error.
        live_rereads: live re-reads after a conflict round.
        timeouts: requests denied with :class:`QuotaTimeoutError` (their deadline passed
            before a verdict was delivered, in whatever phase).
        late_charges: requests charged by writes that finished after their deadline (or after
            the caller went away): denied, yet counted in ``status.used`` (the quota
            controller's recount removes such over-charges for the resources it counts).
    """

    requests: int = 0
    batches: int = 0
    max_batch: int = 0
    rounds: int = 0
    conflict_rounds: int = 0
    error_rounds: int = 0
    live_rereads: int = 0
    timeouts: int = 0
    late_charges: int = 0


class Deadlines:
    """The deadline rule, applied by the batch and by the caller alike.

    Args:
        seconds: the evaluator's deadline (for the message).
        stats: where late charges are counted.
    """

    def __init__(self, seconds: float, stats: EvaluatorStats) -> None:
        self.seconds = seconds
        self.stats = stats

    def timeout_error(self, ns: str) -> QuotaTimeoutError:
        """The one error of a request whose deadline passed (upstream wording kept)."""
        return QuotaTimeoutError(
            "Internal error occurred: resource quota evaluation timed out after "
            f"{self.seconds:g} s (namespace {ns!r}); the request is denied"
        )

    def expire(self, waiters: Iterable[Waiter], now: float) -> list[Waiter]:
        """Deny every undecided waiter whose deadline is at or before ``now`` with the timeout
        error; return the waiters still undecided. ``now=math.inf`` denies them all."""
        pending = []
        for w in waiters:
            if not w.pending:
                continue
            if now >= w.deadline:
                w.result = self.timeout_error(w.attributes.namespace)
            else:
                pending.append(w)
        return pending

    def deliver(self, waiter: Waiter, now: float) -> None:
        """Hand the waiter its verdict; past its deadline the verdict is the timeout error.

        This is the rule the caller's timer applies too, so a verdict reached in time but
        delivered late (a slow write of the same batch, a starved event loop) is never
        answered with anything but the timeout error.
        """
        if waiter.done.done():
            return
        if waiter.abandoned or now >= waiter.deadline:
            if waiter.charged:
                self.stats.late_charges += 1
            if not isinstance(waiter.result, QuotaTimeoutError):
                waiter.result = self.timeout_error(waiter.attributes.namespace)
        waiter.finish()


async def bounded(call: Callable[[], Awaitable[T]], waiters: list[Waiter], what: str) -> T:
    """Await an accessor call no longer than the latest deadline of the waiters.

    Raises:
        DeadlineExceededError: that deadline passed first (every waiter's has, then); the
            call is cancelled (a write may still land).
    """
    deadline = max(w.deadline for w in waiters)
    if asyncio.get_running_loop().time() >= deadline:
        log.debug("deadline passed before %s", what)
        raise DeadlineExceededError(what)
    timeout = asyncio.timeout_at(deadline)
    try:
        async with timeout:
            return await call()
    except TimeoutError:
        if not timeout.expired():
            raise  # the call's own TimeoutError, not our deadline
        log.debug("deadline passed while %s", what)
        raise DeadlineExceededError(what) from None
