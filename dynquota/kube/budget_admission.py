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
failures raised as :mod:`dynquota._k8s.errors` types). It writes and deletes only objects
carrying those labels (:func:`is_owned`): an object of the same name someone else created is
never taken over (:class:`~dynquota._k8s.errors.NotOwnedError`), and every write or delete is
conditional on the resourceVersion it just read.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from kubernetes_asyncio import client

from dynquota._k8s.errors import ConflictError, NotFoundError, NotOwnedError, RetryConflictError
from dynquota._k8s.request import ApiCallObserver, call_api, call_json
from dynquota.kube.quotas import FIELD_MANAGER
from dynquota.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE, MANAGED_QUOTA_NAME
from dynquota.policy.state import BUDGET

__all__ = [
    "COMPONENT",
    "NAME_PREFIX",
    "OWNED_SELECTOR",
    "AdmissionClient",
    "binding_for",
    "contains",
    "is_owned",
    "object_name",
    "policy_for",
    "resource_rules",
]

log = logging.getLogger(__name__)

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
                    # the budget's mark: a quota sized by the namespace's own policy before it
                    # joined has the keys, but not yet a slice of this budget
                    "expression": (
                        "has(params.metadata.annotations) "
                        f"&& {json.dumps(BUDGET)} in params.metadata.annotations "
                        f"&& params.metadata.annotations[{json.dumps(BUDGET)}] == "
                        f"{json.dumps(budget)} "
                        "&& has(params.status) && has(params.status.hard) "
                        "&& has(params.status.used) && "
                        f"{keys_cel}.all(k, k in params.status.hard && k in params.status.used)"
                    ),
                    "messageExpression": (
                        f"'dynquota: namespace ' + request.namespace + ' is in QuotaBudget "
                        f"{budget} and its slice of {', '.join(ordered)} is not enforced yet "
                        f"(ResourceQuota {MANAGED_QUOTA_NAME} is not yet written by the budget, "
                        "or lacks the key in status.hard or status.used); retry in a few "
                        "seconds. If this lasts, check that a DynamicQuotaPolicy manages the "
                        "namespace and that dynquota runs.'"
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


def is_owned(item: Mapping[str, Any]) -> bool:
    """Whether the decoded object ``item`` carries the labels dynquota puts on the policies
    and bindings it creates (what :data:`OWNED_SELECTOR` lists). Pure."""
    labels = (item.get("metadata") or {}).get("labels") or {}
    return bool(
        labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE
        and labels.get(COMPONENT_LABEL) == COMPONENT
    )


def contains(current: Any, desired: Any) -> bool:
    """Whether ``current`` (as the apiserver returns it) already holds everything ``desired``
    sets: every key of a desired map is in the current map with a containing value, a list
    has the same length with each element containing the desired one, any other value is
    equal. The apiserver's defaults (``matchPolicy``, a rule's ``scope``, empty selectors)
    are extra keys, so an unchanged object compares equal (no write at rest). Pure."""
    if isinstance(desired, Mapping):
        return isinstance(current, Mapping) and all(
            k in current and contains(current[k], v) for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(current, list)
            and len(current) == len(desired)
            and all(contains(c, d) for c, d in zip(current, desired, strict=True))
        )
    return bool(current == desired)


_KINDS: Mapping[str, tuple[str, str]] = {
    "ValidatingAdmissionPolicy": ("validatingadmissionpolicies", "validating_admission_policy"),
    "ValidatingAdmissionPolicyBinding": (
        "validatingadmissionpolicybindings",
        "validating_admission_policy_binding",
    ),
}
_REMOVAL_ORDER = ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy")
ATTEMPTS = 3
"""Reads per :meth:`AdmissionClient.apply` or :meth:`AdmissionClient.remove` when a
conditional write loses a race (as the reconcile's conflicts, docs/operator.md)."""


class AdmissionClient:
    """Writes and removes the budgets' policies and bindings, only ever the ones dynquota
    created (:func:`is_owned`), each write conditional on what was just read.

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
        """Make the policy, then the binding, what ``policy`` and ``binding`` (from
        :func:`policy_for`, :func:`binding_for`) say: both are read first (GET); if either
        exists without dynquota's labels nothing is written. Then each is created when absent,
        merge-patched (``spec`` and labels) conditional on the resourceVersion just read when
        it differs (:func:`contains`), or left alone. The policy goes first, so a binding
        never refers to a policy not yet written. A 409 (a create racing another, a
        resourceVersion that changed) re-reads and decides again, :data:`ATTEMPTS` reads in
        all.

        Raises:
            NotOwnedError: the policy or the binding exists and dynquota did not create it.
            RetryConflictError: every attempt lost a race (retryable: run the pass again).
            ApiError: another refusal (e.g. 403, 422).
            TransportError: no answer.
        """

        async def once() -> None:
            current = [await self.read(b["kind"], b["metadata"]["name"]) for b in (policy, binding)]
            for body, found in zip((policy, binding), current, strict=True):
                if found is not None and not is_owned(found):
                    raise NotOwnedError(body["kind"], body["metadata"]["name"])
            for body, found in zip((policy, binding), current, strict=True):
                await self.write(body, found)

        await _reread_on_conflict(once)

    async def read(self, kind: str, name: str) -> dict[str, Any] | None:
        """The object ``kind`` (``ValidatingAdmissionPolicy`` or
        ``ValidatingAdmissionPolicyBinding``) named ``name`` as decoded JSON, or ``None`` when
        there is none (one GET). Raises ``ApiError``, ``TransportError``."""
        resource, method = _KINDS[kind]
        try:
            found: dict[str, Any] = await call_json(
                "get",
                resource,
                lambda t: getattr(self._api, f"read_{method}")(
                    name, _preload_content=False, _request_timeout=t
                ),
                self._observer,
            )
        except NotFoundError:
            return None
        return found

    async def write(self, body: Mapping[str, Any], current: Mapping[str, Any] | None) -> bool:
        """Write ``body`` (a policy or binding) over ``current``, what :meth:`read` returned
        for it just before: a create when ``current`` is ``None``, else a JSON merge-patch of
        ``spec`` and labels carrying ``current``'s resourceVersion (so it fails rather than
        overwrite a change made since the read), made only when ``current`` does not already
        hold ``body`` (:func:`contains`). Returns whether it wrote.

        Raises:
            NotOwnedError: ``current`` lacks dynquota's labels (nothing is sent).
            ConflictError: 409: created meanwhile (``AlreadyExists``), or changed since
                ``current`` was read.
            ApiError: another refusal. TransportError: no answer.
        """
        kind: str = body["kind"]
        name: str = body["metadata"]["name"]
        resource, method = _KINDS[kind]
        if current is None:
            await call_json(
                "create",
                resource,
                lambda t: getattr(self._api, f"create_{method}")(
                    dict(body),
                    field_manager=FIELD_MANAGER,
                    _preload_content=False,
                    _request_timeout=t,
                ),
                self._observer,
            )
            return True
        if not is_owned(current):
            raise NotOwnedError(kind, name)
        labels = body["metadata"]["labels"]
        if contains(current.get("spec"), body["spec"]) and contains(
            current["metadata"].get("labels") or {}, labels
        ):
            return False
        patch = {
            "metadata": {
                "labels": labels,
                "resourceVersion": current["metadata"]["resourceVersion"],
            },
            "spec": body["spec"],
        }
        await call_json(
            "patch",
            resource,
            lambda t: getattr(self._api, f"patch_{method}")(
                name,
                patch,
                field_manager=FIELD_MANAGER,
                _content_type="application/merge-patch+json",
                _preload_content=False,
                _request_timeout=t,
            ),
            self._observer,
        )
        return True

    async def list_owned(self) -> list[str]:
        """Names of the owned bindings and policies (label selector, one LIST each), bindings
        first. Raises ``ApiError``, ``TransportError``."""
        names: list[str] = []
        for kind in _REMOVAL_ORDER:
            resource, method = _KINDS[kind]
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

    async def remove(self, name: str) -> list[str]:
        """Delete the binding ``name``, then the policy ``name``, each only if it exists and
        carries dynquota's labels (read first; one left by someone else is left alone, logged
        at WARNING), with preconditions on the uid and resourceVersion read (a 409 re-reads,
        :data:`ATTEMPTS` reads in all; a 404 counts as done). The binding goes first, so
        nothing is left that refers to a missing policy. Returns the kinds left alone because
        someone else owns them (``[]``: nothing of that name remains).

        Raises:
            RetryConflictError: every attempt lost a race (retryable).
            ApiError: another refusal. TransportError: no answer.
        """
        left: list[str] = []
        for kind in _REMOVAL_ORDER:
            await _reread_on_conflict(functools.partial(self._remove_one, kind, name, left))
        return left

    async def _remove_one(self, kind: str, name: str, left: list[str]) -> None:
        current = await self.read(kind, name)
        if current is None:
            return
        if not is_owned(current):
            log.warning("%s", NotOwnedError(kind, name).message)
            left.append(kind)
            return
        await self.delete(kind, current)

    async def delete(self, kind: str, current: Mapping[str, Any]) -> None:
        """Delete the object ``current`` (of ``kind``, what :meth:`read` returned just before)
        with preconditions on its ``uid`` and ``resourceVersion``, so one replaced or changed
        since the read is not deleted (404: already gone, done).

        Raises:
            NotOwnedError: ``current`` lacks dynquota's labels (nothing is sent).
            ConflictError: 409: changed or replaced since the read.
            ApiError: another refusal. TransportError: no answer.
        """
        meta = current["metadata"]
        if not is_owned(current):
            raise NotOwnedError(kind, meta["name"])
        resource, method = _KINDS[kind]
        options = {
            "preconditions": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}
        }
        with contextlib.suppress(NotFoundError):
            await call_json(
                "delete",
                resource,
                lambda t: getattr(self._api, f"delete_{method}")(
                    meta["name"], body=options, _preload_content=False, _request_timeout=t
                ),
                self._observer,
            )

    async def remove_all(self) -> int:
        """Delete every owned binding (first) and policy (:meth:`remove`); returns how many
        names were listed. Raises like :meth:`remove`."""
        names = await self.list_owned()
        for name in names:
            await self.remove(name)
        return len(names)


async def _reread_on_conflict(once: Callable[[], Awaitable[None]]) -> None:
    """Run ``once`` (a read, then writes conditional on it) again after a 409, :data:`ATTEMPTS`
    times in all. Raises ``RetryConflictError`` when every attempt lost a race, and whatever
    else ``once`` raises."""
    for attempt in range(ATTEMPTS):
        try:
            await once()
            return
        except ConflictError as exc:
            if attempt + 1 == ATTEMPTS:
                raise RetryConflictError(exc.status, exc.reason, exc.message) from exc
