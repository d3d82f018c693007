"""The companion LimitRanges and the compute trap, in the operator (a part of
:class:`~dynquota.operator.assembly.Operator`, built alone in tests).

Before a compute key is added to a managed quota, :meth:`Companions.missing_defaults` lists the
namespace's LimitRanges (one LIST, only when there is such a key to add or the policy's
companion is not known to be in place), writes the companion LimitRange ``dynquota`` the policy
asks for, and answers which compute keys stay held for want of a default. The rules are
:mod:`dynquota.policy.companion` (``dynquota plan`` shows them from the same functions); this
part does the I/O and remembers, per namespace, the defaults last written or seen in place.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from cachetools import TTLCache

from dynquota._k8s.errors import ForbiddenError
from dynquota.kube.events import ObjectRef
from dynquota.kube.quotas import QuotaSnapshot
from dynquota.names import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MANAGED_LIMIT_RANGE_NAME,
    EventReason,
)
from dynquota.operator.ports import LimitRangeReader
from dynquota.operator.reporting import Reporter
from dynquota.operator.write_gate import LIMIT_RANGE, WriteGate
from dynquota.policy import Governance
from dynquota.policy.companion import companion_step, missing_defaults, trapped_keys
from dynquota.policy.limitrange import ContainerDefaults

__all__ = ["Companions"]

log = logging.getLogger("dynquota.operator")


class Companions:
    """See the module docs.

    Args:
        limit_ranges: a namespace's LimitRanges and the companion's writes (``None``: no
            defaults known, every trapped key is held).
        reporter: the ``ForeignLimitRange`` Warning.
        write_gate: asked before a companion write
            (:data:`~dynquota.operator.write_gate.LIMIT_RANGE`).
    """

    def __init__(
        self,
        limit_ranges: LimitRangeReader | None,
        *,
        reporter: Reporter,
        write_gate: WriteGate,
    ) -> None:
        self.limit_ranges = limit_ranges
        self.reporter = reporter
        self.write_gate = write_gate
        self._in_place: TTLCache[str, ContainerDefaults] = TTLCache(maxsize=100_000, ttl=600)
        """Per namespace, the companion LimitRange defaults last written or seen in place
        (re-checked with a LIST after 10 minutes, or at once when the policy changes them)."""

    def forget(self, namespace: str) -> None:
        """What was confirmed about the companion of ``namespace`` no longer holds (an event of
        a LimitRange named ``dynquota`` there, or the namespace is gone): read it again."""
        self._in_place.pop(namespace, None)

    async def missing_defaults(
        self,
        namespace: str,
        governance: Governance,
        current: QuotaSnapshot | None,
        dry_run: bool = False,
    ) -> frozenset[str]:
        """Keys of the policy that force pods to declare a resource (the compute trap), are not
        in the quota yet, and have no LimitRange default in ``namespace``.

        One LIST of its LimitRanges, only when there is such a key to add or the policy's
        companion LimitRange is not known to be in place; that same read creates or patches
        the companion (:meth:`_ensure`). Raises ``KubeError``."""
        if governance.kind != "managed":
            return frozenset()
        trapped = trapped_keys(governance.profiles, current.spec_hard if current else {})
        defaults = governance.container_defaults
        in_place = self._in_place.get(namespace) == defaults
        if not trapped and (not defaults.wanted or in_place or dry_run):
            return frozenset()
        if self.limit_ranges is None:
            return trapped
        items = await self.limit_ranges.list_limit_ranges(namespace)
        ensured = defaults.wanted and await self._ensure(namespace, defaults, items, dry_run)
        return missing_defaults(trapped, items, defaults if ensured else None)

    async def _ensure(
        self,
        namespace: str,
        defaults: ContainerDefaults,
        items: list[dict[str, Any]],
        dry_run: bool,
    ) -> bool:
        """Make the companion LimitRange ``dynquota`` of ``namespace`` hold exactly
        ``defaults`` (``items``: the namespace's LimitRanges, just listed): create it, or patch
        it conditionally on the resourceVersion read. Never writes one without the managed-by
        label (Warning ``ForeignLimitRange``), nor in dry run, nor while the write gate holds a
        companion write (policies not listed, kill switch unknown or engaged, Lease). Returns
        whether ours is in place with ``defaults`` now. Raises ``KubeError`` (409 when it
        changed since the LIST: retried with the reconcile)."""
        assert self.limit_ranges is not None
        step = companion_step(
            defaults, items, dry_run=dry_run, may_write=self.write_gate.may(LIMIT_RANGE)
        )
        found = step.found
        if step.step == "foreign":
            assert found is not None
            await self._report_foreign(namespace, found)
            return False
        if step.step == "in place":
            self._in_place[namespace] = defaults
            return True
        if step.step not in ("create", "patch"):
            return False  # dry run, or held
        item = defaults.limits_item()
        version = str(((found or {}).get("metadata") or {}).get("resourceVersion") or "")
        if found is not None and not version:
            return False  # no precondition possible: never write blind
        try:
            if found is None:
                await self.limit_ranges.create_limit_range(namespace, item)
            else:
                await self.limit_ranges.patch_limit_range(namespace, item, version)
        except ForbiddenError as exc:
            # no RBAC (rbac.companionLimitRanges=false) or the namespace terminates: the
            # compute keys stay held (NeedsDefaultRequests); the quota itself goes on
            log.warning(
                "cannot write LimitRange %s/%s: %s", namespace, MANAGED_LIMIT_RANGE_NAME, exc
            )
            return False
        log.info(
            "%s LimitRange %s/%s: %s",
            "created" if found is None else "patched",
            namespace,
            MANAGED_LIMIT_RANGE_NAME,
            item,
        )
        self._in_place[namespace] = defaults
        return True

    async def _report_foreign(self, namespace: str, found: Mapping[str, Any]) -> None:
        await self.reporter.warn_once(
            ObjectRef(
                "v1",
                "LimitRange",
                MANAGED_LIMIT_RANGE_NAME,
                namespace,
                str((found.get("metadata") or {}).get("uid") or ""),
            ),
            EventReason.FOREIGN_LIMIT_RANGE,
            f"a LimitRange {MANAGED_LIMIT_RANGE_NAME} without the label {MANAGED_BY_LABEL}="
            f"{MANAGED_BY_VALUE} exists, so dynquota leaves it alone and does not manage "
            "the defaults its policy asks for; rename it or add the label to hand it over",
            key=namespace,
        )
