"""``dynquota plan``: what the operator would do now, per namespace and resource (read-only).

:func:`read_cluster` reads, with the official sync ``kubernetes`` client and never writing,
everything a decision needs: the ``kube-system`` kill switch, namespaces, policies, the
ResourceQuotas named ``dynquota``, and metadata-only lists of non-terminal pods and of
ConfigMaps (counted with :mod:`dynquota.usage`'s quota semantics). :func:`compute_plan` then
runs :func:`dynquota.policy.decide` for each namespace.

The plan has no usage history: it takes the peak as the current usage ``U``, and assumes the
operator has been running for longer than every cooldown. The operator itself may therefore
wait longer before a downscale than the plan shows (never shorter).
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from dynquota.kube.quotas import MANAGED_QUOTA_NAME, QuotaSnapshot
from dynquota.policy import (
    KILL_SWITCH,
    OVERRIDE_EXPIRES_AT,
    TRACKED_RESOURCES,
    NamespaceInfo,
    QuotaState,
    decide,
    format_time,
    govern,
    parse_kill_switch,
    target,
    validate_policy,
)
from dynquota.quantity import QuantityError, parse_quantity
from dynquota.usage import POD_FIELD_SELECTOR, charge

__all__ = ["ClusterSnapshot", "PlanRow", "compute_plan", "format_table", "read_cluster"]

_LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


@dataclass
class ClusterSnapshot:
    """What :func:`compute_plan` needs, as decoded JSON objects (camelCase keys).

    ``tally`` maps ``(namespace, resource)`` to the count the quota charges now.
    """

    kube_system: Mapping[str, Any]
    namespaces: list[Mapping[str, Any]]
    policies: list[Mapping[str, Any]]
    quotas: list[Mapping[str, Any]]
    tally: Mapping[tuple[str, str], int] = field(default_factory=dict)


@dataclass(frozen=True)
class PlanRow:
    """One line of the plan. Counts are ints (``None``: unknown/absent); ``next`` is the
    action (``create``, ``patch``, ``delete``, ``nothing``) and ``why`` the reason."""

    namespace: str
    resource: str
    tally: int | None
    status_used: int | None
    hard: int | None
    target: int | None
    next: str
    why: str


def _count(text: object) -> int | None:
    try:
        return parse_quantity(str(text)).ceil()
    except QuantityError:
        return None


def compute_plan(
    snapshot: ClusterSnapshot,
    *,
    now: float | None = None,
    operator_namespace: str = "",
    override_ttl: int = 7 * 24 * 3600,
    excluded: frozenset[str] = frozenset(),
) -> list[PlanRow]:
    """Decide every namespace of ``snapshot`` as the operator would at ``now`` (default: the
    clock). Excluded namespaces (system, the operator's own, terminating) are left out.
    Pure apart from reading the clock when ``now`` is omitted."""
    when = time.time() if now is None else now
    annotations = (snapshot.kube_system.get("metadata") or {}).get("annotations") or {}
    kill_switch = parse_kill_switch(annotations.get(KILL_SWITCH)).engaged
    policies = [validate_policy(p) for p in snapshot.policies]
    quotas: dict[str, QuotaSnapshot] = {}
    for obj in snapshot.quotas:
        read = QuotaSnapshot.from_object(obj)
        if read.name == MANAGED_QUOTA_NAME:
            quotas[read.namespace] = read
    rows: list[PlanRow] = []
    for obj in sorted(snapshot.namespaces, key=lambda o: str(o["metadata"]["name"])):
        meta = obj.get("metadata") or {}
        name = str(meta["name"])
        info = NamespaceInfo(
            name, dict(meta.get("labels") or {}), bool(meta.get("deletionTimestamp"))
        )
        governance = govern(info, policies, operator_namespace, name in excluded)
        if governance.kind == "excluded":
            continue
        found = quotas.get(name)
        if found is not None and not found.managed:
            for resource in TRACKED_RESOURCES:
                rows.append(
                    PlanRow(
                        name,
                        resource,
                        snapshot.tally.get((name, resource), 0),
                        found.used_int(resource),
                        found.hard_int(resource),
                        None,
                        "nothing",
                        "a quota named dynquota without the managed-by label exists: left alone",
                    )
                )
            continue
        quota = found
        usage: dict[str, int] = {}
        for resource in TRACKED_RESOURCES:
            used = quota.used_int(resource) if quota is not None else None
            usage[resource] = max(snapshot.tally.get((name, resource), 0), used or 0)
        state = None
        if quota is not None:
            hard = {}
            for key, text in quota.spec_hard.items():
                try:
                    hard[key] = parse_quantity(text)
                except QuantityError:
                    continue
            state = QuotaState(hard, dict(quota.annotations))
        decision = decide(
            governance=governance,
            usage=usage,
            peak=usage,
            quota=state,
            kill_switch=kill_switch,
            now=when,
            started_at=0.0,
            override_ttl=override_ttl,
        )
        by_resource = {c.resource: c.reason for c in decision.changes}
        general = "; ".join(decision.notes) or governance.reason
        if decision.requeue_at is not None and not decision.changes:
            general += f"; next check at {format_time(math.ceil(decision.requeue_at))}"
        if quota is not None and OVERRIDE_EXPIRES_AT in quota.annotations:
            general += f"; override until {quota.annotations[OVERRIDE_EXPIRES_AT]}"
        for warning in decision.warnings:
            general += f"; warning: {warning}"
        for resource in TRACKED_RESOURCES:
            profile = governance.profiles.get(resource)
            rows.append(
                PlanRow(
                    name,
                    resource,
                    snapshot.tally.get((name, resource), 0),
                    quota.used_int(resource) if quota is not None else None,
                    quota.hard_int(resource) if quota is not None else None,
                    target(usage[resource], profile) if profile is not None else None,
                    decision.action,
                    by_resource.get(resource, general),
                )
            )
    return rows


def format_table(rows: list[PlanRow]) -> str:
    """The plan as an aligned text table (``-`` for unknown values)."""
    header = ("NAMESPACE", "RESOURCE", "TALLY", "STATUS.USED", "HARD", "TARGET", "NEXT", "WHY")
    table = [header] + [
        (
            r.namespace,
            r.resource,
            *("-" if v is None else str(v) for v in (r.tally, r.status_used, r.hard, r.target)),
            r.next,
            r.why,
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line[:-1])) + "  " + line[-1]
        for line in table
    )


def _get(api: Any, path: str, query: list[tuple[str, str]], accept: str) -> Any:
    """One GET through the sync client's low-level API; the decoded JSON body.

    Raises ``ApiException`` for a non-2xx answer."""
    from kubernetes.client.exceptions import ApiException

    method, url, headers, _, _ = api.param_serialize(
        "GET",
        path,
        query_params=query,
        header_params={"Accept": accept},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, url, header_params=headers)
    data = response.read()
    if not 200 <= response.status < 300:
        raise ApiException(http_resp=response)
    return json.loads(data)


def _pages(api: Any, path: str, query: list[tuple[str, str]], accept: str) -> Iterator[Any]:
    token = ""
    while True:
        params = [*query, ("limit", "500")] + ([("continue", token)] if token else [])
        page = _get(api, path, params, accept)
        yield from page.get("items") or []
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return


def read_cluster(api: Any, now: float | None = None) -> ClusterSnapshot:
    """Read a :class:`ClusterSnapshot` through ``api`` (a ``kubernetes.client.ApiClient``).

    Only GET requests. Raises ``kubernetes.client.exceptions.ApiException`` (404 on the
    policies means the CRD is missing; 403 a missing permission) or urllib3 errors when the
    cluster cannot be reached.
    """
    when = time.time() if now is None else now
    plain = "application/json"
    kube_system = _get(api, "/api/v1/namespaces/kube-system", [], plain)
    namespaces = list(_pages(api, "/api/v1/namespaces", [], plain))
    policies = list(_pages(api, "/apis/dynquota.io/v1alpha1/dynamicquotapolicies", [], plain))
    quotas = list(
        _pages(
            api,
            "/api/v1/resourcequotas",
            [("fieldSelector", f"metadata.name={MANAGED_QUOTA_NAME}")],
            plain,
        )
    )
    tally: Counter[tuple[str, str]] = Counter()
    for resource, query in (
        ("pods", [("fieldSelector", POD_FIELD_SELECTOR)]),
        ("configmaps", []),
    ):
        for item in _pages(api, f"/api/v1/{resource}", query, _LIST_ACCEPT):
            try:
                expiry = charge(resource, item)
            except ValueError:  # malformed deletionTimestamp: keep charging, like the operator
                expiry = math.inf
            if expiry is not None and when <= expiry:
                tally[(str(item["metadata"]["namespace"]), resource)] += 1
    return ClusterSnapshot(kube_system, namespaces, policies, quotas, dict(tally))
