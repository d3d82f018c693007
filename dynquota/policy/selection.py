"""Which namespaces are managed, and which policy governs each (Pure).

Order of checks for a namespace (first that applies wins):

1. being deleted (``deletionTimestamp`` set): *excluded*, its quota left to the namespace
   controller;
2. ``kube-system``, ``kube-public``, ``kube-node-lease``: *excluded*, never touched;
3. the operator's own namespace: *excluded*, never touched;
4. excluded by the operator's settings (``excludeNamespaces`` / ``includeNamespaces``):
   *unmanaged*, a managed quota there is removed;
5. label ``dynquota.io/managed=false`` (value compared case-insensitively): *unmanaged*, a
   managed quota there is removed. Any other value but ``true`` (``no``, ``0``, empty) has no
   effect, and is reported: :func:`managed_label_warning`, ``Governance.warning``;
6. policy selection among the policies whose ``namespaceSelector`` matches:

   - rank: highest ``priority`` first; equal priorities: the lexicographically smallest
     ``metadata.name`` (compared as Python strings, i.e. by code point) wins;
   - the best *valid* match governs (*managed*), unless an *invalid* policy might outrank it:
     an invalid policy whose selector matches (or cannot be evaluated) and whose priority ranks
     above the best valid match (or cannot be read) *freezes* the namespace: its managed quota
     is left exactly as it is. A typo in a policy therefore never hands a namespace to a
     lower-priority policy (which could shrink its quota) nor leaves it unmatched (which would
     delete its quota);
   - nothing matches: *unmanaged*, a managed quota there is removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Final, Literal

from dynquota.policy.limitrange import ContainerDefaults
from dynquota.policy.models import OverrideSettings, PolicyInfo, ResourceProfile

SYSTEM_NAMESPACES: Final = frozenset({"kube-system", "kube-public", "kube-node-lease"})
"""Namespaces never managed, whatever the settings say."""

__all__ = [
    "MANAGED_LABEL",
    "SYSTEM_NAMESPACES",
    "Exclusion",
    "Governance",
    "GovernanceKind",
    "NamespaceInfo",
    "govern",
    "managed_label_warning",
    "namespace_exclusion",
    "policy_rank",
]

EXCLUDED_BY_SETTINGS: Final = "excluded by the operator's settings"
"""The reason of a namespace excluded by ``operator.excludeNamespaces``/``includeNamespaces``."""

MANAGED_LABEL: Final = "dynquota.io/managed"
"""Namespace label; ``false`` (any case) opts the namespace out."""

GovernanceKind = Literal["managed", "unmanaged", "frozen", "excluded"]


@dataclass(frozen=True)
class NamespaceInfo:
    """A Namespace as policy selection needs it: ``name``, ``labels``, ``terminating``
    (``metadata.deletionTimestamp`` is set) and ``created`` (its creationTimestamp, seconds
    since the epoch; ``None``: unknown)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    terminating: bool = False
    created: float | None = None

    @classmethod
    def of(cls, meta: Mapping[str, object]) -> NamespaceInfo:
        """From a Namespace's ``metadata`` (an unparsable creationTimestamp: ``None``)."""
        labels = meta.get("labels")
        created = meta.get("creationTimestamp")
        try:
            at = datetime.fromisoformat(str(created)).timestamp() if created else None
        except ValueError:
            at = None
        return cls(
            str(meta.get("name") or ""),
            dict(labels) if isinstance(labels, Mapping) else {},
            terminating=bool(meta.get("deletionTimestamp")),
            created=at,
        )


@dataclass(frozen=True)
class Exclusion:
    """Why a namespace is not managed whatever the policies say; ``remove_quota`` tells whether
    its managed quota (if any) is deleted (opted out) or left alone (system, own, terminating)."""

    reason: str
    remove_quota: bool


def namespace_exclusion(
    namespace: NamespaceInfo,
    operator_namespace: str = "",
    excluded_by_settings: bool = False,
) -> Exclusion | None:
    """The :class:`Exclusion` of ``namespace``, or ``None`` if policies decide (checks 1-5 of
    the module docstring). ``excluded_by_settings`` is the operator settings' verdict
    (:meth:`dynquota.settings.Settings.excluded`, minus the system/own checks made here)."""
    if namespace.terminating:
        return Exclusion("namespace is being deleted", remove_quota=False)
    if namespace.name in SYSTEM_NAMESPACES:
        return Exclusion(f"system namespace {namespace.name}", remove_quota=False)
    if operator_namespace and namespace.name == operator_namespace:
        return Exclusion("the operator's own namespace", remove_quota=False)
    if excluded_by_settings:
        return Exclusion(EXCLUDED_BY_SETTINGS, remove_quota=True)
    if namespace.labels.get(MANAGED_LABEL, "").lower() == "false":
        return Exclusion(f"namespace labelled {MANAGED_LABEL}=false", remove_quota=True)
    return None


