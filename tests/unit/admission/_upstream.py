"""What the admission tests share: the group/resources and clock they use, a quota built from
strings, ``check_request`` with the registry's evaluator, the text of amounts, and the pod
builders of the ports of upstream's ``pods_test.go`` tables (``test_upstream_pods_tables.py``,
``test_upstream_pods_scopes.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from dynquota.admission import (
    AdmissionAttributes,
    GroupResource,
    LimitedResource,
    PodEvaluator,
    Registry,
    ResourceQuota,
    ScopedResourceSelectorRequirement,
    check_request,
)
from dynquota.quantity import parse_quantity

NOW = 1_800_000_000.0
PODS = GroupResource("", "pods")
SERVICES = GroupResource("", "services")
PVCS = GroupResource("", "persistentvolumeclaims")
CONFIGMAPS = GroupResource("", "configmaps")
WIDGETS = GroupResource("example.com", "widgets")


def make_quota(
    hard: Mapping[str, str],
    used: Mapping[str, str] | None = None,
    *,
    name: str = "quota",
    namespace: str = "test",
    resource_version: str = "124",
    scopes: tuple[str, ...] = (),
    selector: tuple[ScopedResourceSelectorRequirement, ...] = (),
) -> ResourceQuota:
    """A quota from strings (upstream's tests: namespace ``test``, resourceVersion ``124``)."""
    return ResourceQuota(
        namespace=namespace,
        name=name,
        resource_version=resource_version,
        hard={k: parse_quantity(v) for k, v in hard.items()},
        used={k: parse_quantity(v) for k, v in (used or {}).items()},
        scopes=scopes,
        scope_selector=selector,
    )


def check(
    quotas: Sequence[ResourceQuota], a: AdmissionAttributes, limited: Sequence[LimitedResource] = ()
) -> list[ResourceQuota]:
    """``check_request`` with the registry's evaluator of ``a.resource`` at :data:`NOW`."""
    return check_request(quotas, a, Registry().get(a.resource), NOW, limited)


def text(amounts: Mapping[str, Any]) -> dict[str, str]:
    """``{name: str(amount)}`` sorted by name."""
    return {k: str(v) for k, v in sorted(amounts.items())}


def used_text(q: ResourceQuota) -> dict[str, str]:
    """:func:`text` of ``q.used``."""
    return text(q.used)


# --- pods_test.go's tables ----------------------------------------------------------------

EV = PodEvaluator()


def c(
    name: str = "", requests: dict[str, str] | None = None, limits: dict[str, str] | None = None
) -> dict[str, Any]:
    """A container (upstream's are mostly unnamed)."""
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "resources": resources}


def pod(
    containers: list[dict[str, Any]] = (),  # type: ignore[assignment]
    init: list[dict[str, Any]] = (),  # type: ignore[assignment]
    meta: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod of ``containers`` and ``init`` containers, ``spec`` fields added."""
    out: dict[str, Any] = {
        "metadata": meta or {},
        "spec": {"containers": list(containers), "initContainers": list(init), **spec},
    }
    if status is not None:
        out["status"] = status
    return out


def iso(t: float) -> str:
    """``t`` (seconds since the epoch) as an RFC 3339 time."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def base(**extra: str) -> dict[str, str]:
    """The usage every charged pod has (``count/pods``, ``pods``) and ``extra``."""
    return {"count/pods": "1", "pods": "1", **extra}
