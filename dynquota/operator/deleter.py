"""The deleter: every delete of a managed quota, and the record of who deleted what (a part of
:class:`~dynquota.operator.assembly.Operator`, built alone in tests).

:meth:`Deleter.delete` is the one road to ``DELETE`` of a managed quota, by the kill switch's
sweep, a reconcile's decision or a dry-run release: it waits for the shared client-side rate
limit (``KILL_SWITCH_DELETE_QPS``, evenly spaced, never a burst), asks the write gate again
after that wait, carries a uid precondition, logs and counts the delete by cause. It records
the namespaces whose quota dynquota itself is deleting, so their ``DELETED`` event is not taken
for someone else's, and the namespaces whose managed quota someone else deleted (re-created as
``QuotaRecreated``: :meth:`Deleter.previously_managed`).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import Protocol

from aiolimiter import AsyncLimiter
from cachetools import TTLCache

from dynquota.kube.quotas import QuotaSnapshot
from dynquota.metrics import Metrics
from dynquota.operator.ports import QuotaStore, SwitchView
from dynquota.operator.write_gate import KILL_SWITCH_DELETE, UNMANAGING_DELETE, WriteGate
from dynquota.policy import Governance
from dynquota.settings import Settings

__all__ = ["Deleter", "Deletion", "Limiter"]

log = logging.getLogger("dynquota.operator")


class Deletion(enum.Enum):
    """What :meth:`Deleter.delete` did: ``DELETED`` the quota; found it ``GONE`` (404) or
    replaced (uid precondition); or ``HELD`` it back because the Lease or the kill switch no
    longer allowed the delete after the rate limiter's wait."""

    DELETED = "deleted"
    GONE = "gone"
    HELD = "held"


class Limiter(Protocol):
    """A rate limiter's turn (``aiolimiter.AsyncLimiter``)."""

    async def acquire(self) -> None: ...


class Deleter:
    """See the module docs.

    Args:
        quotas: the managed-quota I/O (its ``delete``).
        write_gate: asked again after the rate limiter's wait.
        switch: the kill switch (its deletes also need it still engaged).
        metrics: ``dynquota_quota_deletions_total{cause}``.
        settings: ``kill_switch_delete_qps``, ``dry_run``.
        governance: how a namespace is governed now (whose rule a deletion was).
        on_deleted: ``(namespace, why)`` after a delete went through (the reporter's
            per-namespace view and metrics).
    """

    def __init__(
        self,
        quotas: QuotaStore,
        write_gate: WriteGate,
        switch: SwitchView,
        metrics: Metrics,
        settings: Settings,
        *,
        governance: Callable[[str], Governance | None],
        on_deleted: Callable[[str, str], None],
    ) -> None:
        self.quotas = quotas
        self.write_gate = write_gate
        self.switch = switch
        self.metrics = metrics
        self.settings = settings
        self.governance = governance
        self.on_deleted = on_deleted
        # one token per 1/qps seconds: deletes evenly spaced, never a burst
        self.limiter: Limiter = AsyncLimiter(1, 1.0 / settings.kill_switch_delete_qps)
        self._own: TTLCache[str, bool] = TTLCache(maxsize=100_000, ttl=600)
        """Namespaces whose managed quota dynquota itself is deleting (kill switch,
        unmanaged), so their DELETED event is not taken for someone else's."""
        self._by_others: set[str] = set()
        """Namespaces whose managed quota someone else deleted (re-created as
        ``QuotaRecreated``)."""

    async def delete(self, namespace: str, uid: str | None, cause: str, why: str) -> Deletion:
        """Delete the managed quota of ``namespace`` (the object ``uid``) for ``cause``
        (``kill-switch``, ``unmanaged`` or ``dry-run``): waits for the shared client-side rate
        limit (``KILL_SWITCH_DELETE_QPS``), then asks the write gate again (for ``kill-switch``
        also that the switch is still engaged), logs the deletion with ``why`` at WARNING,
        counts it in ``dynquota_quota_deletions_total{cause}``. Returns
        :attr:`Deletion.DELETED`; :attr:`Deletion.GONE` if the quota was already gone or
        replaced; :attr:`Deletion.HELD` if the check after the wait failed (nothing was sent;
        the caller decides again). Raises :class:`~dynquota._k8s.errors.KubeError`.
        """
        await self.limiter.acquire()
        # The wait can be long (a sweep shares the rate): what allowed this delete — the Lease
        # for the whole request, the kill switch for its deletes — is checked again after it.
        write = KILL_SWITCH_DELETE if cause == "kill-switch" else UNMANAGING_DELETE
        if not self.write_gate.may(write) or (
            cause == "kill-switch" and self.switch.engaged is not True
        ):
            log.info(
                "managed quota of %s not deleted (%s): the Lease or the kill switch changed "
                "while the delete waited for its turn",
                namespace,
                cause,
            )
            return Deletion.HELD
        self._own[namespace] = True
        try:
            deleted = await self.quotas.delete(namespace, uid)
        except BaseException:
            self._own.pop(namespace, False)
            raise
        if not deleted:
            log.info("managed quota of %s already gone (%s)", namespace, why)
            return Deletion.GONE
        log.warning("deleted the managed quota of %s: %s", namespace, why)
        self.metrics.quota_deletions.labels(cause).inc()
        self.on_deleted(namespace, why)
        return Deletion.DELETED

    # -- who deleted what ---------------------------------------------------------------------

    def observe(self, event_type: str | None, quota: QuotaSnapshot) -> None:
        """An event of the quota named ``dynquota`` in its namespace: a managed one's
        ``DELETED`` that was neither dynquota's own delete nor any rule of dynquota's
        (:meth:`ours`) was someone else's."""
        if event_type != "DELETED":
            return
        own = self._own.pop(quota.namespace, False)
        if quota.managed and not own and not self.ours(quota):
            self._by_others.add(quota.namespace)

    def ours(self, deleted: QuotaSnapshot) -> bool:
        """Whether a deletion was dynquota's own, by whichever replica made it: the kill
        switch is engaged, the namespace is not managed (opted out, no policy), or it is in
        dry run (its quota released). A replica records only its own deletes, so after a
        leader change it could otherwise report its peer's deletes as someone else's
        (``QuotaRecreated``)."""
        if self.switch.engaged or self.settings.dry_run:
            return True
        governance = self.governance(deleted.namespace)
        if governance is not None and governance.kind == "managed" and governance.dry_run:
            return True
        return governance is not None and governance.kind in ("unmanaged", "excluded")

    def previously_managed(
        self, namespace: str, current: QuotaSnapshot | None, watched: QuotaSnapshot | None
    ) -> bool:
        """Whether a create in ``namespace`` re-creates a managed quota someone else deleted:
        its DELETED event said so, or a read just found it absent (``current`` ``None``) while
        the watch still holds it (``watched``), dynquota is not deleting it and no rule of
        dynquota's would (the event has not arrived yet: seen in CI under load)."""
        if namespace in self._by_others:
            return True
        return (
            current is None
            and watched is not None
            and watched.managed
            and namespace not in self._own
            and not self.ours(watched)
        )

    def created(self, namespace: str) -> None:
        """dynquota created the managed quota of ``namespace``: a re-creation is done."""
        self._by_others.discard(namespace)

    def released(self) -> None:
        """The kill switch was released: what it deleted (maybe by a peer) was no one
        else's."""
        self._by_others.clear()

    def forget(self, namespace: str) -> None:
        """``namespace`` was deleted."""
        self._by_others.discard(namespace)
        self._own.pop(namespace, None)
