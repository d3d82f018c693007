"""Read the chart's budget guard: its ValidatingAdmissionPolicy and binding, by name (I/O).

The operator's token may ``get`` exactly these two objects (the chart's ClusterRole names them
in ``resourceNames``) and nothing else of ``admissionregistration.k8s.io``: enough to say
``Guarded=True`` on a QuotaBudget only while the guard is in force (issue 30, LOW-6), never a
write.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from kubernetes_asyncio import client

from dynquota._k8s.errors import KubeError, NotFoundError
from dynquota._k8s.request import ApiCallObserver, call_api
from dynquota.policy.budget_guard import GuardSeen, judge_guard

__all__ = ["AdmissionGuardReader"]


class AdmissionGuardReader:
    """Reads the ValidatingAdmissionPolicy ``name`` and the binding of the same name (the
    chart names both ``<fullname>-budget-guard``; no name: nothing is read).

    Every request has the default timeout (10 s, :func:`dynquota._k8s.timeouts.short_timeout`);
    ``observer`` hears ``(verb, resource, status)`` after each.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        name: str | None,
        observer: ApiCallObserver | None = None,
    ) -> None:
        self._api: Any = client.AdmissionregistrationV1Api(api_client)
        self._sanitize = api_client.sanitize_for_serialization
        self.name = name
        self._observer = observer

    async def _read(self, resource: str) -> dict[str, Any] | None:
        read = (
            self._api.read_validating_admission_policy
            if resource == "validatingadmissionpolicies"
            else self._api.read_validating_admission_policy_binding
        )
        try:
            model = await call_api(
                "get", resource, lambda t: read(self.name, _request_timeout=t), self._observer
            )
        except NotFoundError:
            return None
        found: dict[str, Any] = self._sanitize(model)
        return found

    async def seen(self, kinds: Collection[str] = ()) -> GuardSeen:
        """What is in force now (:func:`~dynquota.policy.budget_guard.judge_guard` over both
        objects as read, for ``kinds``); ``present=None`` when a read failed (its error) or no
        name was given. Never raises :class:`~dynquota._k8s.errors.KubeError`."""
        name = self.name
        if not name:
            return GuardSeen(None, "no guard name was given (DYNQUOTA_BUDGET_GUARD_NAME)")
        try:
            policy = await self._read("validatingadmissionpolicies")
            binding = await self._read("validatingadmissionpolicybindings")
        except KubeError as exc:
            return GuardSeen(None, f"reading the ValidatingAdmissionPolicy {name} failed: {exc}")
        return judge_guard(name, policy, binding, kinds)
