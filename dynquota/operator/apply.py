"""The quota writer: one decision written, or held (a part of
:class:`~dynquota.operator.assembly.Operator`, built alone in tests).

:meth:`QuotaWriter.apply` writes a :class:`~dynquota.policy.Decision` with one create,
conditional JSON merge-patch (the ``resourceVersion`` read) or delete (the ``uid`` read), or
holds it (the write gate's answer: no write without positive knowledge); it returns an
:class:`~dynquota.operator.ports.Applied`. :meth:`QuotaWriter.release` releases (deletes) the
managed quota of a namespace in dry run. The writer owns the brake on mass un-management
(:mod:`dynquota.operator.brake`) and reads its confirmation on ``kube-system``
(:meth:`QuotaWriter.observe_confirmation`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Final

from dynquota._k8s.errors import ApiError, ConflictError, NotFoundError
from dynquota._k8s.workqueue import Outcome
from dynquota.kube.events import ObjectRef
from dynquota.kube.quotas import MANAGED_QUOTA_NAME, QuotaSnapshot
from dynquota.metrics import Metrics
from dynquota.names import EventReason
from dynquota.operator.brake import CONFIRM, UnmanageBrake, counted
from dynquota.operator.cluster_view import ClusterView
from dynquota.operator.deleter import Deleter, Deletion
from dynquota.operator.ports import (
    HELD_BRAKE,
    KUBE_SYSTEM,
    Applied,
    LeaderView,
    QuotaStore,
    Requeue,
    SwitchView,
    namespace_terminating,
)
from dynquota.operator.reporting import Reporter
from dynquota.operator.write_gate import WriteGate, quota_write
from dynquota.policy import (
    POLICY,
    TRACKED_RESOURCES,
    Decision,
    Governance,
    QuotaState,
    hard_text,
)
from dynquota.policy.state import format_time, parse_time
from dynquota.settings import Settings

__all__ = [
    "QuotaWriter",
]

log = logging.getLogger("dynquota.operator")

RESTORER = "who may update dynamicquotapolicies.dynquota.io"
FENCE_MARK: Final = "operator-writes"
"""In a 403's message: refused by the chart's policy confining the operator's token."""
REFUSED_RETRY: Final = 60.0
"""Seconds after a refused (not retryable) quota write before the namespace is decided again:
the budget's slice writes back off to the same ceiling (``docs/budgets.md``)."""
"""The role that can restore a managed quota released by a change of the namespace's guarded
labels (the chart's governance-labels policy: docs/tenants.md)."""


