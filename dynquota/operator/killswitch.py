"""The kill switch (a layer of :class:`~dynquota.operator.reconcile.Operator`).

``dynquota.io/kill-switch=true`` on ``kube-system`` deletes every managed quota and creates
none. The sweep (:meth:`KillSwitch.engage_kill_switch`) needs only a consistent read of
``kube-system`` showing it engaged, and the Lease; every delete of a managed quota, by the
sweep or by a reconcile, goes through :meth:`KillSwitch._delete_managed` (uid precondition,
the shared rate limit ``KILL_SWITCH_DELETE_QPS``, counted by cause).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging

from dynquota._k8s.backoff import Backoff
from dynquota._k8s.errors import KubeError
from dynquota.kube.events import ObjectRef
from dynquota.names import EventReason
from dynquota.operator.policy_status import PolicyStatusWriter
from dynquota.operator.ports import (
    KUBE_SYSTEM,
)
from dynquota.operator.write_gate import KILL_SWITCH_DELETE, UNMANAGING_DELETE
from dynquota.policy import (
    KILL_SWITCH,
    TRACKED_RESOURCES,
    resolve_kill_switch,
)

__all__ = [
    "Deletion",
    "KillSwitch",
]

log = logging.getLogger("dynquota.operator")


class Deletion(enum.Enum):
    """What :meth:`KillSwitch._delete_managed` did: ``DELETED`` the quota; found it ``GONE``
    (404) or replaced (uid precondition); or ``HELD`` it back because the Lease or the kill
    switch no longer allowed the delete after the rate limiter's wait."""

    DELETED = "deleted"
    GONE = "gone"
    HELD = "held"


