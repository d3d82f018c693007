"""A shifting object load over a tenant's namespaces and a snapshot sampler, for tenant budgets
(issue #13, docs/budgets.md): the invariant tests of ``tests/integration/test_budgets.py`` and
the benchmark ``tests/bench/test_budget_bench.py`` use them.

The load creates and deletes objects of one counted kind (:data:`KINDS`: ``pods``,
``configmaps`` or ``secrets``); the sampler sums the budgeted key's commitments from one LIST.

Both use the official sync client of an :class:`~dynquota.testing.operator.OperatorCluster`
from plain threads; every request carries a timeout (:data:`REQUEST_TIMEOUT`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from dynquota.testing.operator import PAUSE, OperatorCluster

REQUEST_TIMEOUT = 30.0
"""Seconds any one request of the load or the sampler may take."""

LOAD_LABEL = "dq-load"
"""The label (value: the run's id) on every object the load creates."""


@dataclass(frozen=True)
class Kind:
    """How the load makes, lists and deletes one kind of counted object (the quota key of the
    same name): the official client's method names on ``CoreV1Api`` and a body factory."""

    create: str
    list_namespaced: str
    list_all: str
    delete: str
    body: Callable[[dict[str, str]], dict[str, Any]]


KINDS: dict[str, Kind] = {
    "pods": Kind(
        "create_namespaced_pod", "list_namespaced_pod", "list_pod_for_all_namespaces",
        "delete_namespaced_pod",
        lambda labels: {
            "metadata": {"generateName": "p-", "labels": labels},
            "spec": {"containers": [{"name": "c", "image": PAUSE}]},
        },
    ),
    "configmaps": Kind(
        "create_namespaced_config_map", "list_namespaced_config_map",
        "list_config_map_for_all_namespaces", "delete_namespaced_config_map",
        lambda labels: {"metadata": {"generateName": "cm-", "labels": labels}, "data": {"k": "v"}},
    ),
    "secrets": Kind(
        "create_namespaced_secret", "list_namespaced_secret", "list_secret_for_all_namespaces",
        "delete_namespaced_secret",
        lambda labels: {
            "metadata": {"generateName": "s-", "labels": labels}, "stringData": {"k": "v"}
        },
    ),
}  # fmt: skip
"""The kinds a :class:`Load` can make (each the object-count quota key of its name)."""


def hard_of(quota: Any, part: str, key: str = "pods") -> int | None:
    """The count ``key`` of a ResourceQuota's ``spec.hard`` (``part="spec"``), ``status.hard``
    (``"status"``) or ``status.used`` (``"used"``); ``None`` when the key is not there (or
    ``quota`` is ``None``)."""
    if quota is None:
        return None
    if part == "spec":
        values = quota.spec.hard if quota.spec else None
    elif part == "status":
        values = quota.status.hard if quota.status else None
    else:
        values = quota.status.used if quota.status else None
    values = values or {}
    return int(values[key]) if key in values else None


def pods_of(quota: Any, part: str) -> int | None:
    """:func:`hard_of` for ``pods``."""
    return hard_of(quota, part, "pods")


@dataclass(frozen=True)
class Denial:
    """One create refused by quota admission (403): when (monotonic s), in which namespace, and
    the pods the load held in the tenant then (its own creates minus its own deletes)."""

    at: float
    namespace: str
    held: int


@dataclass(frozen=True)
class Deletion:
    """One pod deleted by the load: when the DELETE returned (epoch s, comparable with
    :class:`~tests.bench.figures.QuotaWatch`), in which namespace, and the pods the load held
    then in each namespace."""

    at: float
    namespace: str
    held: dict[str, int]


@dataclass
class Load:
    """Creators and deleters of ``kind`` objects per namespace, switched per phase (threads,
    official client).

    A creator creates objects labelled ``dq-load=<run>`` until stopped, or until its namespace
    holds ``demand`` of them (then it waits 50 ms and looks again; ``None``: no cap); a create
    refused (403: quota admission, or a budget's slice policy) waits up to 0.1 s on the stop
    flag before the next (what a controller's backoff does); a name conflict (409,
    ``generateName``, or quota admission losing a race on ``status.used``) is retried. A
    deleter deletes the namespace's load objects one by one (pods: grace period 0).

    ``held`` counts per namespace the load's own successful creates minus its successful
    deletes (the objects it holds, without a LIST); ``peak_held`` is the most held in
    ``tenant`` at once (counted after every change)."""

    cluster: OperatorCluster
    run: str
    tenant: list[str]
    creators: int = 3
    demand: int | None = None
    kind: str = "pods"
    created: int = 0
    held: dict[str, int] = field(default_factory=dict)
    peak_held: int = 0
    denials: list[Denial] = field(default_factory=list)
    deletions: list[Deletion] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def tenant_held(self) -> int:
        """Objects the load holds in ``tenant`` now (call with the lock held)."""
        return sum(self.held.get(ns, 0) for ns in self.tenant)

    def _create(self, ns: str, stop: threading.Event) -> None:
        kind = KINDS[self.kind]
        create = getattr(self.cluster.core, kind.create)
        body = kind.body({LOAD_LABEL: self.run})
        while not stop.is_set():
            if self.demand is not None:
                with self._lock:
                    full = self.held.get(ns, 0) >= self.demand
                if full:
                    stop.wait(0.05)
                    continue
            try:
                create(ns, body, _request_timeout=REQUEST_TIMEOUT)
            except ApiException as exc:
                if exc.status == 409:
                    continue
                if exc.status != 403:
                    raise
                with self._lock:
                    self.denials.append(Denial(time.monotonic(), ns, self.tenant_held()))
                stop.wait(0.1)
                continue
            with self._lock:
                self.created += 1
                self.held[ns] = self.held.get(ns, 0) + 1
                self.peak_held = max(self.peak_held, self.tenant_held())

    def _delete(self, ns: str, stop: threading.Event) -> None:
        kind = KINDS[self.kind]
        listing = getattr(self.cluster.core, kind.list_namespaced)
        delete = getattr(self.cluster.core, kind.delete)
        grace = {"grace_period_seconds": 0} if self.kind == "pods" else {}
        while not stop.is_set():
            found = listing(
                ns, label_selector=f"{LOAD_LABEL}={self.run}", _request_timeout=REQUEST_TIMEOUT
            )
            if not found.items:
                stop.wait(0.1)
            for item in found.items:
                if stop.is_set():
                    return
                with contextlib.suppress(ApiException):  # 404: gone already, not ours to count
                    delete(item.metadata.name, ns, _request_timeout=REQUEST_TIMEOUT, **grace)
                    with self._lock:
                        self.held[ns] = self.held.get(ns, 0) - 1
                        self.deletions.append(Deletion(time.time(), ns, dict(self.held)))

    def phase(self, plan: dict[str, str], seconds: float) -> None:
        """Run ``plan`` (namespace -> ``"create"``, ``"delete"`` or ``"idle"``) for ``seconds``,
        ``creators`` threads per creating namespace and one per deleting one; returns once
        every thread has ended (each within one request timeout)."""
        with self.running(plan):
            threading.Event().wait(seconds)

    @contextlib.contextmanager
    def running(self, plan: dict[str, str]) -> Iterator[None]:
        """``with load.running(plan):`` the plan's threads run inside the block (see
        :meth:`phase`); stopped and joined when it ends, also when it raises."""
        stop = threading.Event()
        threads = []
        for ns, what in plan.items():
            if what == "create":
                threads += [
                    threading.Thread(target=self._create, args=(ns, stop), daemon=True)
                    for _ in range(self.creators)
                ]
            elif what == "delete":
                threads.append(threading.Thread(target=self._delete, args=(ns, stop), daemon=True))
        for t in threads:
            t.start()
        try:
            yield
        finally:
            stop.set()
            for t in threads:
                t.join(REQUEST_TIMEOUT + 5)

    def denied(self, ns: str | None = None) -> int:
        """Creates refused so far (in ``ns``; ``None``: anywhere)."""
        with self._lock:
            return sum(1 for d in self.denials if ns is None or d.namespace == ns)


class Sampler:
    """Every 50 ms: ONE LIST of the ResourceQuotas named ``quota`` (none when ``quota`` is
    ``None``: a tenant without a limit) and ONE LIST of the load's ``key`` objects, a snapshot
    each (per-namespace GETs are none). Records the samples whose sum over ``namespaces`` of
    max(spec.hard, status.hard) for ``key`` exceeds ``budget`` (``over``), the largest such sum
    seen (``most_committed``), and the most objects seen at once (``most``: the load's plus
    those that were in the namespaces before the sampler started and are not the load's, such
    as each namespace's ``kube-root-ca.crt`` ConfigMap, counted once at the start). Under load
    a sample takes longer than 50 ms; the next starts at once then. With ``keep``, every
    sample's quotas are kept in ``snapshots``: (monotonic s, namespace -> (spec.hard,
    status.hard) of ``key``, ``None`` where absent).

    Use as a context manager (the thread runs inside the ``with``)."""

    def __init__(
        self,
        cluster: OperatorCluster,
        namespaces: list[str],
        run: str,
        budget: int,
        quota: str | None = "dynquota",
        key: str = "pods",
        keep: bool = False,
    ) -> None:
        self.c = cluster
        self.namespaces = set(namespaces)
        self.run = run
        self.budget = budget
        self.quota = quota
        self.key = key
        self.keep = keep
        self.snapshots: list[tuple[float, dict[str, tuple[int | None, int | None]]]] = []
        self.samples = 0
        self.over: list[tuple[float, dict[str, int]]] = []
        self.most = 0
        self.most_committed = 0
        self.others = 0
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _commitments(self) -> dict[str, int]:
        if self.quota is None:
            return {}
        quotas = self.c.core.list_resource_quota_for_all_namespaces(
            field_selector=f"metadata.name={self.quota}", _request_timeout=REQUEST_TIMEOUT
        ).items
        commitments = {}
        seen = {}
        for q in quotas:
            if q.metadata.namespace in self.namespaces:
                spec, status = hard_of(q, "spec", self.key), hard_of(q, "status", self.key)
                seen[q.metadata.namespace] = (spec, status)
                commitments[q.metadata.namespace] = max(spec or 0, status or 0)
        if self.keep:
            self.snapshots.append((time.monotonic(), seen))
        return commitments

    def _count_others(self) -> int:
        """Objects of ``key``'s kind in ``namespaces`` that are not the load's (once)."""
        listing = getattr(self.c.core, KINDS[self.key].list_namespaced)
        return sum(
            1
            for ns in self.namespaces
            for item in listing(ns, _request_timeout=REQUEST_TIMEOUT).items
            if (item.metadata.labels or {}).get(LOAD_LABEL) != self.run
        )

    def _loop(self) -> None:
        listing = getattr(self.c.core, KINDS[self.key].list_all)
        try:
            while not self.stop.is_set():
                started = time.monotonic()
                commitments = self._commitments()
                items = listing(
                    label_selector=f"{LOAD_LABEL}={self.run}", _request_timeout=REQUEST_TIMEOUT
                ).items
                committed = sum(commitments.values())
                self.most_committed = max(self.most_committed, committed)
                if committed > self.budget:
                    self.over.append((time.monotonic(), commitments))
                live = sum(1 for p in items if p.metadata.namespace in self.namespaces)
                self.most = max(self.most, live + self.others)
                self.samples += 1
                self.stop.wait(max(0.0, 0.05 - (time.monotonic() - started)))
        except BaseException as exc:  # reported by __exit__: a sampler that died saw nothing
            self.error = exc

    def __enter__(self) -> Sampler:
        self.others = self._count_others()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(2 * REQUEST_TIMEOUT + 5)
        if self.error is not None and exc[0] is None:
            raise RuntimeError(f"the sampler failed: {self.error!r}") from self.error

    @property
    def most_pods(self) -> int:
        """:attr:`most` (the name the benchmark reads, from when the load made only pods)."""
        return self.most

    @property
    def overshoot(self) -> int:
        """Objects seen at once beyond ``budget`` (0 if never)."""
        return max(0, self.most - self.budget)
