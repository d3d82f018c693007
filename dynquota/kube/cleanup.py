"""Deleting every managed quota in bulk: the uninstall cleanup behind ``dynquota cleanup`` (I/O).

The cleanup runs once, with the operator stopped, over every managed namespace of the
cluster: thousands of deletes. Done one by one with a pause after each, its rate was
``1 / (pause + latency)``, below the limit, and a fixed deadline failed it beyond a few
thousand namespaces. Here:

- **parallel**: at most ``concurrency`` deletes in flight, so the request latency does not
  lower the rate;
- **rate-limited**: at most ``qps`` deletes start per second on average (aiolimiter's leaky
  bucket, sized to a tenth of a second's deletes: a burst is at most ``qps / 10``, at least 1);
- **safe**: each delete carries the listed object's ``uid`` as a precondition, so a quota
  replaced since the list (a user's own quota of the same name, or a new object) is never
  deleted by mistake (409, left alone); 404 (already gone) is not an error;
- **bounded**: a deadline derived from the count, :func:`deadline_for`
  (``ceil(count / qps) + DEADLINE_MARGIN`` seconds); every request also has the short
  request timeout of :mod:`dynquota._k8s.timeouts`.

The same deletes remove the companion LimitRanges ``dynquota`` (``dynquota cleanup
--limit-ranges``: :func:`list_companion_limit_ranges`, ``delete_managed_quotas(...,
resource="limitranges")``), owned by the same rule as the quota: name and label.

A refusal for lack of rights (401, 403) stops everything at once (every other delete would be
refused the same way); a delete that fails with 429, 5xx or no answer is tried again after a
backoff (:data:`TRANSIENT_ATTEMPTS` in all), then recorded per namespace and left to the
caller's next round (``dynquota cleanup`` lists again); other refusals are recorded at once.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from aiolimiter import AsyncLimiter
from kubernetes_asyncio import client

from dynquota._k8s.backoff import Backoff
from dynquota._k8s.errors import ApiError, ConflictError, KubeError, NotFoundError
from dynquota._k8s.paginate import ListPage, paginate
from dynquota._k8s.request import call_api
from dynquota.kube.applied import AppliedClient
from dynquota.kube.quotas import MANAGED_QUOTA_NAME, MANAGED_SELECTOR
from dynquota.names import APPLIED_NAME, APPLIED_PLURAL, GROUP, MANAGED_LIMIT_RANGE_NAME, VERSION

__all__ = [
    "DEADLINE_MARGIN",
    "TRANSIENT_ATTEMPTS",
    "CleanupReport",
    "ListedQuota",
    "Outcome",
    "Resource",
    "deadline_for",
    "delete_managed_quotas",
    "list_companion_limit_ranges",
    "list_managed_quotas",
]

DEADLINE_MARGIN: Final = 30.0
"""Seconds added to ``count / qps`` for the deadline: the last requests' latency (at most the
10 s request timeout each) and a slow start."""

TRANSIENT_ATTEMPTS: Final = 3
"""Attempts of one delete that fails with 429, 5xx or no answer (backoff 0.5 s, then 1 s,
jittered) before it is recorded as failed (and left to the next round's list)."""

Outcome = Literal["deleted", "gone", "replaced", "failed"]
"""What happened to one listed quota (see :class:`CleanupReport`)."""

Resource = Literal["resourcequotas", "limitranges", "applieddynamicquotas"]
"""What :func:`delete_managed_quotas` deletes: the managed quotas, or the companion
LimitRanges (both named ``dynquota``, labelled managed-by=dynquota)."""


@dataclass(frozen=True)
class ListedQuota:
    """A managed quota (or companion LimitRange) as listed: its ``namespace`` and ``uid`` (the
    delete's precondition)."""

    namespace: str
    uid: str


@dataclass
class CleanupReport:
    """What :func:`delete_managed_quotas` did, as namespace names.

    ``deleted``: the listed quota was deleted. ``gone``: it no longer existed (404).
    ``replaced``: a quota named ``dynquota`` exists there but is another object (its uid
    differs from the listed one), so the uid precondition refused the delete (409) and it was
    left alone. ``failed``: namespace -> error of a delete that failed otherwise (429, 5xx,
    no answer). ``left``: quotas not attempted, or whose delete was cut short, when the
    deadline passed (their outcome is unknown; the next list tells). ``seconds``: wall time.
    ``retries``: deletes tried again after a 429, 5xx or no answer.
    """

    deleted: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    left: list[str] = field(default_factory=list)
    seconds: float = 0.0
    retries: int = 0

    @property
    def done(self) -> int:
        """Quotas with a known outcome (deleted, gone, replaced or failed)."""
        return len(self.deleted) + len(self.gone) + len(self.replaced) + len(self.failed)

    def add(self, other: CleanupReport) -> None:
        """Append ``other``'s namespaces (and time) to this report; ``left`` is replaced."""
        self.deleted += other.deleted
        self.gone += other.gone
        self.replaced += other.replaced
        self.failed.update(other.failed)
        self.left = list(other.left)
        self.seconds += other.seconds
        self.retries += other.retries


def deadline_for(count: int, qps: float) -> float:
    """Seconds that deleting ``count`` quotas at ``qps`` per second may take:
    ``ceil(count / qps) + DEADLINE_MARGIN``. Raises ``ValueError`` if ``qps <= 0``."""
    if qps <= 0:
        raise ValueError(f"qps must be positive: {qps!r}")
    return math.ceil(count / qps) + DEADLINE_MARGIN


def _limiter(qps: float) -> AsyncLimiter:
    # a bucket of a tenth of a second's deletes (at least one), leaking qps per second: the
    # average is qps, a burst at most qps / 10 (a bucket of one loses rate to timer wake-ups)
    capacity = max(1.0, qps / 10)
    return AsyncLimiter(capacity, capacity / qps)


async def _list_managed(
    api_client: client.ApiClient, resource: str, name: str, page_size: int
) -> list[ListedQuota]:
    """The namespace and uid of every ``resource`` (``resourcequotas`` or ``limitranges``)
    named ``name`` with the managed-by label, cluster-wide, paginated; a consistent read."""
    core: Any = client.CoreV1Api(api_client)
    list_all = (
        core.list_resource_quota_for_all_namespaces
        if resource == "resourcequotas"
        else core.list_limit_range_for_all_namespaces
    )

    async def fetch(token: str | None) -> ListPage:
        model = await call_api(
            "list",
            resource,
            lambda t: list_all(
                label_selector=MANAGED_SELECTOR,
                field_selector=f"metadata.name={name}",
                limit=page_size,
                _continue=token,
                _request_timeout=t,
            ),
        )
        return ListPage.from_model(model, api_client.sanitize_for_serialization)

    found: list[ListedQuota] = []
    async for page in paginate(fetch):
        for item in page.items:
            metadata = item.get("metadata") or {}
            found.append(
                ListedQuota(str(metadata.get("namespace") or ""), str(metadata.get("uid") or ""))
            )
    return found


async def list_managed_quotas(
    api_client: client.ApiClient, page_size: int = 500
) -> list[ListedQuota]:
    """Every managed quota in the cluster: ResourceQuotas named ``dynquota`` labelled
    ``app.kubernetes.io/managed-by=dynquota`` (label and field selectors), paginated by
    ``page_size``. A consistent read (no ``resourceVersion``: never the watch cache).

    Raises: ``ApiError`` (e.g. ``ForbiddenError``) / ``TransportError``.
    """
    return await _list_managed(api_client, "resourcequotas", MANAGED_QUOTA_NAME, page_size)


async def list_companion_limit_ranges(
    api_client: client.ApiClient, page_size: int = 500
) -> list[ListedQuota]:
    """Every companion LimitRange in the cluster: LimitRanges named ``dynquota`` labelled
    ``app.kubernetes.io/managed-by=dynquota`` (label and field selectors: one named
    ``dynquota`` without the label is someone else's and never listed), paginated by
    ``page_size``, a consistent read.

    Raises: ``ApiError`` (e.g. ``ForbiddenError``) / ``TransportError``.
    """
    return await _list_managed(api_client, "limitranges", MANAGED_LIMIT_RANGE_NAME, page_size)


async def list_tenant_projections(
    api_client: client.ApiClient, page_size: int = 500
) -> list[ListedQuota]:
    """Every tenant projection (AppliedDynamicQuota ``dynquota`` with the managed-by label),
    a consistent paginated read; none when its CRD is not installed (a release before it).

    Raises: ``ApiError`` (e.g. ``ForbiddenError``) / ``TransportError``.
    """
    try:
        found = await AppliedClient(api_client).list_managed(page_size)
    except NotFoundError:
        return []
    return [ListedQuota(o.namespace, o.uid) for o in found]


async def delete_managed_quotas(
    api_client: client.ApiClient,
    quotas: Sequence[ListedQuota],
    *,
    qps: float,
    concurrency: int = 16,
    deadline: float | None = None,
    on_result: Callable[[ListedQuota, Outcome, str], None] | None = None,
    on_progress: Callable[[CleanupReport, int], None] | None = None,
    progress_interval: float = 5.0,
    on_retry: Callable[[ListedQuota, int, str], None] | None = None,
    resource: Resource = "resourcequotas",
    dry_run: bool = False,
) -> CleanupReport:
    """Delete each of ``quotas`` with its ``uid`` as precondition, in parallel and
    rate-limited (see the module docstring).

    Args:
        api_client: a configured ``kubernetes_asyncio.client.ApiClient`` (not closed here).
        quotas: as listed by :func:`list_managed_quotas` (or, with ``resource="limitranges"``,
            by :func:`list_companion_limit_ranges`; ``"applieddynamicquotas"``:
            :func:`list_tenant_projections`).
        qps: at most this many deletes start per second (> 0).
        concurrency: at most this many deletes in flight (>= 1).
        deadline: seconds for all of them; default :func:`deadline_for` the count. When it
            passes, the deletes in flight are cancelled and the rest is not attempted:
            ``report.left`` names them.
        on_result: called with ``(quota, outcome, detail)`` after each delete (``detail``: the
            error of a failure, else ``""``).
        on_progress: called with ``(report so far, len(quotas))`` every ``progress_interval``
            seconds while deleting, and once at the end.
        on_retry: called with ``(quota, failed attempts so far, error)`` before a delete that
            failed with 429, 5xx or no answer is tried again.
        resource: ``resourcequotas`` (the managed quotas) or ``limitranges`` (the companion
            LimitRanges named ``dynquota``).
        dry_run: send server-side dry-run deletes (``dryRun: [All]`` in the DeleteOptions):
            authorization and every admission policy and webhook judge each delete, nothing
            is deleted; an outcome ``deleted`` then means "would be deleted" (``dynquota
            cleanup`` checks every delete so before it makes any).

    Returns: a :class:`CleanupReport`.

    Raises:
        ApiError: 401 or 403 (the other deletes are cancelled; those done stay done).
        ValueError: ``qps <= 0`` or ``concurrency < 1``.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1: {concurrency!r}")
    budget = deadline_for(len(quotas), qps) if deadline is None else deadline
    limiter = _limiter(qps)
    core: Any = client.CoreV1Api(api_client)
    report = CleanupReport()
    pending = deque(quotas)
    in_flight: dict[int, ListedQuota] = {}
    fatal: list[ApiError] = []
    started = time.monotonic()

    def record(quota: ListedQuota, outcome: Outcome, detail: str = "") -> None:
        if outcome == "failed":
            report.failed[quota.namespace] = detail
        else:
            getattr(report, outcome).append(quota.namespace)
        if on_result is not None:
            on_result(quota, outcome, detail)

    if resource == "limitranges":
        remove, name = core.delete_namespaced_limit_range, MANAGED_LIMIT_RANGE_NAME
    elif resource == APPLIED_PLURAL:  # the tenant projections (AppliedDynamicQuota)
        custom: Any = client.CustomObjectsApi(api_client)

        def remove(name: str, namespace: str, **kw: Any) -> Any:
            return custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, APPLIED_PLURAL, name, **kw
            )

        name = APPLIED_NAME
    else:
        remove, name = core.delete_namespaced_resource_quota, MANAGED_QUOTA_NAME

    async def delete(quota: ListedQuota) -> None:
        body: dict[str, Any] = {"preconditions": {"uid": quota.uid}}
        if dry_run:
            # in the body: the apiserver reads a DELETE's options from its body when it has
            # one, and ignores the dryRun query parameter then
            body["dryRun"] = ["All"]
        backoff = Backoff(initial=0.5, maximum=4.0)
        while True:
            try:
                await call_api(
                    "delete",
                    resource,
                    lambda t: remove(name, quota.namespace, body=body, _request_timeout=t),
                )
            except NotFoundError:
                record(quota, "gone")
            except ConflictError:
                record(quota, "replaced")
            except KubeError as exc:
                if isinstance(exc, ApiError) and exc.status in (401, 403):
                    fatal.append(exc)
                    return
                retryable = not isinstance(exc, ApiError) or exc.retryable
                if retryable and backoff.failures + 1 < TRANSIENT_ATTEMPTS:
                    # 429 (API Priority and Fairness), 5xx, no answer: wait, then take a
                    # new slot from the limiter like any other request
                    delay = backoff.next_delay()
                    report.retries += 1
                    if on_retry is not None:
                        on_retry(quota, backoff.failures, str(exc))
                    await asyncio.sleep(delay)
                    await limiter.acquire()
                    continue
                record(quota, "failed", str(exc))
            else:
                record(quota, "deleted")
            return

    async def worker(slot: int) -> None:
        while pending and not fatal:
            await limiter.acquire()
            if not pending or fatal:
                return
            quota = pending.popleft()
            in_flight[slot] = quota
            await delete(quota)
            del in_flight[slot]  # not on cancellation: the deadline's report names it

    async def progress() -> None:
        while True:
            await asyncio.sleep(progress_interval)
            report.seconds = time.monotonic() - started
            if on_progress is not None:
                on_progress(report, len(quotas))

    reporter = asyncio.create_task(progress())
    try:
        async with asyncio.timeout(budget):
            await asyncio.gather(*(worker(i) for i in range(min(concurrency, len(quotas)))))
    except TimeoutError:
        report.left = [q.namespace for q in in_flight.values()] + [q.namespace for q in pending]
    finally:
        reporter.cancel()
        report.seconds = time.monotonic() - started
    if fatal:
        raise fatal[0]
    if on_progress is not None:
        on_progress(report, len(quotas))
    return report
