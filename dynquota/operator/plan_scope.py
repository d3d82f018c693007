"""What ``dynquota plan -n NS`` / ``-l SELECTOR`` reads: the named namespaces' own objects,
not the whole cluster's (I/O, read-only).

:func:`~dynquota.operator.plan_snapshot.read_cluster` lists every namespace, quota, LimitRange, pod
and ConfigMap of the cluster (6.1 s at 310 namespaces, issue 28), whatever the plan then
shows. A namespace's decision needs only: the ``kube-system`` kill switch, the policies
(cluster-scoped, few), the namespace itself, its quotas, its LimitRanges and its pods and
ConfigMaps; and, when it is labelled into a QuotaBudget (``dynquota.io/budget``), the same
of every member of that budget (a slice is computed from all members:
:func:`~dynquota.policy.budget.allocate`).
:func:`read_scope` reads exactly that, and falls back to :func:`read_cluster` when the scope
grows past :data:`SCOPED_LIMIT` namespaces (one cluster-wide list is then cheaper than four
lists per namespace). The snapshot it returns holds the scope's namespaces only;
:meth:`Plan.only <dynquota.operator.plan_model.Plan.only>` narrows what is shown.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from dynquota._k8s.errors import NotFoundError, TooManyRequestsError
from dynquota._k8s.reflector import Collection
from dynquota.kube.cluster import ClusterClient
from dynquota.kube.informer import KubeMetadataSource, UsageWatcher, WatchedResource
from dynquota.names import BUDGET_LABEL
from dynquota.operator.budgets import read_budget
from dynquota.operator.plan_snapshot import ClusterSnapshot, read_cluster
from dynquota.usage import CONFIGMAPS, POD_FIELD_SELECTOR, PODS

__all__ = ["SCOPED_LIMIT", "Scope", "read_scope"]

T = TypeVar("T")

TOO_MANY_TRIES: Final = 5
"""A 429 is tried again this many times at most, 1 s apart (the apiserver's Retry-After for
``storage is (re)initializing``, a CRD's watch cache starting; client-go retries 429s too)."""


async def _patient(call: Callable[[], Awaitable[T]]) -> T:
    """``call()``, tried again after 1 s on a 429, at most :data:`TOO_MANY_TRIES` times."""
    for _ in range(TOO_MANY_TRIES - 1):
        try:
            return await call()
        except TooManyRequestsError:
            await asyncio.sleep(1.0)  # the apiserver's Retry-After for these answers
    return await call()


SCOPED_LIMIT: Final = 20
"""Above this many namespaces to read (the asked ones and their budgets' members),
:func:`read_scope` reads the whole cluster instead (4 lists per namespace against 5
cluster-wide ones)."""


@dataclass(frozen=True)
class Scope:
    """Which namespaces a read command shows: ``names`` (``-n``, in order; empty: not
    given) and ``selector`` (``-l``, label-selector text; ``None``: not given). Neither: the
    whole cluster."""

    names: tuple[str, ...] = ()
    selector: str | None = None

    @property
    def everything(self) -> bool:
        """Whether the whole cluster is shown (``-A``, or neither ``-n`` nor ``-l``)."""
        return not self.names and self.selector is None


def _labels(namespace: Mapping[str, Any]) -> dict[str, str]:
    return dict((namespace.get("metadata") or {}).get("labels") or {})


def _name(namespace: Mapping[str, Any]) -> str:
    return str((namespace.get("metadata") or {}).get("name") or "")


async def read_scope(
    api: Any, scope: Scope, now: float | None = None
) -> tuple[ClusterSnapshot, list[str] | None]:
    """A :class:`~dynquota.operator.plan_snapshot.ClusterSnapshot` of ``scope``'s namespaces and the
    members of the budgets they are labelled into, through ``api`` (a kubernetes_asyncio
    ``ApiClient``), every request with the short timeout of :mod:`dynquota._k8s.timeouts`.

    Requests for ``-n NS`` (no budget selects it): ``GET`` kube-system, ``GET`` the
    namespace, ``LIST`` policies, ``LIST`` budgets, then in ``NS``: ``LIST`` resourcequotas,
    limitranges, pods (metadata only, non-terminal) and configmaps (metadata only): 8. A
    namespace named with ``-n`` that does not exist is left out (the caller reports it).
    The whole cluster (:func:`read_cluster`) when ``scope.everything`` or the scope exceeds
    :data:`SCOPED_LIMIT` namespaces.

    Returns the snapshot and the namespaces in scope that exist, sorted (``-n`` and ``-l``
    both given: those named that the selector matches; ``None`` for the whole cluster).

    Raises what :func:`read_cluster` raises.
    """
    if scope.everything:
        return await read_cluster(api, now), None
    cluster = ClusterClient(api)
    kube_system = await cluster.read_namespace("kube-system")
    namespaces: dict[str, Mapping[str, Any]] = {}
    for name in scope.names:
        try:
            namespaces[name] = await cluster.read_namespace(name)
        except NotFoundError:
            continue
    if scope.selector is not None:
        selected: dict[str, Mapping[str, Any]] = {
            _name(obj): obj for obj in await _list_namespaces(api, scope.selector)
        }
        if scope.names:
            namespaces = {n: obj for n, obj in namespaces.items() if n in selected}
        else:
            namespaces = selected
    shown = sorted(namespaces)
    policies = await _patient(cluster.list_policies)
    try:
        budgets = await _patient(cluster.list_budgets)
    except NotFoundError:
        budgets = []  # the QuotaBudget CRD is not served (as read_cluster)
    # A namespace is in budget B when labelled dynquota.io/budget=B (docs/budgets.md): a
    # slice needs every member of that budget, so they are read too.
    names_of_budgets = {record.name for record in map(read_budget, budgets)}
    wanted = sorted(
        {b for n in namespaces.values() if (b := _labels(n).get(BUDGET_LABEL)) in names_of_budgets}
    )
    for budget in wanted:
        for obj in await _list_namespaces(api, f"{BUDGET_LABEL}={budget}"):
            namespaces.setdefault(_name(obj), obj)
        if len(namespaces) > SCOPED_LIMIT:
            break
    if len(namespaces) > SCOPED_LIMIT:
        return await read_cluster(api, now), shown
    names = sorted(namespaces)
    quotas = await _per_namespace(api, names, "resourcequotas")
    limit_ranges = await _per_namespace(api, names, "limitranges")
    tally = await _tally(api, names, time.time() if now is None else now)
    snapshot = ClusterSnapshot(
        kube_system, [namespaces[n] for n in names], policies, quotas, tally, limit_ranges, budgets
    )
    return snapshot, shown


async def _list_namespaces(api: Any, selector: str) -> list[dict[str, Any]]:
    """The namespaces ``selector`` (label-selector text) matches: one paginated list."""
    return await Collection(api, "/api/v1/namespaces", label_selector=selector).list_all()


async def _per_namespace(api: Any, names: Iterable[str], resource: str) -> list[dict[str, Any]]:
    """Every ``resource`` (a core namespaced collection) of each namespace in ``names``."""
    items: list[dict[str, Any]] = []
    for name in names:
        items += await Collection(api, f"/api/v1/namespaces/{name}/{resource}").list_all()
    return items


async def _tally(api: Any, names: Sequence[str], when: float) -> dict[tuple[str, str], int]:
    """``(namespace, resource) -> count`` of the pods and ConfigMaps the quota charges in
    ``names``, as :func:`read_cluster` tallies them (the operator's informers, one
    metadata-only list each, no watch) but per namespace."""
    tally: dict[tuple[str, str], int] = {}
    for name in names:
        watched = (
            WatchedResource(PODS, f"/api/v1/namespaces/{name}/pods", POD_FIELD_SELECTOR),
            WatchedResource(CONFIGMAPS, f"/api/v1/namespaces/{name}/configmaps"),
        )
        usage = UsageWatcher([KubeMetadataSource(api, w) for w in watched])
        for informer in usage.informers.values():
            await informer.list_once()
        for resource, count in usage.usages(name, when).items():
            if count:
                tally[(name, resource)] = count
    return tally
