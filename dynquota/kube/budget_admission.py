"""The admission policy that closes the window before a budget's slice is enforced (issue #13).

Per QuotaBudget the operator owns one ValidatingAdmissionPolicy and one binding, both named
``dynquota-budget-slice-<budget>`` and labelled ``app.kubernetes.io/managed-by=dynquota``,
``app.kubernetes.io/component=budget-slice``. The policy has ``paramKind`` v1 ResourceQuota
and denies CREATE of the kinds the budget's keys charge (:func:`resource_rules`) while a
budgeted key is missing from ``params.status.hard`` or ``params.status.used``; the binding
has ``paramRef: {name: dynquota, parameterNotFoundAction: Deny}`` (no managed quota: denied)
and the budget's namespace selector narrowed to its members (:func:`binding_for`).
``docs/budgets.md`` ("The admission policy") has the protocol.

Builders here are pure; :class:`AdmissionClient` does the I/O (``fieldManager=dynquota``;
failures raised as :mod:`dynquota._k8s.errors` types).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes_asyncio import client

from dynquota._k8s.errors import NotFoundError
from dynquota._k8s.request import ApiCallObserver, call_api
from dynquota.kube.quotas import FIELD_MANAGER
from dynquota.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE, MANAGED_QUOTA_NAME

__all__ = [
    "COMPONENT",
    "NAME_PREFIX",
    "OWNED_SELECTOR",
    "AdmissionClient",
    "binding_for",
    "object_name",
    "policy_for",
    "resource_rules",
]

NAME_PREFIX = "dynquota-budget-slice-"
COMPONENT = "budget-slice"
COMPONENT_LABEL = "app.kubernetes.io/component"
BUDGET_LABEL = "dynquota.io/budget"
OWNED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE},{COMPONENT_LABEL}={COMPONENT}"
OPT_OUT_LABEL = "dynquota.io/managed"
NAME_LABEL = "kubernetes.io/metadata.name"

# Which objects' CREATE a quota key charges (core group unless a group is given): the table in
# docs/budgets.md. Upstream: pkg/quota/v1/evaluator/core/{pods,services,
# persistent_volume_claims}.go and the generic object-count evaluator (count/<resource>.<group>).
_CORE_KEYS: Mapping[str, str] = {
    "pods": "pods",
    "configmaps": "configmaps",
    "secrets": "secrets",
    "services": "services",
    "services.loadbalancers": "services",
    "services.nodeports": "services",
    "persistentvolumeclaims": "persistentvolumeclaims",
    "requests.storage": "persistentvolumeclaims",
    "replicationcontrollers": "replicationcontrollers",
    "cpu": "pods",
    "memory": "pods",
    "ephemeral-storage": "pods",
}
_POD_PREFIXES = ("requests.", "limits.")
_STORAGE_CLASS = re.compile(r"^[^/]+\.storageclass\.storage\.k8s\.io/")
_DEVICE_CLASS = re.compile(r"^[^/]+\.deviceclass\.resource\.k8s\.io/")


def key_resource(key: str) -> tuple[str, str] | None:
    """``(apiGroup, resource)`` whose CREATE the quota ``key`` charges, or ``None`` for a key
    this policy does not guard (``resourcequotas``: guarding it would deny the managed quota's
    own creation; ``count/`` of an unknown form). Pure."""
    if key in _CORE_KEYS:
        return ("", _CORE_KEYS[key])
    if key.startswith("count/"):
        resource, _, group = key[len("count/") :].partition(".")
        if not resource or resource == "resourcequotas":
            return None
        return (group, resource)
    if _STORAGE_CLASS.match(key):
        return ("", "persistentvolumeclaims")
    if _DEVICE_CLASS.match(key):
        return ("resource.k8s.io", "resourceclaims")
    if key.startswith(_POD_PREFIXES) or "/" in key:
        return ("", "pods")  # compute and extended resources are charged by pods
    return None


def resource_rules(keys: Iterable[str]) -> list[dict[str, Any]]:
    """``matchConstraints.resourceRules`` matching CREATE of every kind ``keys`` charge, one
    rule per API group, sorted (an empty list when no key is guarded). Pure."""
    by_group: dict[str, set[str]] = {}
    for key in keys:
        found = key_resource(key)
        if found is not None:
            by_group.setdefault(found[0], set()).add(found[1])
    return [
        {
            "apiGroups": [group],
            "apiVersions": ["*"],
            "resources": sorted(resources),
            "operations": ["CREATE"],
        }
        for group, resources in sorted(by_group.items())
    ]


def object_name(budget: str) -> str:
    """The name of ``budget``'s policy and binding."""
    return NAME_PREFIX + budget


def _metadata(budget: str) -> dict[str, Any]:
    return {
        "name": object_name(budget),
        "labels": {
            MANAGED_BY_LABEL: MANAGED_BY_VALUE,
            COMPONENT_LABEL: COMPONENT,
            BUDGET_LABEL: budget,
        },
    }


