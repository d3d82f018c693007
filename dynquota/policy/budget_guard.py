"""Which kinds' CREATE a quota key charges, and which budgeted keys the chart's budget guard
leaves unguarded (issue #22, ``docs/budgets.md``, "The budget guard"). Pure: no I/O.

The guard (``helm/dynquota/templates/budget-admission-policy.yaml``) refuses CREATE of the
kinds in the chart value ``budgetGuard.kinds`` in a budget's namespace until its slice is
enforced; the operator reads the same list (setting ``budget_guard_kinds``) and puts a
``Guarded=False`` condition on a budget with a key that charges another kind
(:func:`guarded_condition`). It never says ``True``: it has no verb on admission policies, so it
cannot see whether the guard's ValidatingAdmissionPolicy and binding exist (issue 30, LOW-6:
an operator run without the chart said ``Guarded=True`` for every budget). A kind is
written as ``<resource>`` for the core group and ``<resource>.<group>`` otherwise (as
``count/<resource>.<group>`` quota keys and ``kubectl get`` name them).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping

__all__ = ["DEFAULT_GUARDED_KINDS", "guarded_condition", "key_kind", "unguarded_keys"]

DEFAULT_GUARDED_KINDS: tuple[str, ...] = (
    "configmaps",
    "persistentvolumeclaims",
    "pods",
    "replicationcontrollers",
    "resourceclaims.resource.k8s.io",
    "secrets",
    "services",
)
"""The built-in kinds docs/budgets.md names: what the core quota keys charge (the chart's
default ``budgetGuard.kinds``)."""

# Upstream: pkg/quota/v1/evaluator/core/{pods,services,persistent_volume_claims}.go and the
# generic object-count evaluator (count/<resource>.<group>).
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


def key_kind(key: str) -> str | None:
    """The kind (``resource`` or ``resource.group``) whose CREATE the quota ``key`` charges,
    or ``None`` for ``resourcequotas`` (the guard must never refuse the managed quota's own
    creation) and a ``count/`` key of no resource."""
    if key in _CORE_KEYS:
        return _CORE_KEYS[key]
    if key.startswith("count/"):
        kind = key[len("count/") :]
        return None if not kind or kind == "resourcequotas" else kind
    if _STORAGE_CLASS.match(key):
        return "persistentvolumeclaims"
    if _DEVICE_CLASS.match(key):
        return "resourceclaims.resource.k8s.io"
    if key.startswith(_POD_PREFIXES) or "/" in key:
        return "pods"  # compute and extended resources are charged by pods
    return None


def unguarded_keys(keys: Iterable[str], guarded: Collection[str]) -> dict[str, str]:
    """Budgeted ``keys`` whose kind is not in ``guarded`` (the chart's ``budgetGuard.kinds``):
    key -> its kind, sorted by key. Creates of such a kind in a member namespace are not held
    back until the slice is enforced (the window the guard closes stays open for them)."""
    out: dict[str, str] = {}
    for key in sorted(keys):
        kind = key_kind(key)
        if kind is not None and kind not in guarded:
            out[key] = kind
    return out


def guarded_condition(keys: Iterable[str], guarded: Collection[str] | None) -> tuple[str, str, str]:
    """``(status, reason, message)`` of a budget's ``Guarded`` condition for its budgeted
    ``keys``, given the kinds the chart's budget guard holds back (``guarded``: the chart's
    ``budgetGuard.kinds`` as the operator was told, empty when ``budgetGuard.enabled=false``;
    ``None``: not told, e.g. the operator runs without the chart):

    - a key charging a kind not in ``guarded``: ``False``, ``KindNotGuarded`` (naming kind and
      key: creates of it are not held back even where the guard exists);
    - not told: ``Unknown``, ``GuardNotConfigured``;
    - otherwise ``Unknown``, ``GuardNotObservable``: the chart installed the guard for every
      budgeted kind, but the operator cannot see whether it still exists.

    Never ``True``: the operator has no verb on admission policies or their bindings."""
    if guarded is not None:
        unguarded = unguarded_keys(keys, guarded)
        if unguarded:
            return (
                "False",
                "KindNotGuarded",
                "the chart's budget guard does not hold back creates of "
                + ", ".join(f"{kind} (charged by {key})" for key, kind in unguarded.items())
                + " until a member's slice is enforced: add the kinds to the chart value "
                "budgetGuard.kinds",
            )
    unseen = (
        "dynquota cannot see admission policies (its token has no verb on them), so whether "
        "the ValidatingAdmissionPolicy <release>-budget-guard and its binding exist is not "
        "known here: kubectl get validatingadmissionpolicy,validatingadmissionpolicybinding "
        "shows them; without them a member's creates are admitted before its slice is enforced"
    )
    if guarded is None:
        return (
            "Unknown",
            "GuardNotConfigured",
            "the operator was not told which kinds a budget guard holds back "
            "(DYNQUOTA_BUDGET_GUARD_KINDS, which the chart sets from budgetGuard.kinds: it runs "
            f"without the chart?); {unseen}",
        )
    return (
        "Unknown",
        "GuardNotObservable",
        "the chart installed its budget guard for every budgeted kind (budgetGuard.kinds), "
        f"but {unseen}",
    )
