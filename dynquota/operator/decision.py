"""The one road from what was read to a decision, shared by the operator and ``dynquota plan``.

Both govern a namespace and decide its quota with the same settings-derived arguments, here:
:func:`governance_of` (the settings' verdict — the operator's own namespace, the
include/exclude lists — then the policies) and :func:`decide_args` (the global dry-run flag
and the override TTL, passed to :func:`dynquota.policy.decide` as ``**decide_args(settings)``).
The other inputs come from the pure conversions
:meth:`dynquota.kube.quotas.QuotaSnapshot.state` and :func:`dynquota.policy.observed_usage`.
Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypedDict

from dynquota.policy import Governance, NamespaceInfo, PolicyInfo, govern, not_counted_after
from dynquota.settings import Settings

__all__ = ["DecideArgs", "decide_args", "governance_of"]


class DecideArgs(TypedDict):
    """The keyword arguments of :func:`dynquota.policy.decide` that come from the settings:
    ``dry_run`` (the global flag), ``override_ttl`` and ``not_counted_after`` (seconds)."""

    dry_run: bool
    override_ttl: int
    not_counted_after: int


def decide_args(settings: Settings) -> DecideArgs:
    """The arguments of :func:`dynquota.policy.decide` that ``settings`` fix
    (``not_counted_after``: :func:`dynquota.policy.not_counted_after` of the quota
    controller's sync period)."""
    return DecideArgs(
        dry_run=settings.dry_run,
        override_ttl=settings.override_ttl,
        not_counted_after=not_counted_after(settings.quota_sync_period),
    )


def governance_of(
    info: NamespaceInfo, policies: Iterable[PolicyInfo], settings: Settings
) -> Governance:
    """How the namespace ``info`` is governed by ``policies`` under ``settings``
    (:func:`dynquota.policy.govern` with the operator's namespace and ``Settings.excluded``)."""
    return govern(info, list(policies), settings.namespace, settings.excluded(info.name))