def managed_label_warning(namespace: NamespaceInfo) -> str | None:
    """The warning for a ``dynquota.io/managed`` label that has no effect, or ``None``.

    Only ``false`` (any case) opts a namespace out; ``true`` (any case) and no label say it
    may be managed. Any other value (``no``, ``0``, ``off``, empty) is most likely a failed
    opt-out: ``label dynquota.io/managed="no" is not "false": the namespace stays managed
    (only "false", in any case, opts a namespace out)``. Pure; checks the label only (see
    :func:`govern` for when it matters).
    """
    value = namespace.labels.get(MANAGED_LABEL)
    if value is None or value.lower() in ("false", "true"):
        return None
    return (
        f'label {MANAGED_LABEL}="{value}" is not "false": the namespace stays managed '
        '(only "false", in any case, opts a namespace out)'
    )


def policy_rank(name: str, priority: int) -> tuple[int, str]:
    """Sort key: smaller ranks first (higher priority, then smaller name)."""
    return (-priority, name)


@dataclass(frozen=True)
class Governance:
    """The outcome of policy selection for one namespace.

    ``kind``: ``managed`` (``policy`` governs with ``profiles`` per tracked resource,
    ``dry_run`` and the ``override`` rules from the policy), ``unmanaged`` (remove the managed
    quota), ``frozen`` (leave the managed quota exactly as it is; ``policy`` names the invalid
    policy) or ``excluded`` (never touched). ``reason``: human-readable why. ``warning``: a
    Warning for the caller to post on the Namespace (a ``dynquota.io/managed`` label value
    that has no effect while the namespace stays managed or frozen; see
    :func:`managed_label_warning`), else ``None``.
    """

    kind: GovernanceKind
    reason: str
    policy: str | None = None
    profiles: Mapping[str, ResourceProfile] = field(default_factory=dict)
    dry_run: bool = False
    warning: str | None = None
    override: OverrideSettings = field(default_factory=OverrideSettings)
    container_defaults: ContainerDefaults = field(default_factory=ContainerDefaults)
    """The companion LimitRange the governing policy asks for (empty: none)."""
    wake: bool = True
    """The governing policy's ``spec.wake``: wake the controllers a raise made room for."""

    @property
    def label_change(self) -> bool:
        """Unmanaged because of the namespace's labels (opted out, or no policy selects it),
        not the operator's settings: who may update policies can undo it (issue 23)."""
        return self.kind == "unmanaged" and self.reason != EXCLUDED_BY_SETTINGS

    @classmethod
    def managed(
        cls,
        policy: str,
        profiles: Mapping[str, ResourceProfile],
        dry_run: bool = False,
        override: OverrideSettings | None = None,
        container_defaults: ContainerDefaults | None = None,
        wake: bool = True,
    ) -> Governance:
        """A namespace governed by ``policy`` (handy for callers and tests)."""
        return cls(
            "managed",
            f"governed by policy {policy}",
            policy,
            dict(profiles),
            dry_run,
            override=override if override is not None else OverrideSettings(),
            container_defaults=(
                container_defaults if container_defaults is not None else ContainerDefaults()
            ),
            wake=wake,
        )


def govern(
    namespace: NamespaceInfo,
    policies: Iterable[PolicyInfo],
    operator_namespace: str = "",
    excluded_by_settings: bool = False,
) -> Governance:
    """Decide how ``namespace`` is governed, given every stored policy (valid or not).

    Pure. See the module docstring for the order of checks and the ranking. A
    ``dynquota.io/managed`` value without effect sets ``warning`` when the namespace ends up
    managed or frozen (excluded or unmatched, the label does not matter).
    """
    exclusion = namespace_exclusion(namespace, operator_namespace, excluded_by_settings)
    if exclusion is not None:
        kind: GovernanceKind = "unmanaged" if exclusion.remove_quota else "excluded"
        return Governance(kind, exclusion.reason)
    governance = _select(namespace, policies)
    if governance.kind in ("managed", "frozen"):
        warning = managed_label_warning(namespace)
        return replace(governance, warning=warning) if warning else governance
    return governance


def _select(namespace: NamespaceInfo, policies: Iterable[PolicyInfo]) -> Governance:
    labels = namespace.labels
    best: PolicyInfo | None = None
    invalid: list[PolicyInfo] = []
    for info in policies:
        if info.spec is None:
            invalid.append(info)
            continue
        if not info.spec.namespace_selector.matches(labels):
            continue
        if best is None or policy_rank(info.name, info.spec.priority) < policy_rank(
            best.name, best.spec.priority if best.spec else 0
        ):
            best = info
    best_rank = policy_rank(best.name, best.spec.priority) if best and best.spec else None
    threats = sorted(
        (
            info
            for info in invalid
            if (info.selector is None or info.selector.matches(labels))
            and (
                best_rank is None
                or info.priority is None
                or policy_rank(info.name, info.priority) < best_rank
            )
        ),
        key=lambda info: (info.priority is not None, policy_rank(info.name, info.priority or 0)),
    )
    if threats:
        threat = threats[0]
        return Governance(
            "frozen",
            f"policy {threat.name} is invalid and may govern this namespace: {threat.reason}",
            threat.name,
        )
    if best is None or best.spec is None:
        return Governance("unmanaged", "no policy matches this namespace")
    return Governance.managed(
        best.name,
        best.spec.resources,
        best.spec.dry_run,
        best.spec.override,
        best.spec.container_defaults,
        best.spec.wake,
    )
