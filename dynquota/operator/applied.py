"""The writer of the tenant projections ``AppliedDynamicQuota`` (issue 28, part 3).

One task of the leader keeps, in every namespace a policy governs (``managed`` or
``frozen``), one namespaced object ``dynquota`` with the managed-by label whose ``status`` is
:func:`dynquota.policy.applied.project` of what the operator knows: the governing policy, the
kill switch, the managed quota's stamps (handed over after every reconcile through
``Reporter.on_reported``) and the QuotaBudget it is a member of. No extra write ever lands on
the ResourceQuota.

When it writes (figures in ``docs/operator.md``, "What governs me"):

- a *pass* recomputes every namespace (pure, in memory) at most every
  :data:`SWEEP_SECONDS` seconds, and :data:`SETTLE_SECONDS` after a reconcile reported a
  changed quota, a policy's spec changed (:meth:`AppliedWriter.policies_changed`: an edit that
  writes no quota, e.g. of ``writeRate``, waited for the sweep) or the write-rate governor put
  a namespace in or out of the tarpit (so a policy edit or a raise shows within seconds);
- an object is written only when its content changes (:func:`~dynquota.policy.applied.should_write`:
  the stable part at once, the budget's ``used``/``granted``/``free`` alone at most every
  :data:`~dynquota.policy.applied.FIGURES_REFRESH` seconds): at rest, no write at all;
- at most :data:`WRITES_PER_SECOND` writes per second across the cluster (``aiolimiter``),
  each asked of the write gate first (:data:`~dynquota.operator.write_gate.APPLIED`: policies
  and budgets listed, kill switch read, the Lease), and fenced server-side by the chart's Lease
  fence (the objects carry the managed-by label) and confined by ``<fullname>-operator-writes``
  to objects named ``dynquota`` with that label in namespaces it may manage;
- a replace is conditional on the resourceVersion last seen (a 409: list again at the next
  pass); every object is listed again every :data:`RELIST_SECONDS` seconds and after the
  replica gains the Lease (one labelled LIST), so an object deleted or edited by hand comes
  back (an edit is logged);
- a namespace that joins a budget (or moves to another) is written at once with the budget,
  and its figures again as soon as the budget's status counts it (event driven: a budget's
  status change wakes the writer, :meth:`AppliedWriter.budget_status`), not after
  :data:`~dynquota.policy.applied.FIGURES_REFRESH`; joining or leaving wakes it too;
- a namespace no longer governed (opted out, no policy selects it, excluded) loses its object
  (a delete with a uid precondition). The kill switch keeps them, saying
  ``KillSwitchEngaged``: a tenant then reads why its quota vanished. ``dynquota cleanup``
  deletes them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from aiolimiter import AsyncLimiter

from dynquota._k8s.errors import ConflictError, ForbiddenError, KubeError, NotFoundError
from dynquota.kube.applied import AppliedObject
from dynquota.kube.quotas import MANAGED_BY_LABEL, QuotaSnapshot
from dynquota.operator.budgets import Budgets
from dynquota.operator.ports import LeaderView, SwitchView
from dynquota.operator.write_gate import APPLIED, WriteGate
from dynquota.policy import Governance, NamespaceInfo, unit_for
from dynquota.policy.applied import (
    BudgetFacts,
    Projection,
    QuotaFacts,
    WriteRateFacts,
    project,
    should_write,
)
from dynquota.settings import Settings

__all__ = [
    "RELIST_SECONDS",
    "SETTLE_SECONDS",
    "SWEEP_SECONDS",
    "WRITES_PER_SECOND",
    "AppliedStore",
    "AppliedWriter",
]

log = logging.getLogger("dynquota.operator")

SWEEP_SECONDS: Final = 30.0
"""Seconds between two passes when no reconcile asks for one sooner."""
SETTLE_SECONDS: Final = 1.0
"""Seconds a pass waits after a reconcile reported a namespace (a burst is one pass)."""
RELIST_SECONDS: Final = 120.0
"""Seconds between two LISTs of the stored objects (one labelled LIST): an object edited or
deleted by hand is restored within it (600 s let a forged status stand for ten minutes)."""
WRITES_PER_SECOND: Final = 5.0
"""Writes (create, replace, delete) per second at most, across the cluster."""


class AppliedStore(Protocol):
    """The objects' I/O (:class:`dynquota.kube.applied.AppliedClient`)."""

    async def list_managed(self) -> list[AppliedObject]: ...
    async def create(self, namespace: str, status: Mapping[str, Any]) -> AppliedObject: ...
    async def replace(
        self, namespace: str, status: Mapping[str, Any], resource_version: str
    ) -> AppliedObject: ...
    async def delete(self, namespace: str, uid: str) -> bool: ...


@dataclass(frozen=True)
class _Stored:
    uid: str
    resource_version: str
    projection: Projection
    written_at: float | None  # None: listed, not written by this replica
    figures_at: float | None


def _budget_name(projection: Projection) -> str | None:
    budget = projection.stable.get("budget")
    return str(budget["name"]) if isinstance(budget, Mapping) and "name" in budget else None