class KillSwitch(PolicyStatusWriter):
    """The kill-switch state, its confirmation reads and the sweep."""

    # -- kill switch ---------------------------------------------------------------------------

    def observe_kill_switch(self, value: str | None, *, consistent: bool = True) -> None:
        """The ``dynquota.io/kill-switch`` annotation of ``kube-system`` as read now.

        An invalid value keeps the last valid state; with none yet (start-up), the state is
        released if :attr:`managed_quotas_exist` (set at start-up), else unknown (nothing is
        written) — see :func:`dynquota.policy.resolve_kill_switch`.

        ``consistent``: the value comes from a consistent read (a GET or LIST), not from a
        watch event. A release seen in a watch event re-creates nothing until a consistent
        read of ``kube-system`` confirms it; an engage seen in one is confirmed the same way
        by the sweep before it deletes.
        """
        observed_before, self._kill_switch_observed = self._kill_switch_observed, True
        reading = resolve_kill_switch(
            value,
            self.kill_switch,
            managed_quotas_exist=self.managed_quotas_exist if self.kill_switch is None else None,
        )
        for state in ("engaged", "released", "unknown"):
            self.metrics.kill_switch_state.labels(state).set(1 if state == reading.state else 0)
        if reading.warning and reading.warning != self._kill_switch_logged:
            self._kill_switch_logged = reading.warning  # the same value read again: once
            log.warning("%s", reading.warning)
            self._spawn(
                self._warn_once(
                    ObjectRef.namespace_object(KUBE_SYSTEM, self._kube_system_uid),
                    EventReason.KILL_SWITCH_INVALID,
                    reading.warning,
                    key=KUBE_SYSTEM,
                    logged=True,
                )
            )
        if consistent and reading.engaged is False:
            self._release_confirmed = True
        if reading.engaged is None or reading.engaged == self.kill_switch:
            return
        # the first reading since start-up announces nothing (the change was announced when
        # it happened); leaving the unknown state later is a change like any other
        first = not observed_before
        released_by_switch = self.kill_switch is not False and not reading.engaged
        self.kill_switch = reading.engaged
        if released_by_switch:
            self._deleted_by_others.clear()  # deleted by the switch (maybe by a peer)
        self.metrics.kill_switch.set(1 if reading.engaged else 0)
        if self._kill_task is not None:
            self._kill_task.cancel()
            self._kill_task = None
            self._sweeping = False
        if reading.engaged and not self.gate.is_leader:
            log.warning("kill switch engaged: the leader deletes every managed quota (standby)")
        elif reading.engaged:
            log.warning("kill switch engaged: deleting every managed quota, creating none")
            self._start_sweep(announce=not first)
        elif not first:
            log.warning("kill switch released: re-creating quotas for every managed namespace")
            if not consistent and self.namespace_reader is not None:
                self._release_confirmed = False
            self._spawn(self._release_kill_switch())
        self.queue.add_all(list(self.namespaces))

    async def confirm_kill_switch(self, engaged: bool) -> bool:
        """Whether a consistent read of ``kube-system`` shows the kill switch ``engaged``
        (``True``) or released (``False``), as the in-memory state says.

        Retries the read with backoff (each request has its own timeout) while the in-memory
        state still says ``engaged``; returns ``False`` once it says otherwise. A read that
        disagrees is applied (:meth:`on_namespace`) and ``False`` is returned. Without a
        :attr:`namespace_reader` the watch event is trusted: ``True``.
        """
        if self.namespace_reader is None:
            return True
        backoff = Backoff(initial=1.0, maximum=30.0)
        while self.kill_switch is engaged:
            try:
                obj = await self.namespace_reader.read_namespace(KUBE_SYSTEM)
            except KubeError as exc:
                delay = backoff.next_delay()
                log.warning(
                    "kill switch: reading %s to confirm it failed (%s); retrying in %.1f s",
                    KUBE_SYSTEM,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
                continue
            value = ((obj.get("metadata") or {}).get("annotations") or {}).get(KILL_SWITCH)
            if resolve_kill_switch(value, engaged).engaged is engaged:
                return True
            log.warning(
                "kill switch: a watch event said %s but a consistent read of %s does not; "
                "acting on the read",
                "engaged" if engaged else "released",
                KUBE_SYSTEM,
            )
            self.on_namespace(None, obj)
            return False
        return False

    def _start_sweep(self, announce: bool = False) -> None:
        # marked before any reconcile queued with it can run, so they leave deletes to it
        self._sweeping = not self.settings.dry_run
        self._kill_task = self._spawn(self.engage_kill_switch(announce=announce))

    async def engage_kill_switch(self, announce: bool = False) -> int:
        """Delete every managed quota in the cluster (rate-limited); returns how many this
        sweep deleted (quotas already gone, 404, are not counted).

        Called when the switch engages, at start-up and when this replica becomes leader
        while it is engaged. Lists the managed quotas and deletes them, then lists again until
        a list comes back empty (so a quota created meanwhile is not missed); while it runs,
        reconciles leave deletes to it. Each deletion is logged; the summary is one WARNING
        line with exact counts. Stops early if the switch is released or leadership is lost.
        """
        self._sweeping = not self.settings.dry_run
        try:
            return await self._sweep(announce)
        finally:
            self._sweeping = False

    async def _sweep(self, announce: bool) -> int:
        """The body of :meth:`engage_kill_switch`."""
        if not await self.confirm_kill_switch(True):
            return 0
        if announce and self.gate.is_leader:
            await self._emit(
                ObjectRef.namespace_object(KUBE_SYSTEM, self._kube_system_uid),
                "Normal",
                EventReason.KILL_SWITCH_ENGAGED,
                f"{KILL_SWITCH}=true: deleting every managed quota "
                f"(at most {self.settings.kill_switch_delete_qps:g}/s); none is created",
            )
        if self.settings.dry_run:
            try:
                found = await self.quotas.list_managed()
            except KubeError as exc:
                log.warning("(dry run) kill switch: listing managed quotas failed: %s", exc)
                return 0
            for quota in found:
                log.warning(
                    "(dry run) kill switch: would delete the managed quota of %s", quota.namespace
                )
            log.warning("(dry run) kill switch: would delete %d managed quotas", len(found))
            return 0
        deleted = gone = held = 0
        complete = False
        try:
            while self.kill_switch and self.gate.is_leader:
                try:
                    found = await self.quotas.list_managed()
                except KubeError as exc:
                    log.warning("kill switch: listing managed quotas failed: %s; retrying", exc)
                    await asyncio.sleep(2)
                    continue
                if not found:
                    complete = True
                    break
                failed = 0
                for quota in found:
                    if not self.kill_switch:
                        break
                    why = self.write_gate.hold(KILL_SWITCH_DELETE)
                    if why is not None:
                        # the Lease could lapse during the delete: wait for a renew (or for
                        # leadership to be lost, which ends the sweep)
                        self.metrics.writes_held.labels(why).inc()
                        failed += 1
                        break
                    try:
                        result = await self._delete_managed(
                            quota.namespace, quota.uid, "kill-switch", "kill switch engaged"
                        )
                    except KubeError as exc:
                        failed += 1
                        log.warning(
                            "kill switch: deleting the managed quota of %s failed: %s",
                            quota.namespace,
                            exc,
                        )
                        continue
                    if result is Deletion.DELETED:
                        deleted += 1
                    elif result is Deletion.GONE:
                        gone += 1
                    else:
                        held += 1  # the loop's own checks then stop or wait
                if failed:
                    await asyncio.sleep(1)  # then list again and retry what is left
        finally:
            self._sweeping = False
        # a delete held back after its rate-limit wait was not sent: not "already gone"
        skipped = f"{gone} already gone" + (f", {held} held back" if held else "")
        if complete:
            log.warning(
                "kill switch: deleted %d managed quotas (%s); none is left", deleted, skipped
            )
        else:
            log.warning(
                "kill switch: sweep stopped (%s) after deleting %d managed quotas (%s)",
                "released" if not self.kill_switch else "not leading",
                deleted,
                skipped,
            )
        return deleted

    async def _delete_managed(
        self, namespace: str, uid: str | None, cause: str, why: str
    ) -> Deletion:
        """Delete the managed quota of ``namespace`` (the object ``uid``) for ``cause``
        (``kill-switch``, ``unmanaged`` or ``dry-run``): waits for the shared client-side rate
        limit (``KILL_SWITCH_DELETE_QPS``), then asks the write gate again (for ``kill-switch``
        also that the switch is still engaged), logs the deletion with ``why`` at WARNING,
        counts it in ``dynquota_quota_deletions_total{cause}``. Returns
        :attr:`Deletion.DELETED`; :attr:`Deletion.GONE` if the quota was already gone or
        replaced; :attr:`Deletion.HELD` if the check after the wait failed (nothing was sent;
        the caller decides again). Raises :class:`~dynquota._k8s.errors.KubeError`.
        """
        await self._delete_limiter.acquire()
        # The wait can be long (a sweep shares the rate): what allowed this delete — the Lease
        # for the whole request, the kill switch for its deletes — is checked again after it.
        write = KILL_SWITCH_DELETE if cause == "kill-switch" else UNMANAGING_DELETE
        if not self.write_gate.may(write) or (
            cause == "kill-switch" and self.kill_switch is not True
        ):
            log.info(
                "managed quota of %s not deleted (%s): the Lease or the kill switch changed "
                "while the delete waited for its turn",
                namespace,
                cause,
            )
            return Deletion.HELD
        self._own_deletes[namespace] = True
        try:
            deleted = await self.quotas.delete(namespace, uid)
        except BaseException:
            self._own_deletes.pop(namespace, False)
            raise
        if not deleted:
            log.info("managed quota of %s already gone (%s)", namespace, why)
            return Deletion.GONE
        log.warning("deleted the managed quota of %s: %s", namespace, why)
        self.metrics.quota_deletions.labels(cause).inc()
        view = self._record_view(namespace, "delete", (why,))
        view.hard = {}
        for resource in self._metric_keys.get(namespace, TRACKED_RESOURCES):
            with contextlib.suppress(KeyError):
                self.metrics.hard.remove(namespace, resource)
        return Deletion.DELETED

    async def _release_kill_switch(self) -> None:
        if not self._release_confirmed:
            if not await self.confirm_kill_switch(False):
                return
            self._release_confirmed = True
            self.queue.add_all(list(self.namespaces))
        if self.gate.is_leader:
            await self._emit(
                ObjectRef.namespace_object(KUBE_SYSTEM, self._kube_system_uid),
                "Normal",
                EventReason.KILL_SWITCH_RELEASED,
                f"{KILL_SWITCH} released: re-creating quotas for every managed namespace",
            )

    async def on_leadership(self, leading: bool) -> None:
        """Leadership changed: report it; a new leader catches up on everything."""
        self.metrics.leader.set(1 if leading else 0)
        if self.waker is not None:
            if leading:
                self.waker.sweep(self._watched.values())  # raises made while standing by
            else:
                self.waker.reset()
        if leading:
            if self.kill_switch:
                self._start_sweep()
            self.queue.add_all(list(self.namespaces))
            self.mark_policy_status_dirty()
