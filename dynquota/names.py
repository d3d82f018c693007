"""The names dynquota is known by in the cluster, defined once (imports nothing of dynquota).

- the DynamicQuotaPolicy CRD: :data:`GROUP`, :data:`VERSION`, :data:`PLURAL`, :data:`KIND`,
  :data:`API_VERSION` (``crds/dynamicquotapolicies.yaml``);
- the managed quota: :data:`MANAGED_QUOTA_NAME` and the managed-by label;
- the resources it sizes, :data:`TRACKED_RESOURCES`, and the default override lifetime;
- the reasons of the Events it posts, :class:`EventReason`.

The ``dynquota.io/`` annotation keys live with the rules that read them
(:mod:`dynquota.policy.state`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

__all__ = [
    "API_VERSION",
    "APPLIED_KIND",
    "APPLIED_NAME",
    "APPLIED_PLURAL",
    "BUDGET_KIND",
    "BUDGET_LABEL",
    "BUDGET_PLURAL",
    "CONFIGMAPS",
    "DEFAULT_OVERRIDE_TTL",
    "GROUP",
    "KIND",
    "MANAGED_BY_LABEL",
    "MANAGED_BY_SELECTOR",
    "MANAGED_BY_VALUE",
    "MANAGED_LIMIT_RANGE_NAME",
    "MANAGED_QUOTA_NAME",
    "PLURAL",
    "PODS",
    "TRACKED_RESOURCES",
    "VERSION",
    "EventReason",
]

GROUP: Final = "dynquota.io"
VERSION: Final = "v1alpha1"
PLURAL: Final = "dynamicquotapolicies"
KIND: Final = "DynamicQuotaPolicy"
API_VERSION: Final = f"{GROUP}/{VERSION}"
BUDGET_PLURAL: Final = "quotabudgets"
BUDGET_KIND: Final = "QuotaBudget"
"""The QuotaBudget CRD (``crds/quotabudgets.yaml``, issue #13): same group and version."""

APPLIED_PLURAL: Final = "applieddynamicquotas"
APPLIED_KIND: Final = "AppliedDynamicQuota"
APPLIED_NAME: Final = "dynquota"
"""The namespaced projection a tenant reads (``crds/applieddynamicquotas.yaml``, issue 28):
one object of this name, with the managed-by label, per managed namespace; same group and
version."""

MANAGED_QUOTA_NAME: Final = "dynquota"
"""The name of the ResourceQuota dynquota manages in each namespace."""
MANAGED_LIMIT_RANGE_NAME: Final = "dynquota"
"""Name of the companion LimitRange a policy's ``defaultRequests`` asks for (owned, like the
managed quota, only with the managed-by label as well)."""
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE: Final = "dynquota"
MANAGED_BY_SELECTOR: Final = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
"""The label selector of the managed quotas (a quota is managed only with this label **and**
the name :data:`MANAGED_QUOTA_NAME`)."""

BUDGET_LABEL: Final = "dynquota.io/budget"
"""The label a QuotaBudget's pass puts on every managed quota it writes a slice to (value: the
budget's name, at most 63 characters by the CRD), so a pass LISTs only its own quotas
(``docs/budgets.md``, "One LIST of its quotas"). It stays when the namespace leaves; the next
budget that writes the quota overwrites it."""

PODS: Final = "pods"
CONFIGMAPS: Final = "configmaps"
TRACKED_RESOURCES: Final = (PODS, CONFIGMAPS)
"""The object-count resources dynquota sizes, in display order."""

DEFAULT_OVERRIDE_TTL: Final = 7 * 24 * 3600
"""Tenant override lifetime when not configured, seconds (7 days)."""


class EventReason(StrEnum):
    """The ``reason`` of every Event dynquota posts (fixed, greppable; the message says why).

    On the managed quota — Normal: ``Resized``, ``OverrideGranted``, ``OverrideExpired``,
    ``QuotaReleased``, ``Woken`` (controllers the quota refused, woken after a raise); Warning:
    ``OverrideRejected``, ``UsageAboveMaximum``, ``QuotaAtLimit``,
    ``StateRepaired``, ``ManualEditReverted``, ``QuotaRecreated``, ``QuotaWriteFailed``,
    ``ForeignQuota``, ``KeyNotCounted`` (a key the quota controller never counted, removed
    from ``spec.hard``), ``NeedsDefaultRequests`` (a compute key held: no LimitRange
    default). On a LimitRange: ``ForeignLimitRange`` (one named ``dynquota`` without the
    managed-by label: never written). On a Namespace: ``ManagedLabelIgnored``, ``QuotaRemoved``; on
    ``kube-system``: ``KillSwitchEngaged``, ``KillSwitchReleased``, ``KillSwitchInvalid``,
    ``UnmanageHeld`` (the brake on mass un-management holds quota deletions). On a policy:
    ``PolicyInvalid``. On a QuotaBudget: ``Rebalanced`` (Normal: slices written),
    ``OverBudget``, ``BudgetInvalid``, ``BudgetKeyNotSized`` (a member's policy does not size
    a budget key: it asks for an even share). On the managed quota, from the write-rate
    governor: ``Tarpitted`` (Warning: its writes of pods and ConfigMaps now
    go to the APF tarpit, and why), ``Released`` (Normal: they no longer do).
    """

    RESIZED = "Resized"
    OVERRIDE_GRANTED = "OverrideGranted"
    OVERRIDE_EXPIRED = "OverrideExpired"
    OVERRIDE_REJECTED = "OverrideRejected"
    USAGE_ABOVE_MAXIMUM = "UsageAboveMaximum"
    QUOTA_AT_LIMIT = "QuotaAtLimit"
    STATE_REPAIRED = "StateRepaired"
    MANUAL_EDIT_REVERTED = "ManualEditReverted"
    QUOTA_RECREATED = "QuotaRecreated"
    FOREIGN_QUOTA = "ForeignQuota"
    QUOTA_WRITE_FAILED = "QuotaWriteFailed"
    QUOTA_REMOVED = "QuotaRemoved"
    QUOTA_RELEASED = "QuotaReleased"
    MANAGED_LABEL_IGNORED = "ManagedLabelIgnored"
    KILL_SWITCH_ENGAGED = "KillSwitchEngaged"
    KILL_SWITCH_RELEASED = "KillSwitchReleased"
    KILL_SWITCH_INVALID = "KillSwitchInvalid"
    POLICY_INVALID = "PolicyInvalid"
    KEY_NOT_COUNTED = "KeyNotCounted"
    NEEDS_DEFAULT_REQUESTS = "NeedsDefaultRequests"
    FOREIGN_LIMIT_RANGE = "ForeignLimitRange"
    REBALANCED = "Rebalanced"
    OVER_BUDGET = "OverBudget"
    BUDGET_INVALID = "BudgetInvalid"
    BUDGET_KEY_NOT_SIZED = "BudgetKeyNotSized"
    UNMANAGE_HELD = "UnmanageHeld"
    WOKEN = "Woken"
    TARPITTED = "Tarpitted"
    RELEASED = "Released"