class AppliedWriter:
    """Keeps the tenant projections (see the module docs).

    Args:
        store: the objects' I/O.
        settings: ``dry_run``, ``override_ttl`` (shown).
        namespaces: the known namespaces (a live mapping: the cluster view's).
        governance: how a namespace is governed now.
        switch: the kill switch (shown; unknown: nothing written).
        budgets: the budget a namespace is a member of (shown).
        leader: only the leader writes.
        write_gate: asked before every write
            (:data:`~dynquota.operator.write_gate.APPLIED`).
        clock: the cluster's time, seconds since the epoch (``asOf``).
        monotonic: the clock of the pass schedule (never steps).
        write_rate: the write-rate governor's facts of a namespace (shown; ``None``: none).
    """

    def __init__(
        self,
        store: AppliedStore,
        *,
        settings: Settings,
        namespaces: Mapping[str, NamespaceInfo],
        governance: Callable[[str], Governance | None],
        switch: SwitchView,
        budgets: Budgets,
        leader: LeaderView,
        write_gate: WriteGate,
        clock: Callable[[], float] = time.time,
        writes_per_second: float = WRITES_PER_SECOND,
        monotonic: Callable[[], float] = time.monotonic,
        write_rate: Callable[[str], WriteRateFacts | None] | None = None,
    ) -> None:
        self.store = store
        self.write_rate = write_rate
        self.settings = settings
        self.namespaces = namespaces
        self.governance = governance
        self.switch = switch
        self.budgets = budgets
        self.leader = leader
        self.write_gate = write_gate
        self.clock = clock
        self.monotonic = monotonic
        self._limiter = AsyncLimiter(max(1.0, writes_per_second), 1.0)
        self._quotas: dict[str, QuotaFacts | None] = {}
        self._stored: dict[str, _Stored] = {}
        self._listed_at: float | None = None
        self._wake = asyncio.Event()
        self._member: dict[str, str | None] = {}
        """Namespace -> the budget it was a member of at its last reconcile."""
        self._joining: dict[str, str] = {}
        """Namespace -> the budget it joined, until figures counting it were written."""
        self._crd_missing = False
        self.writes = 0
        """Writes made (create, replace, delete), for tests and the log."""

    # -- the reconcile's hook ---------------------------------------------------------------------

    def observe(self, namespace: str, quota: QuotaSnapshot | None) -> None:
        """A reconcile reported ``namespace`` with its managed ``quota`` (``None``: none; one
        without the managed-by label: foreign, shown as such)."""
        facts = None
        if quota is not None and quota.managed:
            facts = QuotaFacts(dict(quota.annotations), dict(quota.spec_hard))
        elif quota is not None:
            facts = QuotaFacts(foreign=True, managed_by=quota.labels.get(MANAGED_BY_LABEL))
        if self._quotas.get(namespace, False) != facts:
            self._quotas[namespace] = facts
            self._wake.set()
        member = self.budgets.slicing(namespace).budget
        if self._member.get(namespace) != member:  # joined, left or moved: show it now
            self._member[namespace] = member
            self._wake.set()

    def poke(self, namespace: str) -> None:
        """Something shown of ``namespace`` changed outside a reconcile (the write-rate
        governor put it in or took it out of the tarpit): a pass runs soon."""
        self._wake.set()

    def policies_changed(self) -> None:
        """A policy's spec changed (its bounds, cooldowns, override rules, ``writeRate`` are
        shown; no quota write need follow): a pass runs soon."""
        self._wake.set()

    def budget_status(self, budget: str) -> None:
        """Budget ``budget``'s status changed: a member that just joined it is written again
        (its figures now count it)."""
        if budget in self._joining.values():
            self._wake.set()

    @property
    def woken(self) -> bool:
        """Whether a pass is asked for (tests)."""
        return self._wake.is_set()

    # -- the task -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Pass after pass until cancelled (a failed pass is logged and retried later)."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SWEEP_SECONDS):
                    await self._wake.wait()
                await asyncio.sleep(SETTLE_SECONDS)
            self._wake.clear()
            try:
                await self.sync()
            except KubeError as exc:
                log.warning("tenant projections: %s; retrying in %.0f s", exc, SWEEP_SECONDS)

    async def sync(self) -> int:
        """One pass: list the stored objects if due, then write what changed. Returns the
        number of writes made. Raises ``KubeError`` from the LIST."""
        if not self.leader.is_leader:
            self._listed_at = None  # a new term lists again: another replica may have written
            return 0
        if self.write_gate.hold(APPLIED) is not None:
            return 0
        steady = self.monotonic()
        if self._listed_at is None or steady - self._listed_at >= RELIST_SECONDS:
            try:
                listed = await self.store.list_managed()
            except NotFoundError:
                if not self._crd_missing:
                    log.warning(
                        "tenant projections: the AppliedDynamicQuota CRD is not installed "
                        "(crds/applieddynamicquotas.yaml); none is written"
                    )
                self._crd_missing = True
                return 0
            self._crd_missing = False
            previous, self._stored = (
                self._stored,
                {
                    o.namespace: _Stored(
                        o.uid, o.resource_version, Projection.from_status(o.status), None, None
                    )
                    for o in listed
                },
            )
            for namespace, stored in self._stored.items():
                ours = previous.get(namespace)
                if ours is not None and ours.resource_version != stored.resource_version:
                    log.warning(
                        "tenant projection %s/dynquota was changed by someone else "
                        "(resourceVersion %s, ours %s): restored",
                        namespace,
                        stored.resource_version,
                        ours.resource_version,
                    )
            self._listed_at = steady
        before = self.writes
        for namespace in sorted(set(self.namespaces) | set(self._stored)):
            if not await self._one(namespace):
                break
        return self.writes - before

    def projection(self, namespace: str) -> Projection | None:
        """What ``namespace``'s object should show now (``None``: no object, or not known
        yet: no reconcile reported it)."""
        governance = self.governance(namespace)
        kill_switch = self.switch.engaged
        if governance is None or governance.kind not in ("managed", "frozen"):
            return None
        if kill_switch is None or (namespace not in self._quotas and not kill_switch):
            return None
        budget = None
        slicing = self.budgets.slicing(namespace)
        record = self.budgets.records.get(slicing.budget) if slicing.budget else None
        if record is not None and record.spec is not None:
            hard = {k: unit_for(k).text(v) for k, v in record.spec.hard.items()}
            budget = BudgetFacts(record.name, hard, record.status)
        return project(
            namespace=namespace,
            governance=governance,
            kill_switch=kill_switch,
            dry_run=self.settings.dry_run,
            quota=None if kill_switch else self._quotas.get(namespace),
            budget=budget,
            default_ttl=self.settings.override_ttl,
            write_rate=self.write_rate(namespace) if self.write_rate is not None else None,
        )

    async def _one(self, namespace: str) -> bool:
        """Bring ``namespace``'s object in line; ``False`` when the pass must stop (held)."""
        if namespace not in self.namespaces:
            self._quotas.pop(namespace, None)  # deleted: its objects went with it
            self._stored.pop(namespace, None)
            self._member.pop(namespace, None)
            self._joining.pop(namespace, None)
            return True
        stored = self._stored.get(namespace)
        wanted = self.projection(namespace)
        if wanted is None:
            governance = self.governance(namespace)
            # as the managed quota: removed when unmanaged, never touched when excluded (a
            # namespace being deleted takes its object along: 50 deletes were sent before)
            gone = governance is not None and governance.kind == "unmanaged"
            if stored is None or not gone:
                return True
            return await self._write(namespace, stored, None)
        old = stored.projection if stored is not None else None
        written_at = stored.written_at if stored is not None else None
        joined = _budget_name(wanted)
        if joined is None:
            self._joining.pop(namespace, None)
        elif old is None or _budget_name(old) != joined:
            self._joining[namespace] = joined  # its figures may not count it yet
        prompt = namespace in self._joining
        if not should_write(old, wanted, written_at, self.clock(), prompt):
            return True
        counted = prompt and self._counts(joined, namespace)  # (read before the write's wait)
        done = await self._write(namespace, stored, wanted)
        if counted and self._stored.get(namespace) is not None:
            self._joining.pop(namespace, None)  # figures that count it are written
        return done

    def _counts(self, budget: str | None, namespace: str) -> bool:
        """Whether ``budget``'s stored status lists ``namespace`` (its figures count it)."""
        record = self.budgets.records.get(budget) if budget is not None else None
        return record is not None and namespace in (record.status.get("namespaces") or {})

    async def _write(
        self, namespace: str, stored: _Stored | None, wanted: Projection | None
    ) -> bool:
        if self.write_gate.hold(APPLIED) is not None:
            return False
        async with self._limiter:
            now = self.clock()
            figures_at = now  # figures unchanged since the last write: as old as they were
            old = stored.projection.figures if stored is not None else None
            if stored is not None and wanted is not None and old == wanted.figures:
                figures_at = stored.figures_at or now
            try:
                if wanted is None:
                    assert stored is not None
                    await self.store.delete(namespace, stored.uid)
                    self._stored.pop(namespace, None)
                    log.info("tenant projection %s/dynquota deleted: not managed", namespace)
                else:
                    status = wanted.status(now, figures_at)
                    if stored is None:
                        obj = await self.store.create(namespace, status)
                    else:
                        obj = await self.store.replace(namespace, status, stored.resource_version)
                    self._stored[namespace] = _Stored(
                        obj.uid, obj.resource_version, wanted, now, figures_at
                    )
            except (ConflictError, NotFoundError) as exc:
                # changed or removed by someone else (or created meanwhile): list again next pass
                log.info("tenant projection %s/dynquota: %s; listing again", namespace, exc)
                self._listed_at = None
                self._stored.pop(namespace, None)
                return True
            except ForbiddenError as exc:  # a namespace terminating, or the chart's RBAC off
                log.warning("tenant projection %s/dynquota: %s", namespace, exc)
                return True
            self.writes += 1
            return True
