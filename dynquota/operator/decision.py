"""The one road from what was read to a decision, shared by the operator and ``dynquota plan``.

Both govern a namespace and decide its quota with the same settings-derived arguments, here:
:func:`governance_of` (the settings' verdict — the operator's own namespace, the
include/exclude lists — then the policies) and :func:`decide_with` (the global dry-run flag
and the override TTL of the settings). The inputs come from the pure conversions
:meth:`dynquota.kube.quotas.QuotaSnapshot.state` and :func:`dynquota.policy.observed_usage`.
Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from dynquota.policy import (
    Decision,
    Governance,
    NamespaceInfo,
    PolicyInfo,
    QuotaState,
    decide,
    govern,
)
from dynquota.settings import Settings

__all__ = ["decide_with", "governance_of"]


def governance_of(
    info: NamespaceInfo, policies: Iterable[PolicyInfo], settings: Settings
) -> Governance:
    """How the namespace ``info`` is governed by ``policies`` under ``settings``
    (:func:`dynquota.policy.govern` with the operator's namespace and ``Settings.excluded``)."""
    return govern(
        info,
        list(policies),
        settings.namespace,
        settings.excluded(info.name),
    )


def decide_with(
    settings: Settings,
    *,
    governance: Governance,
    usage: Mapping[str, int],
    peak: Mapping[str, int],
    quota: QuotaState | None,
    kill_switch: bool | None,
    now: float,
    started_at: float,
    previously_managed: bool = False,
    namespace: str = "",
    help_url: str = "",
) -> Decision:
    """:func:`dynquota.policy.decide` with ``settings``' global dry-run flag and override TTL
    (seconds); the other arguments are passed through (see there: counts, seconds since the
    epoch)."""
    return decide(
        governance=governance,
        usage=usage,
        peak=peak,
        quota=quota,
        kill_switch=kill_switch,
        now=now,
        started_at=started_at,
        dry_run=settings.dry_run,
        override_ttl=settings.override_ttl,
        previously_managed=previously_managed,
        namespace=namespace,
        help_url=help_url,
    )
