"""Writing one decision (a layer of :class:`~dynquota.operator.reconcile.Operator`).

:meth:`QuotaWriter._apply` writes a :class:`~dynquota.policy.Decision` with one create,
conditional JSON merge-patch (the ``resourceVersion`` read) or delete (the ``uid`` read), or
holds it (:meth:`QuotaWriter.hold_reason`: no write without positive knowledge); it returns an
:class:`~dynquota.operator.ports.Applied`. :meth:`QuotaWriter._release` releases (deletes) the
managed quota of a namespace in dry run.
"""

from __future__ import annotations

import logging
import math
import time

from dynquota._k8s.errors import ApiError, ConflictError, NotFoundError
from dynquota._k8s.workqueue import Outcome
from dynquota.kube.events import ObjectRef
from dynquota.kube.quotas import MANAGED_QUOTA_NAME, QuotaSnapshot
from dynquota.names import EventReason
from dynquota.operator.killswitch import Deletion, KillSwitch
from dynquota.operator.ports import (
    HELD_BUDGETS,
    HELD_INFORMERS,
    HELD_KILL_SWITCH,
    HELD_LEASE,
    HELD_POLICIES,
    HELD_RELEASE,
    HELD_STALE,
    WRITE_TIMEOUT,
    Applied,
    namespace_terminating,
)
from dynquota.policy import (
    TRACKED_RESOURCES,
    Decision,
    Governance,
    QuotaState,
    hard_text,
)

__all__ = [
    "QuotaWriter",
]

log = logging.getLogger("dynquota.operator")


class QuotaWriter(KillSwitch):
    """Writes (or holds) one decision."""

    def hold_reason(self, decision: Decision) -> str | None:
        """Why writing ``decision`` must wait (one of :data:`HOLD_REASONS`), or ``None``.

        Every write needs the policies and the budgets listed, the kill switch read (a
        release seen in a watch event confirmed by a consistent read before anything is
        created), the informers synced and the Lease valid for :data:`WRITE_TIMEOUT`
        seconds; a write that shrinks also needs the informers healthy now. A kill-switch
        delete needs only the Lease (the switch itself was read: it must work in the
        incident it exists for).
        """
        if decision.action == "delete" and self.kill_switch:
            return None if self.gate.can_write(WRITE_TIMEOUT) else HELD_LEASE
        if not self.policies_listed:
            return HELD_POLICIES
        if not self.budgets.listed:
            return HELD_BUDGETS
        if self.kill_switch is None:
            return HELD_KILL_SWITCH
        if decision.action == "create" and not self._release_confirmed:
            return HELD_RELEASE
        if self.usage is None or not self.usage.synced:
            return HELD_INFORMERS
        margin = float(self.settings.liveness_margin_seconds)
        if decision.shrinks and not self.usage.healthy(margin=margin):
            return HELD_STALE
        if not self.gate.can_write(WRITE_TIMEOUT):
            return HELD_LEASE
        return None

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

    async def _apply(
        self,
        namespace: str,
        governance: Governance,
        decision: Decision,
        current: QuotaSnapshot | None,
    ) -> Applied:
        """Write ``decision`` (conditionally on what was read: the patch carries
        ``current``'s resourceVersion, a delete its uid), or hold it (:meth:`hold_reason`)."""
        if decision.action == "nothing":
            return Applied(current)
        if not self.gate.is_leader:
            return Applied(outcome=Outcome(), result="standby")
        if decision.action in ("create", "patch") and self.kill_switch is not False:
            # the switch moved since the decision: decide again
            return Applied(outcome=Outcome(requeue_at=self.clock()), result="retry")
        why = self.hold_reason(decision)
        if why is not None:
            return self._hold(namespace, decision, why)
        try:
            if decision.action == "create":
                created = await self.quotas.create(
                    namespace,
                    hard_text(decision.hard),
                    dict(decision.set_annotations),
                )
                self._deleted_by_others.discard(namespace)
                if self.kill_switch is not False:
                    # engaged while the create was in flight: a sweep that listed before it
                    # landed missed it, so decide again (the decision is then a delete)
                    self.queue.add_now(namespace)
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

    async def _release(
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
        release = Decision("delete", notes=(why,))
        if not self.gate.is_leader:
            return Applied(outcome=Outcome(), result="standby")
        held = self.hold_reason(release)
        if held is not None:
            return self._hold(namespace, release, held)
        try:
            deleted = await self._delete_managed(namespace, current.uid, "dry-run", why)
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
        await self._emit(
            ObjectRef.quota(namespace, MANAGED_QUOTA_NAME, current.uid),
            "Normal",
            EventReason.QUOTA_RELEASED,
            f"{why}: the managed ResourceQuota {MANAGED_QUOTA_NAME} was released (deleted); "
            f"{would}. Leaving dry run creates it again from current usage",
        )
        return Applied(None)

    async def _apply_delete(
        self, namespace: str, governance: Governance, current: QuotaSnapshot | None
    ) -> Applied:
        uid = current.uid if current else None
        if self.kill_switch:
            deletion = await self._delete_managed(
                namespace, uid, "kill-switch", "kill switch engaged"
            )
            if deletion is not Deletion.DELETED:
                return Applied(outcome=Outcome(requeue_at=self.clock()), result="retry")
            return Applied(None)
        why = governance.reason
        if await self._delete_managed(namespace, uid, "unmanaged", why) is not Deletion.DELETED:
            # gone or replaced meanwhile: decide again
            return Applied(outcome=Outcome(requeue_at=self.clock()), result="retry")
        await self._warn(
            ObjectRef.namespace_object(namespace, self._namespace_uid.get(namespace, "")),
            EventReason.QUOTA_REMOVED,
            f"the managed ResourceQuota {MANAGED_QUOTA_NAME} was deleted: {why}",
            logged=True,
        )
        return Applied(None)

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
        backoff if retryable or the namespace is terminating; otherwise logged at ERROR (as
        ``log_as`` if given) and posted once as a ``QuotaWriteFailed`` Warning (result
        ``invalid``, not retried)."""
        if exc.retryable or namespace_terminating(exc):
            return Applied(outcome=Outcome(retry=True), result="retry")
        if log_as is None:
            log.error("%s of quota in %s refused: %s", what, namespace, exc)
        else:
            log.error("%s of the quota in %s refused: %s", log_as, namespace, exc)
        await self._warn_once(
            ObjectRef.quota(namespace, MANAGED_QUOTA_NAME, uid),
            EventReason.QUOTA_WRITE_FAILED,
            f"{what} of the managed quota refused by the apiserver "
            f"({exc.status} {exc.reason}): {exc.message}",
            key=namespace,
            logged=True,
        )
        return Applied(outcome=Outcome(), result="invalid")
