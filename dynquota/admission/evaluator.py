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

from .accessor import LiveQuotaAccessor, QuotaAccessor
from .check import check_request
from .errors import (
    AdmissionError,
    DefaultDenyError,
    QuotaConflictError,
    QuotaTimeoutError,
)
from .evaluators import Registry
from .limited import LimitedResource
from .policy import DYNQUOTA, ConflictPolicy
from .resources import equals
from .types import AdmissionAttributes, GroupResource, ResourceQuota
from .waiters import (
    DeadlineExceededError,
    Deadlines,
    EvaluatorStats,
    UndecidedError,
    Waiter,
    bounded,
)
from .workqueue import NamespaceWork

__all__ = ["Evaluator", "EvaluatorStats"]

log = logging.getLogger(__name__)


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
        limited_resources: the ``limitedResources`` admission configuration (resources
            and scopes that may only be consumed under a covering quota).
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
        limited_resources: Iterable[LimitedResource] = (),
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
        self._limited = tuple(limited_resources)
        self._clock = clock
        self._work = NamespaceWork()
        self._deadlines = Deadlines(deadline, self.stats)
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
        for waiter in self._work.drain():
            waiter.finish()

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
        waiter = Waiter(
            attributes=attributes,
            deadline=loop.time() + self.deadline,
            done=loop.create_future(),
            result=UndecidedError(),
        )
        self.stats.requests += 1
        if self.policy.batching:
            self._start()
            self._work.add(waiter)
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
        # Delivered: the batch already applied the deadline rule (see Deadlines.deliver). Not
        # delivered by the deadline: denied, as the batch would have.
        result = (
            waiter.result
            if waiter.done.done()
            else self._deadlines.timeout_error(attributes.namespace)
        )
        if isinstance(result, QuotaTimeoutError):
            self.stats.timeouts += 1
        if isinstance(result, UndecidedError):
            raise DefaultDenyError()
        if result is not None:
            raise result

    # --- workqueue (upstream addWork / getWork / completeWork / doWork) --------------------

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        for _ in range(self._workers):
            self._spawn(self._worker())

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _worker(self) -> None:
        while True:
            ns, waiters = await self._work.get()
            try:
                if waiters:
                    await self._check_attributes(ns, waiters)
            finally:
                self._work.complete(ns)

    # --- evaluation -------------------------------------------------------------------------

    async def _check_attributes(self, ns: str, waiters: list[Waiter]) -> None:
        """Decide a batch and notify every waiter (upstream ``checkAttributes``)."""
        self.stats.batches += 1
        self.stats.max_batch = max(self.stats.max_batch, len(waiters))
        loop = asyncio.get_running_loop()
        try:
            # Requests whose deadline passed while queued are denied without a read.
            live = self._deadlines.expire(waiters, loop.time())
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
                quotas = await bounded(read, live, f"reading the quotas of {ns!r}")
            except DeadlineExceededError:
                self._deadlines.expire(live, math.inf)
                return
            except AdmissionError as e:
                for w in live:
                    w.result = e
                return
            if not quotas and not self._limited:
                # no quota and nothing limited by default: admitted (upstream checkAttributes)
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
                    self._deadlines.deliver(w, now)
            if requeued:
                self._work.requeue(ns, requeued)

    async def _check_quotas(
        self, ns: str, quotas: list[ResourceQuota], waiters: list[Waiter]
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
            if not self._deadlines.expire(waiters, loop.time()):
                return
            self.stats.rounds += 1
            # Phase 0/1: fold every undecided request into a running copy of the quotas.
            # Only undecided waiters take part: a retry never revisits a verdict
            # (kubernetes#141904: a request denied by one quota stays denied when another
            # quota's write is retried).
            running = list(quotas)
            charged: list[Waiter] = []
            for w in waiters:
                if not w.pending:
                    continue
                try:
                    evaluator = self._registry.get(w.attributes.resource)
                    new = check_request(running, w.attributes, evaluator, now, self._limited)
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
                    await bounded(
                        functools.partial(self.accessor.update_quota_status, after),
                        charged,
                        f"writing the status of quota {after.key}",
                    )
                except DeadlineExceededError:
                    # Every charged request is past its deadline (the latest bounds the
                    # write). The cancelled write may still land: an over-charge, never an
                    # over-admission.
                    self._deadlines.expire(charged, math.inf)
                    return
                except AdmissionError as e:
                    failed.append(after.name)
                    errors.append(e)
                else:
                    written += 1
            if not failed:
                for w in charged:
                    w.charged = True
                    if isinstance(w.result, UndecidedError):
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
            pending = self._deadlines.expire(waiters, loop.time())
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
            pending = self._deadlines.expire(pending, loop.time())
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
                fresh = await bounded(read, pending, f"re-reading quotas of {ns!r}")
            except DeadlineExceededError:
                self._deadlines.expire(pending, math.inf)
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
    def _fail(waiters: list[Waiter], error: BaseException) -> None:
        for w in waiters:
            if w.pending:
                w.result = error
