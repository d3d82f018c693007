"""A shifting pod load over a tenant's namespaces and a snapshot sampler, for tenant budgets
(issue #13, docs/budgets.md): the benchmark ``tests/bench/test_budget_bench.py`` uses them; they
follow the load generator and the 50 ms LIST sampler of
``tests/integration/test_budgets.py`` (same pod body, same backoff, same snapshot rule).

Both use the official sync client of an :class:`~dynquota.testing.operator.OperatorCluster`
from plain threads; every request carries a timeout (:data:`REQUEST_TIMEOUT`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from dynquota.testing.operator import PAUSE, OperatorCluster

REQUEST_TIMEOUT = 30.0
"""Seconds any one request of the load or the sampler may take."""

LOAD_LABEL = "dq-load"
"""The label (value: the run's id) on every pod the load creates."""


def pods_of(quota: Any, part: str) -> int | None:
    """The ``pods`` count of a ResourceQuota's ``spec.hard`` (``part="spec"``), ``status.hard``
    (``"status"``) or ``status.used`` (``"used"``); ``None`` when the key is not there."""
    if part == "spec":
        values = quota.spec.hard if quota.spec else None
    elif part == "status":
        values = quota.status.hard if quota.status else None
    else:
        values = quota.status.used if quota.status else None
    values = values or {}
    return int(values["pods"]) if "pods" in values else None


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
    """Pod creators and deleters per namespace, switched per phase (threads, official client).

    A creator creates pods labelled ``dq-load=<run>`` until stopped, or until its namespace
    holds ``demand`` pods (then it waits 50 ms and looks again; ``None``: no cap); a create
    refused by quota (403) waits up to 0.1 s on the stop flag before the next (what a
    controller's backoff does); a name conflict (409, ``generateName``) is retried. A deleter
    deletes the namespace's load pods one by one, grace period 0.

    ``held`` counts per namespace the load's own successful creates minus its successful
    deletes (the pods it holds, without a LIST); ``peak_held`` is the most held in ``tenant``
    at once (counted after every change)."""

    cluster: OperatorCluster
    run: str
    tenant: list[str]
    creators: int = 3
    demand: int | None = None
    created: int = 0
    held: dict[str, int] = field(default_factory=dict)
    peak_held: int = 0
    denials: list[Denial] = field(default_factory=list)
    deletions: list[Deletion] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def tenant_held(self) -> int:
        """Pods the load holds in ``tenant`` now (call with the lock held)."""
        return sum(self.held.get(ns, 0) for ns in self.tenant)

    def _create(self, ns: str, stop: threading.Event) -> None:
        body = {
            "metadata": {"generateName": "p-", "labels": {LOAD_LABEL: self.run}},
            "spec": {"containers": [{"name": "c", "image": PAUSE}]},
        }
        while not stop.is_set():
            if self.demand is not None:
                with self._lock:
                    full = self.held.get(ns, 0) >= self.demand
                if full:
                    stop.wait(0.05)
                    continue
            try:
                self.cluster.core.create_namespaced_pod(ns, body, _request_timeout=REQUEST_TIMEOUT)
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
        while not stop.is_set():
            pods = self.cluster.core.list_namespaced_pod(
                ns, label_selector=f"{LOAD_LABEL}={self.run}", _request_timeout=REQUEST_TIMEOUT
            )
            if not pods.items:
                stop.wait(0.1)
            for pod in pods.items:
                if stop.is_set():
                    return
                with contextlib.suppress(ApiException):  # 404: gone already, not ours to count
                    self.cluster.core.delete_namespaced_pod(
                        pod.metadata.name,
                        ns,
                        grace_period_seconds=0,
                        _request_timeout=REQUEST_TIMEOUT,
                    )
                    with self._lock:
                        self.held[ns] = self.held.get(ns, 0) - 1
                        self.deletions.append(Deletion(time.time(), ns, dict(self.held)))

    def phase(self, plan: dict[str, str], seconds: float) -> None:
        """Run ``plan`` (namespace -> ``"create"``, ``"delete"`` or ``"idle"``) for ``seconds``,
        ``creators`` threads per creating namespace and one per deleting one; returns once
        every thread has ended (each within one request timeout)."""
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
        stop.wait(seconds)
        stop.set()
        for t in threads:
            t.join(REQUEST_TIMEOUT + 5)


class Sampler:
    """Every 50 ms: ONE LIST of the ResourceQuotas named ``quota`` (none when ``quota`` is
    ``None``: a tenant without a limit) and ONE LIST of the load's pods, a snapshot each
    (per-namespace GETs are none). Records the samples whose sum over ``namespaces`` of
    max(spec.hard, status.hard) for pods exceeds ``budget``, and the most pods seen at once.
    Under load a sample takes longer than 50 ms; the next starts at once then.

    Use as a context manager (the thread runs inside the ``with``)."""

    def __init__(
        self,
        cluster: OperatorCluster,
        namespaces: list[str],
        run: str,
        budget: int,
        quota: str | None = "dynquota",
    ) -> None:
        self.c = cluster
        self.namespaces = set(namespaces)
        self.run = run
        self.budget = budget
        self.quota = quota
        self.samples = 0
        self.over: list[tuple[float, dict[str, int]]] = []
        self.most_pods = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _commitments(self) -> dict[str, int]:
        if self.quota is None:
            return {}
        quotas = self.c.core.list_resource_quota_for_all_namespaces(
            field_selector=f"metadata.name={self.quota}", _request_timeout=REQUEST_TIMEOUT
        ).items
        commitments = {}
        for q in quotas:
            if q.metadata.namespace in self.namespaces:
                commitments[q.metadata.namespace] = max(
                    pods_of(q, "spec") or 0, pods_of(q, "status") or 0
                )
        return commitments

    def _loop(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            commitments = self._commitments()
            pods = self.c.core.list_pod_for_all_namespaces(
                label_selector=f"{LOAD_LABEL}={self.run}", _request_timeout=REQUEST_TIMEOUT
            ).items
            if sum(commitments.values()) > self.budget:
                self.over.append((time.monotonic(), commitments))
            live = sum(1 for p in pods if p.metadata.namespace in self.namespaces)
            self.most_pods = max(self.most_pods, live)
            self.samples += 1
            self.stop.wait(max(0.0, 0.05 - (time.monotonic() - started)))

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(2 * REQUEST_TIMEOUT + 5)

    @property
    def overshoot(self) -> int:
        """Pods seen at once beyond ``budget`` (0 if never)."""
        return max(0, self.most_pods - self.budget)
