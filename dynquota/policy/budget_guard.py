"""Which kinds' CREATE a quota key charges, and which budgeted keys the chart's budget guard
leaves unguarded (issue #22, ``docs/budgets.md``, "The budget guard"). Pure: no I/O.

The guard (``helm/dynquota/templates/budget-admission-policy.yaml``) refuses CREATE of the
kinds in the chart value ``budgetGuard.kinds`` in a budget's namespace until its slice is
enforced; the operator reads the same list (setting ``budget_guard_kinds``) and puts a
``Guarded=False`` condition on a budget with a key that charges another kind
(:func:`guarded_condition`). It says ``True`` only when it has seen the guard
(:class:`GuardSeen`: the chart's ValidatingAdmissionPolicy and its binding, read by name, the
binding denying): an operator run without the chart said ``Guarded=True`` for every budget
(issue 30, LOW-6). A kind is
written as ``<resource>`` for the core group and ``<resource>.<group>`` otherwise (as
``count/<resource>.<group>`` quota keys and ``kubectl get`` name them).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dynquota.names import BUDGET_LABEL, MANAGED_QUOTA_NAME

__all__ = [
    "DEFAULT_GUARDED_KINDS",
    "GuardSeen",
    "guarded_condition",
    "judge_guard",
    "key_kind",
    "unguarded_keys",
]


@dataclass(frozen=True)
class GuardSeen:
    """What the operator saw of the chart's budget guard when it last read it: ``present``
    True (the ValidatingAdmissionPolicy and its binding exist, the binding names the policy
    and denies), False (one is missing, or the binding does not deny: ``detail`` says which),
    ``None`` (not read: no name given, or the read failed: ``detail`` says why)."""

    present: bool | None
    detail: str


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


def guarded_condition(
    keys: Iterable[str], guarded: Collection[str] | None, seen: GuardSeen | None = None
) -> tuple[str, str, str]:
    """``(status, reason, message)`` of a budget's ``Guarded`` condition for its budgeted
    ``keys``, given the kinds the chart's budget guard holds back (``guarded``: the chart's
    ``budgetGuard.kinds`` as the operator was told, empty when ``budgetGuard.enabled=false``;
    ``None``: not told, e.g. the operator runs without the chart) and what it ``seen`` of the
    guard itself (``None``: not read):

    - a key charging a kind not in ``guarded``: ``False``, ``KindNotGuarded`` (naming kind and
      key: creates of it are not held back even where the guard exists);
    - not told: ``Unknown``, ``GuardNotConfigured``;
    - the guard read and missing or not denying: ``False``, ``GuardMissing``;
    - the guard read and in force: ``True``, ``Guarded``;
    - otherwise ``Unknown``, ``GuardNotObservable`` (the read failed, or no name to read).
    """
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
    if guarded is None:
        return (
            "Unknown",
            "GuardNotConfigured",
            "the operator was not told which kinds a budget guard holds back "
            "(DYNQUOTA_BUDGET_GUARD_KINDS, which the chart sets from budgetGuard.kinds: it runs "
            "without the chart?); kubectl get validatingadmissionpolicy,"
            "validatingadmissionpolicybinding shows whether a guard exists; without one a "
            "member's creates are admitted before its slice is enforced",
        )
    if seen is not None and seen.present is True:
        return (
            "True",
            "Guarded",
            f"{seen.detail}: creates of {', '.join(sorted(guarded))} in a member namespace are "
            "held back until its slice is enforced",
        )
    if seen is not None and seen.present is False:
        return (
            "False",
            "GuardMissing",
            f"{seen.detail}: a member's creates are admitted before its slice is enforced, so "
            "the budget can be exceeded (helm upgrade restores the chart's guard)",
        )
    why = seen.detail if seen is not None else "the guard was not read"
    return (
        "Unknown",
        "GuardNotObservable",
        f"the chart installed its budget guard for every budgeted kind (budgetGuard.kinds), but "
        f"whether it is in force is not known: {why}",
    )


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _narrowed_binding(spec: Mapping[str, Any]) -> str | None:
    """Why the binding's paramRef or matchResources differ from the chart's (``None``: as
    installed: the quota ``dynquota`` of the request's namespace, every namespace labelled
    ``dynquota.io/budget`` but the system ones, any object)."""
    ref = spec.get("paramRef") or {}
    if ref.get("name") != MANAGED_QUOTA_NAME or ref.get("namespace") or ref.get("selector"):
        return f"its paramRef is {dict(ref)}, not the namespace's quota {MANAGED_QUOTA_NAME}"
    match = spec.get("matchResources") or {}
    selector = match.get("namespaceSelector") or {}
    expressions = selector.get("matchExpressions") or []
    wanted = {"key": BUDGET_LABEL, "operator": "Exists"}
    others = [e for e in expressions if {k: e.get(k) for k in ("key", "operator")} != wanted]
    system_only = all(
        e.get("key") == "kubernetes.io/metadata.name" and e.get("operator") == "NotIn"
        for e in others
    )
    if len(others) == len(expressions) or not system_only or selector.get("matchLabels"):
        return (
            f"its namespaceSelector is {dict(selector)}, not every namespace labelled "
            f"{BUDGET_LABEL}"
        )
    if (
        match.get("objectSelector")
        or match.get("excludeResourceRules")
        or match.get("resourceRules")
    ):
        return "its matchResources narrow the objects it applies to"
    return None


def _unmatched_kinds(spec: Mapping[str, Any], kinds: Collection[str]) -> list[str]:
    """The ``kinds`` (``resource`` or ``resource.group``) whose CREATE the policy's
    ``matchConstraints.resourceRules`` do not match (a rule naming objects matches none)."""
    rules = (spec.get("matchConstraints") or {}).get("resourceRules") or []
    missing = []
    for kind in sorted(kinds):
        resource, _, group = kind.partition(".")
        if not any(
            not rule.get("resourceNames")
            and {group, "*"} & set(rule.get("apiGroups") or [])
            and {resource, "*"} & set(rule.get("resources") or [])
            and {"CREATE", "*"} & set(rule.get("operations") or [])
            for rule in rules
        ):
            missing.append(kind)
    return missing


def judge_guard(
    name: str,
    policy: Mapping[str, Any] | None,
    binding: Mapping[str, Any] | None,
    kinds: Collection[str],
) -> GuardSeen:
    """Whether the budget guard ``name`` is in force as the chart installs it, from its
    ValidatingAdmissionPolicy and binding as read (decoded JSON; ``None``: not found) and the
    ``kinds`` it must hold back (the chart's ``budgetGuard.kinds``). Pure.

    In force: both exist; the binding names the policy, denies, takes the namespace's quota
    ``dynquota`` as its param and matches every namespace labelled ``dynquota.io/budget`` (but
    system ones) and any object; the policy's param is a ResourceQuota, it matches CREATE of
    every kind and has validations. Anything else: not in force, saying what (README-only
    attack: a guard made harmless by a narrowed selector or param read ``Guarded=True``). The
    validations' CEL is not judged (an edit of it, e.g. to ``true``, is not seen here; field
    ownership cannot tell it either: a value patched away and back stays owned by the patcher,
    so ``helm upgrade`` would not clear it)."""
    if policy is None:
        return GuardSeen(False, f"the ValidatingAdmissionPolicy {name} does not exist")
    if binding is None:
        return GuardSeen(False, f"the ValidatingAdmissionPolicyBinding {name} does not exist")
    spec = _spec(binding)
    where = f"the ValidatingAdmissionPolicyBinding {name}"
    if spec.get("policyName") != name:
        return GuardSeen(False, f"{where} binds {spec.get('policyName')!r}, not the guard {name}")
    actions = list(spec.get("validationActions") or [])
    if "Deny" not in actions:
        return GuardSeen(
            False, f"{where} has validationActions {actions} (no Deny: it refuses nothing)"
        )
    narrowed = _narrowed_binding(spec)
    if narrowed is not None:
        return GuardSeen(False, f"{where}: {narrowed}")
    policy_spec = _spec(policy)
    what = f"the ValidatingAdmissionPolicy {name}"
    param = policy_spec.get("paramKind") or {}
    if (param.get("apiVersion"), param.get("kind")) != ("v1", "ResourceQuota"):
        return GuardSeen(False, f"{what} takes {dict(param)} as its param, not a ResourceQuota")
    missing = _unmatched_kinds(policy_spec, kinds)
    if missing:
        return GuardSeen(False, f"{what} does not match CREATE of {', '.join(missing)}")
    if not policy_spec.get("validations"):
        return GuardSeen(False, f"{what} has no validations")
    return GuardSeen(True, f"the ValidatingAdmissionPolicy {name} and its binding deny")
