"""The kill switch (a part of :class:`~dynquota.operator.assembly.Operator`, built alone in
tests).

``dynquota.io/kill-switch=true`` on ``kube-system`` deletes every managed quota and creates
none. :class:`KillSwitch` owns the switch's state (:class:`SwitchState`, which the write gate
and the writers read), reads it from ``kube-system`` (:meth:`KillSwitch.observe`), confirms a
change seen in a watch event with a consistent read (:meth:`KillSwitch.confirm`), and sweeps
(:meth:`KillSwitch.engage`): the sweep needs only a consistent read of ``kube-system`` showing it
engaged, and the Lease. Every delete goes through the :class:`~dynquota.operator.deleter.Deleter`
(uid precondition, the shared rate limit ``KILL_SWITCH_DELETE_QPS``, counted by cause).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dynquota._k8s.backoff import Backoff
from dynquota._k8s.errors import KubeError
from dynquota.kube.events import ObjectRef
from dynquota.metrics import Metrics
from dynquota.names import EventReason
from dynquota.operator.deleter import Deleter, Deletion
from dynquota.operator.ports import (
    KUBE_SYSTEM,
    LeaderView,
    NamespaceReader,
    QuotaStore,
)
from dynquota.operator.reporting import Reporter
from dynquota.operator.write_gate import KILL_SWITCH_DELETE, WriteGate
from dynquota.policy import KILL_SWITCH, resolve_kill_switch
from dynquota.settings import Settings

__all__ = ["KillSwitch", "SwitchState"]

log = logging.getLogger("dynquota.operator")


@dataclass
class SwitchState:
    """The kill switch as this replica knows it (:class:`~dynquota.operator.ports.SwitchView`;
    written only by :class:`KillSwitch`).

    ``engaged``: ``True``, ``False`` released, ``None`` unknown (nothing is written).
    ``release_confirmed``: ``False`` from a watch event releasing the switch until a
    consistent read of ``kube-system`` confirms it (creates are held meanwhile).
    ``managed_quotas_exist``: whether managed quotas existed at start-up (read only when the
    annotation is invalid then; ``None``: not known). ``sweeping``: a sweep deletes, so
    reconciles leave deletes to it.
    """

    engaged: bool | None = None
    release_confirmed: bool = True
    managed_quotas_exist: bool | None = None
    sweeping: bool = False


class KillSwitch:
    """The kill switch's state, its confirming reads and the sweep.

    Args:
        state: the state it owns (handed in so the write gate can read it first).
        settings: ``dry_run`` (a sweep only says what it would delete),
            ``kill_switch_delete_qps`` (said in the ``KillSwitchEngaged`` Event).
        deleter: every delete of a managed quota.
        reporter: Events and the ``KillSwitchInvalid`` Warning.
        write_gate: asked before every delete of the sweep.
        quotas: lists the managed quotas to sweep.
        leader: only the leader sweeps.
        metrics: ``dynquota_kill_switch`` and ``dynquota_kill_switch_state``.
        requeue_all: queues every known namespace (on each change of the switch).
        reread: applies a consistent read of ``kube-system`` that disagrees with a watch
            event, as a Namespace listing (the operator's ``on_namespace``).
        kube_system_uid: the uid of ``kube-system`` (for the Events on it).
        namespace_reader: consistent reads of ``kube-system`` confirming a change seen in a
            watch event before it deletes or re-creates quotas (``None``: the event is
            trusted; unit tests only).
    """

    def __init__(
        self,
        state: SwitchState,
        settings: Settings,
        *,
        deleter: Deleter,
        reporter: Reporter,
        write_gate: WriteGate,
        quotas: QuotaStore,
        leader: LeaderView,
        metrics: Metrics,
        requeue_all: Callable[[], None],
        reread: Callable[[Mapping[str, Any]], None],
        kube_system_uid: Callable[[], str],
        namespace_reader: NamespaceReader | None = None,
    ) -> None:
        self.state = state
        self.settings = settings
        self.deleter = deleter
        self.reporter = reporter
        self.write_gate = write_gate
        self.quotas = quotas
        self.leader = leader
        self.metrics = metrics
        self.requeue_all = requeue_all
        self.reread = reread
        self.kube_system_uid = kube_system_uid
        self.namespace_reader = namespace_reader
        self._observed = False
        self._logged: str | None = None
        self._sweep_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- reading the switch -------------------------------------------------------------------

    def observe(self, value: str | None, *, consistent: bool = True) -> None:
        """The ``dynquota.io/kill-switch`` annotation of ``kube-system`` as read now.

        An invalid value keeps the last valid state; with none yet (start-up), the state is
        released if ``managed_quotas_exist`` (set at start-up), else unknown (nothing is
        written) — see :func:`dynquota.policy.resolve_kill_switch`.

        ``consistent``: the value comes from a consistent read (a GET or LIST), not from a
        watch event. A release seen in a watch event re-creates nothing until a consistent
        read of ``kube-system`` confirms it; an engage seen in one is confirmed the same way
        by the sweep before it deletes.
        """
        state = self.state
        observed_before, self._observed = self._observed, True
        reading = resolve_kill_switch(
            value,
            state.engaged,
            managed_quotas_exist=state.managed_quotas_exist if state.engaged is None else None,
        )
        for name in ("engaged", "released", "unknown"):
            self.metrics.kill_switch_state.labels(name).set(1 if name == reading.state else 0)
        if reading.warning and reading.warning != self._logged:
            self._logged = reading.warning  # the same value read again: once
            log.warning("%s", reading.warning)
            self._spawn(
                self.reporter.warn_once(
                    ObjectRef.namespace_object(KUBE_SYSTEM, self.kube_system_uid()),
                    EventReason.KILL_SWITCH_INVALID,
                    reading.warning,
                    key=KUBE_SYSTEM,
                    logged=True,
                )
            )
        if consistent and reading.engaged is False:
            state.release_confirmed = True
        if reading.engaged is None or reading.engaged == state.engaged:
            return
        # the first reading since start-up announces nothing (the change was announced when
        # it happened); leaving the unknown state later is a change like any other
        first = not observed_before
        released_by_switch = state.engaged is not False and not reading.engaged
        state.engaged = reading.engaged
        if released_by_switch:
            self.deleter.released()  # deleted by the switch (maybe by a peer)
        self.metrics.kill_switch.set(1 if reading.engaged else 0)
        if self._sweep_task is not None:
            self._sweep_task.cancel()
            self._sweep_task = None
            state.sweeping = False
        if reading.engaged and not self.leader.is_leader:
            log.warning("kill switch engaged: the leader deletes every managed quota (standby)")
        elif reading.engaged:
            log.warning("kill switch engaged: deleting every managed quota, creating none")
            self.start_sweep(announce=not first)
        elif not first:
            log.warning("kill switch released: re-creating quotas for every managed namespace")
            if not consistent and self.namespace_reader is not None:
                state.release_confirmed = False
            self._spawn(self._release())
        self.requeue_all()

    async def confirm(self, engaged: bool) -> bool:
        """Whether a consistent read of ``kube-system`` shows the kill switch ``engaged``
        (``True``) or released (``False``), as the state says.

        Retries the read with backoff (each request has its own timeout) while the state
        still says ``engaged``; returns ``False`` once it says otherwise. A read that
        disagrees is applied (``reread``) and ``False`` is returned. Without a
        ``namespace_reader`` the watch event is trusted: ``True``.
        """
        if self.namespace_reader is None:
            return True
        backoff = Backoff(initial=1.0, maximum=30.0)
        while self.state.engaged is engaged:
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
            self.reread(obj)
            return False
        return False

    # -- the sweep ----------------------------------------------------------------------------

    def start_sweep(self, announce: bool = False) -> None:
        """Start a sweep in the background (:meth:`engage`)."""
        # marked before any reconcile queued with it can run, so they leave deletes to it
        self.state.sweeping = not self.settings.dry_run
        self._sweep_task = self._spawn(self.engage(announce=announce))

    async def engage(self, announce: bool = False) -> int:
        """Delete every managed quota in the cluster (rate-limited); returns how many this
        sweep deleted (quotas already gone, 404, are not counted).

        Called when the switch engages, at start-up and when this replica becomes leader
        while it is engaged. Lists the managed quotas and deletes them, then lists again until
        a list comes back empty (so a quota created meanwhile is not missed); while it runs,
        reconciles leave deletes to it. Each deletion is logged; the summary is one WARNING
        line with exact counts. Stops early if the switch is released or leadership is lost.
        """
        self.state.sweeping = not self.settings.dry_run
        try:
            return await self._sweep(announce)
        finally:
            self.state.sweeping = False

    async def _sweep(self, announce: bool) -> int:
        """The body of :meth:`engage`."""
        if not await self.confirm(True):
            return 0
        if announce and self.leader.is_leader:
            await self.reporter.emit(
                ObjectRef.namespace_object(KUBE_SYSTEM, self.kube_system_uid()),
                "Normal",
                EventReason.KILL_SWITCH_ENGAGED,
                f"{KILL_SWITCH}=true: deleting every managed quota "
                f"(at most {self.settings.kill_switch_delete_qps:g}/s); none is created",
            )
        if self.settings.dry_run:
            return await self._dry_run_sweep()
        deleted = gone = held = 0
        complete = False
        try:
            while self.state.engaged and self.leader.is_leader:
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
                    if not self.state.engaged:
                        break
                    why = self.write_gate.hold(KILL_SWITCH_DELETE)
                    if why is not None:
                        # the Lease could lapse during the delete: wait for a renew (or for
                        # leadership to be lost, which ends the sweep)
                        self.metrics.writes_held.labels(why).inc()
                        failed += 1
                        break
                    try:
                        result = await self.deleter.delete(
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
            self.state.sweeping = False
        # a delete held back after its rate-limit wait was not sent: not "already gone"
        skipped = f"{gone} already gone" + (f", {held} held back" if held else "")
        if complete:
            log.warning(
                "kill switch: deleted %d managed quotas (%s); none is left", deleted, skipped
            )
        else:
            log.warning(
                "kill switch: sweep stopped (%s) after deleting %d managed quotas (%s)",
                "released" if not self.state.engaged else "not leading",
                deleted,
                skipped,
            )
        return deleted

    async def _dry_run_sweep(self) -> int:
        """What a sweep would delete, logged (the operator in dry run deletes nothing)."""
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

    async def _release(self) -> None:
        if not self.state.release_confirmed:
            if not await self.confirm(False):
                return
            self.state.release_confirmed = True
            self.requeue_all()
        if self.leader.is_leader:
            await self.reporter.emit(
                ObjectRef.namespace_object(KUBE_SYSTEM, self.kube_system_uid()),
                "Normal",
                EventReason.KILL_SWITCH_RELEASED,
                f"{KILL_SWITCH} released: re-creating quotas for every managed namespace",
            )

    def on_leadership(self, leading: bool) -> None:
        """Leadership changed: a new leader sweeps if the switch is engaged."""
        if leading and self.state.engaged:
            self.start_sweep()

    # -- background tasks ---------------------------------------------------------------------

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def stop(self) -> None:
        """Cancel the sweep and the Event tasks this part started, and wait for them."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