def policy_for(budget: str, keys: Iterable[str]) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy of ``budget`` guarding ``keys`` (decoded JSON). Pure."""
    ordered = sorted(set(keys))
    keys_cel = json.dumps(ordered)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _metadata(budget),
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": "v1", "kind": "ResourceQuota"},
            "matchConstraints": {"resourceRules": resource_rules(ordered)},
            "validations": [
                {
                    "expression": (
                        "has(params.status) && has(params.status.hard) "
                        "&& has(params.status.used) && "
                        f"{keys_cel}.all(k, k in params.status.hard && k in params.status.used)"
                    ),
                    "messageExpression": (
                        f"'dynquota: namespace ' + request.namespace + ' is in QuotaBudget "
                        f"{budget} and its slice of {', '.join(ordered)} is not enforced yet "
                        f"(ResourceQuota {MANAGED_QUOTA_NAME} lacks it in status.hard or "
                        "status.used); retry in a few seconds. If this lasts, check that a "
                        "DynamicQuotaPolicy manages the namespace and that dynquota runs.'"
                    ),
                    "reason": "Forbidden",
                }
            ],
        },
    }


def binding_for(
    budget: str, selector: Mapping[str, Any], excluded: Iterable[str]
) -> dict[str, Any]:
    """The binding of ``budget``'s policy: ``paramRef`` the quota ``dynquota`` with
    ``parameterNotFoundAction: Deny``, and the budget's ``selector`` (decoded JSON, camelCase)
    narrowed to exclude namespaces labelled ``dynquota.io/managed=false`` and the namespaces
    named in ``excluded`` (selected but not members: no policy, frozen, system). Pure."""
    expressions = [dict(e) for e in selector.get("matchExpressions") or ()]
    expressions.append({"key": OPT_OUT_LABEL, "operator": "NotIn", "values": ["false"]})
    names = sorted(set(excluded))
    if names:
        expressions.append({"key": NAME_LABEL, "operator": "NotIn", "values": names})
    namespace_selector: dict[str, Any] = {"matchExpressions": expressions}
    if selector.get("matchLabels"):
        namespace_selector["matchLabels"] = dict(selector["matchLabels"])
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": _metadata(budget),
        "spec": {
            "policyName": object_name(budget),
            "validationActions": ["Deny"],
            "paramRef": {"name": MANAGED_QUOTA_NAME, "parameterNotFoundAction": "Deny"},
            "matchResources": {"namespaceSelector": namespace_selector},
        },
    }


class AdmissionClient:
    """Writes and removes the budgets' policies and bindings.

    Args:
        api_client: a configured kubernetes_asyncio ``ApiClient`` (not closed here).
        observer: hears ``(verb, resource, status)`` after every call.
    """

    def __init__(
        self, api_client: client.ApiClient, observer: ApiCallObserver | None = None
    ) -> None:
        self._api: Any = client.AdmissionregistrationV1Api(api_client)
        self._observer = observer

    async def apply(self, policy: Mapping[str, Any], binding: Mapping[str, Any]) -> None:
        """Create or replace (by JSON merge-patch of ``spec`` and labels) the policy, then the
        binding (a binding never refers to a policy not yet written). Raises ``ApiError``,
        ``TransportError``."""
        await self._apply("validatingadmissionpolicies", "validating_admission_policy", policy)
        await self._apply(
            "validatingadmissionpolicybindings", "validating_admission_policy_binding", binding
        )

    async def _apply(self, resource: str, method: str, body: Mapping[str, Any]) -> None:
        name = body["metadata"]["name"]
        patch = {"metadata": {"labels": body["metadata"]["labels"]}, "spec": body["spec"]}
        try:
            await call_api(
                "patch",
                resource,
                lambda t: getattr(self._api, f"patch_{method}")(
                    name,
                    patch,
                    field_manager=FIELD_MANAGER,
                    _content_type="application/merge-patch+json",
                    _request_timeout=t,
                ),
                self._observer,
            )
        except NotFoundError:
            await call_api(
                "create",
                resource,
                lambda t: getattr(self._api, f"create_{method}")(
                    dict(body), field_manager=FIELD_MANAGER, _request_timeout=t
                ),
                self._observer,
            )

    async def list_owned(self) -> list[str]:
        """Names of the owned bindings and policies (label selector, one LIST each), bindings
        first. Raises ``ApiError``, ``TransportError``."""
        names: list[str] = []
        for resource, method in (
            ("validatingadmissionpolicybindings", "validating_admission_policy_binding"),
            ("validatingadmissionpolicies", "validating_admission_policy"),
        ):
            answer = await call_api(
                "list",
                resource,
                lambda t: getattr(self._api, f"list_{method}")(  # noqa: B023 (awaited at once)
                    label_selector=OWNED_SELECTOR, _request_timeout=t
                ),
                self._observer,
            )
            for item in answer.items or []:
                name = item.metadata.name
                if name.startswith(NAME_PREFIX) and name not in names:
                    names.append(name)
        return names

    async def remove(self, name: str) -> None:
        """Delete the binding ``name``, then the policy ``name`` (404 ignored): the binding
        first, so nothing is left that refers to a missing policy. Raises ``ApiError``,
        ``TransportError``."""
        for resource, method in (
            ("validatingadmissionpolicybindings", "validating_admission_policy_binding"),
            ("validatingadmissionpolicies", "validating_admission_policy"),
        ):
            with contextlib.suppress(NotFoundError):
                await call_api(
                    "delete",
                    resource,
                    lambda t: getattr(self._api, f"delete_{method}")(  # noqa: B023 (awaited at once)
                        name, _request_timeout=t
                    ),
                    self._observer,
                )

    async def remove_all(self) -> int:
        """Delete every owned binding (first) and policy; returns how many names were removed.
        Raises ``ApiError``, ``TransportError``."""
        names = await self.list_owned()
        for name in names:
            await self.remove(name)
        return len(names)