class QuotaWriter:
    """Writes (or holds) one decision.

    Args:
        quotas: the managed-quota I/O.
        deleter: every delete.
        reporter: Events (``QuotaRemoved``, ``QuotaReleased``, ``UnmanageHeld``,
            ``QuotaWriteFailed``).
        write_gate: asked before every write.
        switch: the kill switch (a create or patch decided before it moved is decided again).
        cluster: the namespaces with a managed quota (the brake's share), their uids.
        leader: only the leader writes.
        requeue: a create that raced an engaging kill switch is decided again at once.
        metrics: ``dynquota_writes_held_total``.
        settings: ``dry_run``, the brake's share and window.
        clock: the cluster's time, seconds since the epoch; ``monotonic``: seconds on a
            clock that never steps (the brake's window; default ``clock``).
    """

    def __init__(
        self,
        quotas: QuotaStore,
        *,
        deleter: Deleter,
        reporter: Reporter,
        write_gate: WriteGate,
        switch: SwitchView,
        cluster: ClusterView,
        leader: LeaderView,
        requeue: Requeue,
        metrics: Metrics,
        settings: Settings,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self.quotas = quotas
        self.deleter = deleter
        self.reporter = reporter
        self.write_gate = write_gate
        self.switch = switch
        self.cluster = cluster
        self.leader = leader
        self.requeue = requeue
        self.metrics = metrics
        self.settings = settings
        self.clock = clock
        self.monotonic = monotonic if monotonic is not None else clock
        self.brake = UnmanageBrake(
            settings.unmanage_brake_share, settings.unmanage_brake_window_seconds
        )
        """The brake on mass un-management (:mod:`dynquota.operator.brake`)."""
        self.confirmed_at: float | None = None
        """``kube-system``'s :data:`~dynquota.operator.brake.CONFIRM` time, if valid."""
        self.after_check: Callable[[str, Decision], Awaitable[None]] | None = None
        """Test hook: awaited with the namespace and the decision after every client-side check
        passed, just before the request is sent — where a replica paused by SIGSTOP or a VM
        pause would stop. ``None`` in production."""
        self._held_logged: dict[str, float] = {}
        # ns -> when the confining policy last refused a write there (its first refusal in a
        # while is decided again at once: the namespace may have changed since the decision)
        self._fenced: dict[str, float] = {}

    def observe_confirmation(self, value: str | None) -> None:
        """``kube-system``'s :data:`~dynquota.operator.brake.CONFIRM` annotation: a valid time
        releases the holds begun at or before it (each held namespace is decided again);
        anything else confirms nothing."""
        try:
            confirmed: float | None = float(parse_time(value)) if value else None
        except ValueError:
            confirmed = None
        if confirmed != self.confirmed_at:
            self.confirmed_at = confirmed
            if confirmed is not None:
                self.requeue.add_all(list(self.brake.held))
                since = self.brake.held_since
                if since is not None and confirmed < math.floor(since):
                    log.warning(
                        "%s=%s confirms nothing: the hold began at %s (use a time not before it)",
                        CONFIRM, value, format_time(since),
                    )  # fmt: skip

    def _hold(self, namespace: str, decision: Decision, why: str) -> Applied:
        """Count and log (at most once a minute per reason) a held write."""
        self.metrics.writes_held.labels(why).inc()
        now = time.monotonic()
        if now - self._held_logged.get(why, -math.inf) >= 60.0:
            self._held_logged[why] = now
            log.warning(
                "holding the %s of the managed quota of %s (and others for the same reason "
                "within a minute): %s; retrying",
                decision.action,
                namespace,
                why,
            )
        return Applied(outcome=Outcome(retry=True), result="held")

    async def apply(
        self,
        namespace: str,
        governance: Governance,
        decision: Decision,
        current: QuotaSnapshot | None,
    ) -> Applied:
        """Write ``decision`` (conditionally on what was read: the patch carries
        ``current``'s resourceVersion, a delete its uid), or hold it (the write gate)."""
        if decision.action != "delete":
            self.brake.settle(namespace)  # e.g. the policies returned
            if governance.kind == "managed" and not governance.dry_run:
                self.brake.returned(namespace)  # its passed delete pre-approves nothing
        if decision.action == "nothing":
            return Applied(current)
        if not self.leader.is_leader:
            return Applied(outcome=Outcome(), result="standby")
        if decision.action in ("create", "patch") and self.switch.engaged is not False:
            # the switch moved since the decision: decide again
            return Applied(outcome=Outcome(requeue_at=self.clock()), result="retry")
        why = self.write_gate.hold(quota_write(decision, self.switch.engaged))
        if why is not None:
            return self._hold(namespace, decision, why)
        if (
            decision.action == "delete"
            and not self.switch.engaged
            and self._unmanaging(governance)
            and not self._brake_admits(namespace)
        ):
            await self._report_brake(namespace)
            return self._hold(namespace, decision, HELD_BRAKE)
        if self.after_check is not None:
            await self.after_check(namespace, decision)
        try:
            if decision.action == "create":
                created = await self.quotas.create(
                    namespace,
                    hard_text(decision.hard),
                    dict(decision.set_annotations),
                )
                self.deleter.created(namespace)
                if self.switch.engaged is not False:
                    # engaged while the create was in flight: a sweep that listed before it
                    # landed missed it, so decide again (the decision is then a delete)
                    self.requeue.add_now(namespace)
                return Applied(created)
            if decision.action == "patch":
                assert current is not None
                patched = await self.quotas.patch(
                    namespace, decision.merge_patch(), resource_version=current.resource_version
                )
                return Applied(patched)
            if decision.action == "delete":
                return await self._apply_delete(namespace, governance, current)
        except ConflictError:
            return Applied(conflict=True)  # created or changed meanwhile: read it again
        except NotFoundError:
            # the quota or the namespace is gone (a namespace deletion the watch missed):
            # back off rather than spin; a DELETED event or the resync ends it
            return Applied(outcome=Outcome(retry=True), result="retry")
        except ApiError as exc:
            uid = current.uid if current else ""
            return await self._refused(namespace, uid, exc, decision.action)
        raise AssertionError(f"unknown action {decision.action!r}")

    async def release(
        self,
        namespace: str,
        governance: Governance,
        simulated: QuotaState | None,
        current: QuotaSnapshot,
    ) -> Applied:
        """Release the managed quota of a namespace in dry run: delete it (uid precondition,
        the shared delete rate limit, the same hold rules as any delete), count it in
        ``dynquota_quota_deletions_total{cause="dry-run"}`` and post a ``QuotaReleased``
        Event saying who is in dry run and what dynquota would set (``simulated``)."""
        if self.settings.dry_run:
            who = "the operator is in dry run (operator.dryRun)"
        else:
            who = f"policy {governance.policy} is in dry run (spec.dryRun)"
        hard = {
            r: str(v)
            for r, v in (simulated.hard.items() if simulated is not None else ())
            if r in TRACKED_RESOURCES or r in governance.profiles
        }
        would = (
            "it would set " + ", ".join(f"{r}={v}" for r, v in sorted(hard.items()))
            if hard and governance.kind == "managed"
            else f"it would manage no quota here ({governance.reason})"
        )
        why = f"{who}: dynquota enforces nothing in this namespace"
        # Governed by another policy before (its name on the quota): a change of the
        # namespace's labels (or of the policies) released it: a Warning naming who can undo it.
        was = current.annotations.get(POLICY)
        moved = not self.settings.dry_run and was is not None and was != governance.policy
        release = Decision("delete", notes=(why,))
        if not self.leader.is_leader:
            return Applied(outcome=Outcome(), result="standby")
        held = self.write_gate.hold(quota_write(release, self.switch.engaged))
        if held is not None:
            return self._hold(namespace, release, held)
        if (
            not self.switch.engaged
            and not self.settings.dry_run
            and self._unmanaging(governance)
            and not self._brake_admits(namespace)
        ):
            await self._report_brake(namespace)
            return self._hold(namespace, release, HELD_BRAKE)
        try:
            deleted = await self.deleter.delete(namespace, current.uid, "dry-run", why)
        except ConflictError:
            return Applied(conflict=True)
        except NotFoundError:
            return Applied(outcome=Outcome(retry=True), result="retry")
        except ApiError as exc:
            return await self._refused(
                namespace, current.uid, exc, "release (delete)", log_as="release"
            )
        if deleted is not Deletion.DELETED:
            return Applied(outcome=Outcome(requeue_at=self.clock()), result="retry")
        message = (
            f"{why}: the managed ResourceQuota {MANAGED_QUOTA_NAME} was released (deleted); "
            f"{would}. Leaving dry run creates it again from current usage"
        )
        if moved:
            message += (
                f"; policy {was} governed this namespace until its labels (or the policies) "
                f"changed: {RESTORER} can restore it"
            )
        await self.reporter.emit(
            ObjectRef.quota(namespace, MANAGED_QUOTA_NAME, current.uid),
            "Warning" if moved else "Normal",
            EventReason.QUOTA_RELEASED,
            message,
        )
        return Applied(None)

    async def _apply_delete(
        self, namespace: str, governance: Governance, current: QuotaSnapshot | None
    ) -> Applied:
        uid = current.uid if current else None
        if self.switch.engaged:
            deletion = await self.deleter.delete(
                namespace, uid, "kill-switch", "kill switch engaged"
            )
            if deletion is not Deletion.DELETED:
                return Applied(outcome=Outcome(requeue_at=self.clock()), result="retry")
            return Applied(None)
        why = governance.reason
        if await self.deleter.delete(namespace, uid, "unmanaged", why) is not Deletion.DELETED:
            # gone or replaced meanwhile: decide again
            return Applied(outcome=Outcome(requeue_at=self.clock()), result="retry")
        restore = (
            f"; {RESTORER} can restore it (the namespace's labels, or a policy selecting it)"
            if governance.label_change
            else ""
        )
        await self.reporter.warn(
            ObjectRef.namespace_object(namespace, self.cluster.namespace_uid(namespace)),
            EventReason.QUOTA_REMOVED,
            f"the managed ResourceQuota {MANAGED_QUOTA_NAME} was deleted: {why}{restore}",
            logged=True,
        )
        return Applied(None)

    def _unmanaging(self, governance: Governance) -> bool:
        """Whether a delete takes a namespace out of management by a change to the policies:
        none governs it any more, or its policy was switched to dry run (a GitOps commit can
        flip many at once). The operator-wide dry run is an admin's restart with a new
        setting, like the kill switch: not braked."""
        if governance.kind == "unmanaged":
            return True
        return governance.kind == "managed" and governance.dry_run and not self.settings.dry_run

    def _brake_admits(self, namespace: str) -> bool:
        """Whether the brake lets the un-managing delete of ``namespace`` go now."""
        return self.brake.admit(
            namespace,
            # every managed quota the watch or a GET delivered
            counted(self.cluster.with_quota(), self.cluster.namespaces),
            self.monotonic(),
            self.clock(),
            self.confirmed_at,
        )

    async def _report_brake(self, namespace: str) -> None:
        """Say (once an hour while it lasts, and again for each new hold: the time to confirm
        with changes) that the brake holds un-managing deletes."""
        since = self.brake.held_since
        stamp = format_time(since) if since is not None else "now"
        await self.reporter.warn_once(
            ObjectRef.namespace_object(KUBE_SYSTEM, self.cluster.kube_system_uid),
            EventReason.UNMANAGE_HELD,
            f"holding the deletion of managed quotas ({len(self.brake.held)} so far, e.g. in "
            f"{namespace}; dynquota plan lists them): no policy enforces them any more, more than "
            f"{self.settings.unmanage_brake_share:.0%} of the managed namespaces within "
            f"{self.settings.unmanage_brake_window_seconds:.0f} s (policies deleted, their "
            f"selectors edited, switched to dry run, or the CRD removed). Restore the "
            f"policies, or confirm with: "
            f"kubectl annotate namespace kube-system {CONFIRM}=<RFC 3339 time not before "
            f"{stamp}> --overwrite. The kill switch removes every quota at once",
            key=KUBE_SYSTEM,
            cause=stamp,
            logged=True,
        )

    async def _refused(
        self,
        namespace: str,
        uid: str,
        exc: ApiError,
        what: str,
        *,
        log_as: str | None = None,
    ) -> Applied:
        """A write (``what``: the action) the apiserver answered with ``exc``: retried with
        backoff if retryable or the namespace is terminating, or if the chart's policy confining
        the token refused it for the first time in two :data:`REFUSED_RETRY` periods (the view
        the decision read may be behind the apiserver's); otherwise logged at ERROR (as
        ``log_as`` if given), posted once as a ``QuotaWriteFailed`` Warning (result
        ``invalid``) and decided again after :data:`REFUSED_RETRY` seconds (an admin who
        fixes RBAC or a policy sees the write land within a minute, not at the resync)."""
        if exc.retryable or namespace_terminating(exc):
            return Applied(outcome=Outcome(retry=True), result="retry")
        now = self.clock()
        if exc.status == 403 and FENCE_MARK in exc.message:
            first = now - self._fenced.get(namespace, -math.inf) > 2 * REFUSED_RETRY
            self._fenced[namespace] = now
            if first:
                # e.g. a create decided on a namespace view one relabel (managed=false) behind
                # the apiserver's: the fence held; decide again on what is known then
                log.warning(
                    "%s of quota in %s refused by the operator-writes policy (%s); the "
                    "namespace may have changed since the decision: deciding it again",
                    what, namespace, exc.message,
                )  # fmt: skip
                return Applied(outcome=Outcome(retry=True), result="retry")
        if log_as is None:
            log.error("%s of quota in %s refused: %s", what, namespace, exc)
        else:
            log.error("%s of the quota in %s refused: %s", log_as, namespace, exc)
        await self.reporter.warn_once(
            ObjectRef.quota(namespace, MANAGED_QUOTA_NAME, uid),
            EventReason.QUOTA_WRITE_FAILED,
            f"{what} of the managed quota refused by the apiserver "
            f"({exc.status} {exc.reason}): {exc.message}",
            key=namespace,
            logged=True,
        )
        return Applied(outcome=Outcome(requeue_at=self.clock() + REFUSED_RETRY), result="invalid")
