"""The quota admission evaluator: batching per namespace, fold, one write per quota document.

Port, in asyncio, of ``quotaEvaluator`` in kubernetes/kubernetes ``staging/src/k8s.io/
apiserver/pkg/admission/plugin/resourcequota/controller.go`` (``Evaluate``, ``addWork``,
``getWork``, ``completeWork``, ``doWork``, ``checkAttributes``, ``checkQuotas``), with the
conflict policy of :mod:`dynquota.admission.policy`.

Requests of one namespace wait on a workqueue keyed by namespace; a worker takes all of them
as one batch while requests arriving meanwhile collect in a dirty buffer for the next batch.
A batch is checked in phases: (0) keep the quotas as read, (1) fold each request into a
running copy, checking it against *all* matching quotas, (2) if nothing changed, write
nothing, (3) write each changed quota document once; if some writes fail, re-evaluate only the
failed documents, for the requests still undecided.

Deadlines: every request has one (``deadline`` seconds after it arrived, on the event loop's
clock, ``loop.time()``). A request whose deadline passes before its verdict is delivered is
denied with :class:`QuotaTimeoutError` and one message, whichever phase it was in: waiting in
the queue, reading, folding or writing. The caller's timer and the batch apply the same rule
to the same instant, so the answer never depends on which of them notices first.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from .accessor import LiveQuotaAccessor, QuotaAccessor
from .check import check_request
from .errors import (
    AdmissionError,
    DefaultDenyError,
    QuotaConflictError,
    QuotaTimeoutError,
)
from .evaluators import Registry
from .policy import DYNQUOTA, ConflictPolicy
from .resources import equals
from .types import AdmissionAttributes, GroupResource, ResourceQuota

__all__ = ["Evaluator", "EvaluatorStats"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class _UndecidedError(DefaultDenyError):
    """Marker of a waiter that has no verdict yet."""


class _DeadlineExceededError(Exception):
    """An accessor call of a batch outlived the latest deadline of the requests it serves."""


@dataclass(eq=False)
class _Waiter:
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
        return isinstance(self.result, _UndecidedError) and not self.abandoned

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


class _NamespaceQueue:
    """A deduplicating FIFO of namespaces where a namespace is handed to one worker at a time.

    The semantics of client-go's ``workqueue.Type`` (``Add``, ``Get``, ``Done``): a key added
    while queued is not queued twice; a key added while being processed is queued again when
    ``done`` is called.
    """

    def __init__(self) -> None:
        self._ready: asyncio.Queue[str] = asyncio.Queue()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()

    def add(self, key: str) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._ready.put_nowait(key)

    async def get(self) -> str:
        key = await self._ready.get()
        self._processing.add(key)
        self._dirty.discard(key)
        return key

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._ready.put_nowait(key)


class Evaluator:
    """Decides whether admission requests fit their namespace's quotas, and charges them.

    Port of upstream ``quotaEvaluator`` (``resourcequota/controller.go``). Use as an async
    context manager, or call :meth:`close` when done; workers start on the first request.

    Args:
        accessor: where quotas are read and written (:class:`QuotaAccessor`).
        workers: concurrent namespace workers (upstream default 5).
        deadline: seconds a request may wait for its verdict, measured on the event loop's
            clock (``loop.time()``); a request whose verdict is not delivered by then is
            denied with :class:`QuotaTimeoutError`, whatever phase it was in (upstream: fixed
            10 s).
        policy: batching and conflict rules (:data:`~dynquota.admission.policy.DYNQUOTA`).
        registry: usage evaluators (default: pods and object counts).
        ignored_resources: group/resources never metered.
        clock: wall clock in seconds since the epoch, for pod deletion grace periods.
    """

    def __init__(
        self,
        accessor: QuotaAccessor,
        *,
        workers: int = 5,
        deadline: float = 10.0,
        policy: ConflictPolicy = DYNQUOTA,
        registry: Registry | None = None,
        ignored_resources: Iterable[GroupResource] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if deadline <= 0:
            raise ValueError(f"deadline must be positive seconds, got {deadline}")
        self.accessor = accessor
        self.policy = policy
        self.deadline = deadline
        self.stats = EvaluatorStats()
        self._workers = workers
        self._registry = registry or Registry()
        self._ignored = frozenset(ignored_resources)
        self._clock = clock
        self._queue: _NamespaceQueue | None = None
        self._work: dict[str, list[_Waiter]] = {}
        self._dirty_work: dict[str, list[_Waiter]] = {}
        self._in_progress: set[str] = set()
        self._read_live_next: set[str] = set()
        self._contended_until: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._started = False
        self._closed = False

    async def __aenter__(self) -> Evaluator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop the workers; requests still waiting are denied (:class:`DefaultDenyError`)."""
        self._closed = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for waiters in (*self._work.values(), *self._dirty_work.values()):
            for waiter in waiters:
                waiter.finish()
        self._work.clear()
        self._dirty_work.clear()

    # --- entry point ------------------------------------------------------------------------

    async def evaluate(self, attributes: AdmissionAttributes) -> None:
        """Admit ``attributes`` against its namespace's quotas, charging them; or raise.

        Requests that cannot change quota usage return at once: cluster-scoped requests,
        subresources (except ``pods/resize``), ignored resources, and operations the usage
        evaluator does not handle (object counts: CREATE only). Dry-run requests are checked
        but never charged. Upstream ``quotaEvaluator.Evaluate`` and the filters of
        ``QuotaAdmission.Validate`` (``admission.go``).

        Raises:
            QuotaForbiddenError: the request does not fit a quota (403), e.g. ``exceeded quota:
                NAME, requested: ..., used: ..., limited: ...``.
            QuotaTimeoutError: no verdict delivered within ``deadline`` seconds (500), in
                any phase (queued, reading, folding, writing, retrying); always the message
                ``Internal error occurred: resource quota evaluation timed out after D s
                (namespace 'NS'); the request is denied``. Takes precedence over every other
                outcome once the deadline has passed.
            QuotaConflictError: the quota write kept conflicting and the policy gave up (409;
                never with the default policy).
            QuotaAccessError: quotas could not be read or written, and this was known
                before the deadline.
            InvalidObjectError: the object's resource amounts are malformed.
            DefaultDenyError: the evaluator was closed before deciding.
        """
        if self._closed:
            raise DefaultDenyError("DEFAULT DENY: the quota evaluator is closed")
        gr = attributes.resource
        if not attributes.namespace or gr in self._ignored:
            return
        if gr == GroupResource("", "namespaces"):
            return
        if attributes.subresource and not (
            gr == GroupResource("", "pods") and attributes.subresource == "resize"
        ):
            return
        if not self._registry.get(gr).handles(attributes):
            return

        loop = asyncio.get_running_loop()
        waiter = _Waiter(
            attributes=attributes,
            deadline=loop.time() + self.deadline,
            done=loop.create_future(),
            result=_UndecidedError(),
        )
        self.stats.requests += 1
        if self.policy.batching:
            self._start()
            self._add_work(waiter)
        else:
            self._spawn(self._check_attributes(attributes.namespace, [waiter]))
        try:
            # The same absolute deadline as the batch uses: time spent between creating the
            # waiter and getting here (a busy machine) must not move it.
            async with asyncio.timeout_at(waiter.deadline):
                await asyncio.shield(waiter.done)
        except TimeoutError:
            pass
        finally:
            if not waiter.done.done():
                waiter.abandoned = True
        # Delivered: the batch already applied the deadline rule (see _deliver). Not
        # delivered by the deadline: denied, as the batch would have.
        result = waiter.result if waiter.done.done() else self._timeout_error(attributes.namespace)
        if isinstance(result, QuotaTimeoutError):
            self.stats.timeouts += 1
        if isinstance(result, _UndecidedError):
            raise DefaultDenyError()
        if result is not None:
            raise result

    # --- workqueue (upstream addWork / getWork / completeWork / doWork) --------------------

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        self._queue = _NamespaceQueue()
        for _ in range(self._workers):
            self._spawn(self._worker())

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _add_work(self, waiter: _Waiter) -> None:
        assert self._queue is not None
        ns = waiter.attributes.namespace
        self._queue.add(ns)
        if ns in self._in_progress:
            self._dirty_work.setdefault(ns, []).append(waiter)
        else:
            self._work.setdefault(ns, []).append(waiter)

    def _get_work(self, ns: str) -> list[_Waiter]:
        work = self._work.pop(ns, [])
        self._dirty_work.pop(ns, None)
        self._in_progress.add(ns)
        for w in work:
            w.requeued = False
        return work

    def _requeue(self, ns: str, waiters: list[_Waiter]) -> None:
        """Put waiters back at the head of the namespace's work (it is in progress now)."""
        assert self._queue is not None
        self._dirty_work[ns] = waiters + self._dirty_work.get(ns, [])
        self._queue.add(ns)

    def _complete_work(self, ns: str) -> None:
        assert self._queue is not None
        self._queue.done(ns)
        dirty = self._dirty_work.pop(ns, None)
        if dirty:
            self._work[ns] = dirty
        else:
            self._work.pop(ns, None)
        self._in_progress.discard(ns)

    async def _worker(self) -> None:
        assert self._queue is not None
        while True:
            ns = await self._queue.get()
            try:
                waiters = self._get_work(ns)
                if waiters:
                    await self._check_attributes(ns, waiters)
            finally:
                self._complete_work(ns)

    # --- deadlines ---------------------------------------------------------------------------

    def _timeout_error(self, ns: str) -> QuotaTimeoutError:
        """The one error of a request whose deadline passed (upstream wording kept)."""
        return QuotaTimeoutError(
            "Internal error occurred: resource quota evaluation timed out after "
            f"{self.deadline:g} s (namespace {ns!r}); the request is denied"
        )

    def _expire(self, waiters: Iterable[_Waiter], now: float) -> list[_Waiter]:
        """Deny every undecided waiter whose deadline is at or before ``now`` with the timeout
        error; return the waiters still undecided. ``now=math.inf`` denies them all."""
        pending = []
        for w in waiters:
            if not w.pending:
                continue
            if now >= w.deadline:
                w.result = self._timeout_error(w.attributes.namespace)
            else:
                pending.append(w)
        return pending

    def _deliver(self, waiter: _Waiter, now: float) -> None:
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
                waiter.result = self._timeout_error(waiter.attributes.namespace)
        waiter.finish()

    async def _bounded(
        self, call: Callable[[], Awaitable[T]], waiters: list[_Waiter], what: str
    ) -> T:
        """Await an accessor call no longer than the latest deadline of the waiters.

        Raises:
            _DeadlineExceededError: that deadline passed first (every waiter's has, then);
                the call is cancelled (a write may still land).
        """
        deadline = max(w.deadline for w in waiters)
        if asyncio.get_running_loop().time() >= deadline:
            log.debug("deadline passed before %s", what)
            raise _DeadlineExceededError(what)
        timeout = asyncio.timeout_at(deadline)
        try:
            async with timeout:
                return await call()
        except TimeoutError:
            if not timeout.expired():
                raise  # the call's own TimeoutError, not our deadline
            log.debug("deadline passed while %s", what)
            raise _DeadlineExceededError(what) from None

    # --- evaluation -------------------------------------------------------------------------

    async def _check_attributes(self, ns: str, waiters: list[_Waiter]) -> None:
        """Decide a batch and notify every waiter (upstream ``checkAttributes``)."""
        self.stats.batches += 1
        self.stats.max_batch = max(self.stats.max_batch, len(waiters))
        loop = asyncio.get_running_loop()
        try:
            # Requests whose deadline passed while queued are denied without a read.
            live = self._expire(waiters, loop.time())
            if not live:
                return
            read: Callable[[], Awaitable[list[ResourceQuota]]]
            try:
                if self._should_read_live(ns) and isinstance(self.accessor, LiveQuotaAccessor):
                    self.stats.live_rereads += 1
                    read = functools.partial(self.accessor.get_quotas_live, ns)
                else:
                    read = functools.partial(self.accessor.get_quotas, ns)
                self._read_live_next.discard(ns)
                quotas = await self._bounded(read, live, f"reading the quotas of {ns!r}")
            except _DeadlineExceededError:
                self._expire(live, math.inf)
                return
            except AdmissionError as e:
                for w in live:
                    w.result = e
                return
            if not quotas:
                for w in live:
                    w.result = None
                return
            await self._check_quotas(ns, quotas, live)
        except Exception:
            log.exception("quota evaluation of namespace %r failed; denying its batch", ns)
            for w in waiters:
                w.requeued = False
        finally:
            requeued = [w for w in waiters if w.requeued]
            now = loop.time()
            for w in waiters:
                if not w.requeued:
                    self._deliver(w, now)
            if requeued:
                self._requeue(ns, requeued)

    async def _check_quotas(
        self, ns: str, quotas: list[ResourceQuota], waiters: list[_Waiter]
    ) -> None:
        """Fold, write, and retry the failed documents (upstream ``checkQuotas``).

        A request whose deadline has passed is denied with the timeout error before each fold
        and after each failed round; it is never folded into a write that starts after its
        deadline.
        """
        policy = self.policy
        loop = asyncio.get_running_loop()
        budget = policy.retries
        now = self._clock()
        conflict_streak = 0
        while True:
            if not self._expire(waiters, loop.time()):
                return
            self.stats.rounds += 1
            # Phase 0/1: fold every undecided request into a running copy of the quotas.
            # Only undecided waiters take part: a retry never revisits a verdict
            # (kubernetes#141904: a request denied by one quota stays denied when another
            # quota's write is retried).
            running = list(quotas)
            charged: list[_Waiter] = []
            for w in waiters:
                if not w.pending:
                    continue
                try:
                    new = check_request(
                        running, w.attributes, self._registry.get(w.attributes.resource), now
                    )
                except AdmissionError as e:
                    w.result = e
                    continue
                if w.attributes.dry_run:
                    w.result = None
                    continue
                if all(equals(a.used, b.used) for a, b in zip(running, new, strict=True)):
                    w.result = None
                    continue
                charged.append(w)
                running = new

            # Phase 2: nothing to write.
            if not charged:
                return

            # A deadline that passed during the fold (a large batch, a starved event loop):
            # fold again without those requests rather than write charges already denied.
            fold_end = loop.time()
            if any(fold_end >= w.deadline for w in charged):
                continue

            # Phase 3: one write per changed document.
            written = 0
            failed: list[str] = []
            errors: list[AdmissionError] = []
            for before, after in zip(quotas, running, strict=True):
                if equals(before.used, after.used):
                    continue
                try:
                    await self._bounded(
                        functools.partial(self.accessor.update_quota_status, after),
                        charged,
                        f"writing the status of quota {after.key}",
                    )
                except _DeadlineExceededError:
                    # Every charged request is past its deadline (the latest bounds the
                    # write). The cancelled write may still land: an over-charge, never an
                    # over-admission.
                    self._expire(charged, math.inf)
                    return
                except AdmissionError as e:
                    failed.append(after.name)
                    errors.append(e)
                else:
                    written += 1
            if not failed:
                for w in charged:
                    w.charged = True
                    if isinstance(w.result, _UndecidedError):
                        w.result = None  # admitted, unless delivered after its deadline
                return

            last = errors[-1]
            conflicts_only = all(isinstance(e, QuotaConflictError) for e in errors)
            if conflicts_only:
                self.stats.conflict_rounds += 1
                if policy.live_read_window > 0:
                    self._contended_until[ns] = loop.time() + policy.live_read_window
            else:
                self.stats.error_rounds += 1
            pending = self._expire(waiters, loop.time())
            if not pending:
                return
            consumes = policy.conflicts_consume_retries or not conflicts_only
            if consumes:
                if budget <= 0:
                    self._fail(pending, last)
                    return
                budget -= 1
            elif policy.requeue_on_conflict and policy.batching and not written:
                # Nothing was written: the undecided requests go back to the head of the
                # namespace's queue, to be decided with the requests that arrived meanwhile
                # against a live read (one write for all of them, not one more per batch).
                self._read_live_next.add(ns)
                for w in pending:
                    w.requeued = True
                return
            # Conflicts that do not consume the budget go on until each request's deadline
            # (_expire above and at the top of the loop).
            # Let other tasks run (and their deadlines fire) between rounds; after repeated
            # conflicts, step aside for a random moment so colliding writers spread out, but
            # never past the latest deadline.
            conflict_streak = conflict_streak + 1 if conflicts_only else 0
            latest = max(w.deadline for w in pending)
            await asyncio.sleep(max(0.0, min(self._backoff(conflict_streak), latest - loop.time())))
            pending = self._expire(pending, loop.time())
            if not pending:
                return

            # Re-read only the failed documents; a deleted one is simply not checked again.
            read: Callable[[], Awaitable[list[ResourceQuota]]]
            if (
                conflicts_only
                and policy.reread_live_on_conflict
                and isinstance(self.accessor, LiveQuotaAccessor)
            ):
                self.stats.live_rereads += 1
                read = functools.partial(self.accessor.get_quotas_live, ns)
            else:
                read = functools.partial(self.accessor.get_quotas, ns)
            try:
                fresh = await self._bounded(read, pending, f"re-reading quotas of {ns!r}")
            except _DeadlineExceededError:
                self._expire(pending, math.inf)
                return
            except AdmissionError:
                self._fail(pending, last)
                return
            quotas = [q for q in fresh if q.name in failed]

    def _should_read_live(self, ns: str) -> bool:
        """A batch reads live right after its namespace's conflict round, and during the
        policy's ``live_read_window`` after one."""
        if ns in self._read_live_next:
            return True
        until = self._contended_until.get(ns)
        if until is None:
            return False
        if asyncio.get_running_loop().time() < until:
            return True
        del self._contended_until[ns]
        return False

    def _backoff(self, streak: int) -> float:
        """Seconds to pause before the next round: 0 unless conflicts repeat."""
        base = self.policy.conflict_backoff
        if base <= 0 or streak < 2:
            return 0.0
        return random.uniform(0, min(base * 2 ** (streak - 2), 16 * base))

    @staticmethod
    def _fail(waiters: list[_Waiter], error: BaseException) -> None:
        for w in waiters:
            if w.pending:
                w.result = error
