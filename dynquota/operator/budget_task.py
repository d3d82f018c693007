"""One serialized task per QuotaBudget: a pass decides from ONE LIST of its quotas and writes
the slices (issue #13, ``docs/budgets.md``).

A pass (:meth:`BudgetTasks.run_pass`): hold unless every write would be allowed (policies and
budgets listed, kill switch read and released, informers synced and fresh, Lease valid); one
consistent LIST of the managed quotas (label selector, no per-namespace GET): only the budget's
own (label :data:`~dynquota.names.BUDGET_LABEL`, which every slice write sets) once every
member's quota carries it, else all of them (:meth:`BudgetTasks.list_quotas`); per budgeted key
one :class:`~dynquota.policy.budget.Slice` per member namespace (``used``: ``status.used``, or
the informers' tally when larger; ``demand``: what its policy would set, from
:meth:`~dynquota.operator.budgets.Budgets.shape`) and :func:`~dynquota.policy.budget.allocate`;
then the writes it returns, each a JSON merge-patch conditional on the resourceVersion the LIST
showed: shrinks and bounding writes first, grows last. Each write sets ``spec.hard[key]`` and
the ``dynquota.io/hard.<key>`` record to the same value (so the per-namespace reconcile does
not take it for a manual edit); a grow also stamps ``last-upscale``/``last-change`` (the
policy's upscale cooldown runs from it). A 409 Conflict ends the pass and starts another from a
fresh LIST. The room a shrink frees is counted only when a later LIST shows it in
``status.hard`` (the quota controller's copy): the quota's watch event wakes the task. A patch
refused (400/403/422) or failing (429, 5xx, no answer) is recorded
(:mod:`dynquota.operator.write_failures`: the budget says Ready=False naming it) and the pass is
tried again after :func:`refused_backoff` seconds, until a write succeeds. The status counts
only the writes that landed (:func:`~dynquota.policy.budget.landed`): a refused grow is not
``granted``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from dynquota._k8s.errors import (
    ApiError,
    ConflictError,
    KubeError,
    NotFoundError,
)
from dynquota.kube.quotas import QuotaSnapshot
from dynquota.metrics import Metrics
from dynquota.names import BUDGET_LABEL
from dynquota.operator.budget_report import BudgetReporter, PassResult
from dynquota.operator.budgets import Budgets, leaving, member_slice, reserved
from dynquota.operator.guard_watch import GuardWatch
from dynquota.operator.ports import (
    RECONCILE_TIMEOUT,
    BudgetStatusSink,
    LeaderView,
    QuotaStore,
)
from dynquota.operator.reporting import Reporter
from dynquota.operator.write_failures import WriteFailures
from dynquota.operator.write_gate import BUDGET_SLICES, WriteGate
from dynquota.policy import hard_text
from dynquota.policy.budget import Slice, allocate, landed
from dynquota.policy.budget_guard import guarded_condition
from dynquota.policy.state import (
    BUDGET,
    format_time,
    hard_key,
    last_change_key,
    last_upscale_key,
)
from dynquota.settings import Settings

__all__ = ["BudgetTasks", "refused_backoff"]

log = logging.getLogger("dynquota.operator")

REFUSED_BACKOFF = (5.0, 60.0)
"""Seconds before a pass is tried again after a refused or failing patch: the first, and the
most (doubled after each pass that failed again)."""


def refused_backoff(passes: int) -> float:
    """Seconds until the next pass after ``passes`` (>= 1) passes in a row had a refused or
    failing patch: 5, 10, 20, 40, then 60."""
    first, most = REFUSED_BACKOFF
    return min(most, first * 2.0 ** min(passes - 1, 16))


class BudgetTasks:
    """Starts, wakes and stops one asyncio task per stored QuotaBudget.

    Args:
        budgets: the budgets, their members and demands (wire its ``on_wake`` to
            :meth:`wake` and ``on_records`` to :meth:`sync`).
        quotas: the managed-quota I/O (one LIST a pass, the slice patches).
        write_gate: asked before a pass and before each patch
            (:data:`~dynquota.operator.write_gate.BUDGET_SLICES`).
        leader: only the leader passes.
        reporter: the budgets' Events.
        status: the budgets' status writes (``None``: none written; unit tests).
        metrics: the budget metrics and held writes.
        settings: ``resync_seconds`` (an idle task's pass), ``coalesce_seconds``,
            ``budget_guard_kinds``.
        tally: the informers' count of a key in a namespace at an instant (``None``: not
            counted), for a member's usage.
        clock: the cluster's time, seconds since the epoch (the grow stamps).
        failures: the failing writes of the members' quotas, for the budget's Ready (``None``:
            none known).
        foreign: a namespace's quota named ``dynquota`` without the managed-by label, as the
            watch delivered it (``None``: none), for the budget's ``AtRisk`` message.
        guard: the chart's budget guard as read (:class:`~dynquota.operator.guard_watch.
            GuardWatch`; started and stopped with the tasks) for the budgets' ``Guarded``;
            ``None``: not read (``Guarded`` is never ``True``).
    """

    def __init__(
        self,
        budgets: Budgets,
        *,
        quotas: QuotaStore,
        write_gate: WriteGate,
        leader: LeaderView,
        reporter: Reporter,
        status: BudgetStatusSink | None,
        metrics: Metrics,
        settings: Settings,
        tally: Callable[[str, str, float], int | None],
        clock: Callable[[], float] = time.time,
        failures: WriteFailures | None = None,
        foreign: Callable[[str], QuotaSnapshot | None] = lambda _ns: None,
        guard: GuardWatch | None = None,
    ) -> None:
        self.budgets = budgets
        self.guard = guard
        self._guard_task: asyncio.Task[None] | None = None
        self.foreign = foreign
        self.quotas = quotas
        self.write_gate = write_gate
        self.leader = leader
        self.metrics = metrics
        self.settings = settings
        self.tally = tally
        self.clock = clock
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._wakes: dict[str, asyncio.Event] = {}
        self.reporter = BudgetReporter(
            budgets,
            reporter=reporter,
            write_gate=write_gate,
            status=status,
            metrics=metrics,
            failures=failures,
        )
        self._refused_passes: dict[str, int] = {}
        """Budget -> passes in a row with a refused or failing patch (the backoff's count)."""
        self._held_logged: dict[str, float] = {}
        self.running = False
        self.last: dict[str, PassResult] = {}
        """Budget -> its last pass (for tests and ``plan``)."""
        self._labelled: dict[str, set[str]] = {}
        """Budget -> the namespaces whose quota carries its label, as last listed or written
        (absent: not listed since the start, so the first pass LISTs every managed quota)."""

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start a task for every known budget (once the workqueue runs)."""
        self.running = True
        if self.guard is not None and self._guard_task is None:
            self.guard.on_change = self.wake_all
            self._guard_task = asyncio.create_task(self.guard.run(), name="dynquota-guard")
        self.sync()

    def sync(self) -> None:
        """A task for every stored budget, none for a deleted one (forgotten in metrics)."""
        if not self.running:
            return
        for name in self.budgets.records:
            if name not in self._tasks:
                self._wakes[name] = asyncio.Event()
                self._wakes[name].set()
                self._tasks[name] = asyncio.create_task(
                    self._run(name), name=f"dynquota-budget-{name}"
                )
        for name in [n for n in self._tasks if n not in self.budgets.records]:
            self._tasks.pop(name).cancel()
            self._wakes.pop(name, None)
            self.last.pop(name, None)
            self._refused_passes.pop(name, None)
            self.reporter.forget(name)

    def wake(self, name: str) -> None:
        """Ask ``name``'s task for a pass (coalesced: one pass for many wake-ups)."""
        event = self._wakes.get(name)
        if event is not None:
            event.set()

    def wake_all(self) -> None:
        """Ask every task for a pass (leadership gained, kill switch released)."""
        for event in self._wakes.values():
            event.set()

    async def stop(self) -> None:
        """Cancel every task (idempotent)."""
        self.running = False
        tasks = list(self._tasks.values())
        self._tasks.clear()
        if self._guard_task is not None:
            tasks.append(self._guard_task)
            self._guard_task = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self, name: str) -> None:
        wake = self._wakes[name]
        idle = float(self.settings.resync_seconds)
        due: float | None = None
        failures = 0
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(idle if due is None else due):
                    await wake.wait()
            wake.clear()
            if self.settings.coalesce_seconds:
                await asyncio.sleep(self.settings.coalesce_seconds)  # one pass per burst
            try:
                async with asyncio.timeout(RECONCILE_TIMEOUT):
                    result = await self.run_pass(name)
                due, failures = result.again, 0
            except (KubeError, TimeoutError) as exc:
                failures += 1
                due = min(30.0, 2.0**failures)
                log.warning("budget %s: pass failed (%s); again in %.0f s", name, exc, due)
            except Exception:  # a bug must not end the budget's task for good
                failures += 1
                due = min(30.0, 2.0**failures)
                log.exception("budget %s: pass failed; again in %.0f s", name, due)

    # -- one pass -------------------------------------------------------------------------------

    async def run_pass(self, name: str) -> PassResult:
        """One pass for budget ``name`` (see the module docs). Raises ``KubeError`` (the LIST
        or a status write failed: the task retries with backoff)."""
        record = self.budgets.records.get(name)
        result = PassResult()
        if record is None:
            return result
        if not self.leader.is_leader:
            result.again = 1.0  # a standby looks again (cheap: no API call)
            return result
        if record.spec is None:
            await self.reporter.report(record, result, [], None)
            return result
        why = self.write_gate.hold(BUDGET_SLICES)  # a pass may shrink
        if why is not None:
            self.metrics.writes_held.labels(why).inc()
            now = time.monotonic()
            if now - self._held_logged.get(name, -math.inf) >= 60.0:
                self._held_logged[name] = now
                log.warning("budget %s: holding its pass: %s; retrying", name, why)
            result.again = 1.0
            return result
        members = self.budgets.members(name)
        listed = await self.list_quotas(name, members)
        now = self.clock()
        # quotas this budget last wrote whose namespace is no member now: their slices stay
        # held until their reconcile re-sized them (docs/budgets.md, "Leaving a budget")
        result.leaving = leaving(name, set(members), listed)
        sliced: dict[str, list[Slice]] = {}
        for key, budget in sorted(record.spec.hard.items()):
            slices = sliced[key] = [
                self._slice(ns, key, listed.get(ns), now, budget, len(members)) for ns in members
            ]
            held = reserved(key, result.leaving, listed)
            result.allocations[key] = allocate(budget, slices, held)
        versions = {ns: q.resource_version for ns, q in listed.items()}
        failed = retrying = False
        for grows in (False, True):  # shrinks and bounding writes first, grows last
            for ns in members:
                quota = listed.get(ns)
                if quota is None:
                    continue  # no quota yet: the reconcile creates it (at risk meanwhile)
                values = {}
                for key, allocation in result.allocations.items():
                    value = allocation.writes.get(ns)
                    old = quota.hard_int(key)
                    if value is not None and (old is not None and value > old) == grows:
                        values[key] = value
                # The chart's budget guard admits creates only where the quota's mark equals
                # the namespace's label, so a member is marked only once its slice is
                # enforced: status.hard shows no key above spec.hard (a joiner's own, larger
                # quota is not in force any more).
                # Slice writes to a marked member keep the mark; an unmarked one gets its slices
                # first and, once the quota controller copied them, the mark alone.
                marked = quota.annotations.get(BUDGET) == name
                labelled = quota.labels.get(BUDGET_LABEL) == name
                enforced = _enforced(quota, result.allocations)
                mark_only = (
                    not values
                    and not grows
                    and not any(ns in a.writes for a in result.allocations.values())
                    and (not labelled or (not marked and enforced))
                )  # a label alone where an earlier version marked without it (one write)
                if not values and not mark_only:
                    continue
                if not self.write_gate.may(BUDGET_SLICES):  # asked again before each patch
                    result.again = 1.0
                    break
                try:
                    body = (
                        _mark(name, marked or enforced)
                        if mark_only
                        else self._body(name, name if marked else None, values, quota, grows, now)
                    )
                    patched = await self.quotas.patch(ns, body, versions[ns])
                except ConflictError:
                    self.metrics.write_conflicts.labels("retried").inc()
                    result.again = 0.0  # changed since the LIST: decide again from a new one
                    break
                except NotFoundError:
                    result.again = 1.0
                    break
                except KubeError as exc:
                    # refused (a human must act: RBAC, an admission policy) or failing (retried):
                    # recorded by the quota store's recorder, so the status written below says
                    # Ready=False; tried again with backoff until a write succeeds
                    failed = True
                    if isinstance(exc, ApiError) and not exc.retryable:
                        log.error("budget %s: patch of the quota in %s refused: %s", name, ns, exc)
                        continue  # the other members' slices are still written
                    log.warning("budget %s: patch of the quota in %s failed: %s", name, ns, exc)
                    retrying = True
                    result.again = 0.0  # the backoff below
                    break
                versions[ns] = patched.resource_version
                self._labelled.setdefault(name, set()).add(ns)
                if mark_only:
                    log.info("budget %s: the quota of %s marked as its slice", name, ns)
                    continue
                result.writes.setdefault(ns, {}).update(values)
                log.info("budget %s: slice of %s set to %s", name, ns, hard_text(values))
            if result.again is not None:
                break
        # the status counts what landed: a write refused, failing or not tried granted nothing
        for key, allocation in result.allocations.items():
            wrote = {ns for ns, values in result.writes.items() if key in values}
            result.allocations[key] = landed(allocation, sliced[key], wrote)
        if failed:
            passes = self._refused_passes[name] = self._refused_passes.get(name, 0) + 1
            backoff = refused_backoff(passes)
            # (a 409 or 404 in the same pass still asks for the next pass sooner)
            again = result.again
            result.again = backoff if again is None or retrying else min(again, backoff)
        else:
            self._refused_passes.pop(name, None)
        log.debug(
            "budget %s: pass over %s: %s", name, members,
            {k: (a.writes, a.targets, a.committed) for k, a in result.allocations.items()},
        )  # fmt: skip
        guarded = guarded_condition(
            record.spec.hard,
            self.settings.budget_guard_kinds,
            await self.guard.seen() if self.guard is not None else None,
        )
        foreign = {
            ns: q for ns in members if ns not in listed and (q := self.foreign(ns)) is not None
        }
        await self.reporter.report(record, result, members, guarded, listed, foreign)
        self.last[name] = result
        return result

    async def list_quotas(self, name: str, members: list[str]) -> dict[str, QuotaSnapshot]:
        """The quotas a pass of budget ``name`` decides from, namespace -> quota, from one
        consistent LIST: only those labelled :data:`~dynquota.names.BUDGET_LABEL` = ``name``
        when every member's quota carried it at the last LIST or write (the steady state:
        O(budget), not O(cluster)); every managed quota otherwise (the first pass since the
        start, a joiner, a re-created or a missing quota), and also when the labelled LIST lacks
        a member (its label was removed or its quota re-created since). Labelled quotas of
        namespaces that left stay listed: :func:`leaving` tells them by the mark.

        Raises: ``KubeError``.
        """
        quotas = self.quotas
        known = self._labelled.get(name)
        if known is not None and known.issuperset(members):
            own = {q.namespace: q for q in await quotas.list_managed(f"{BUDGET_LABEL}={name}")}
            if own.keys() >= set(members):
                self._labelled[name] = set(own)
                return own
            log.info("budget %s: a member's quota lost its label: listing every quota", name)
        listed = {q.namespace: q for q in await quotas.list_managed()}
        self._labelled[name] = {
            ns for ns, q in listed.items() if q.labels.get(BUDGET_LABEL) == name
        }
        return listed

    def _slice(
        self, ns: str, key: str, quota: QuotaSnapshot | None, now: float, hard: int, members: int
    ) -> Slice:
        tally = self.tally(ns, key, now)
        demand = self.budgets.demand_for(ns, key, hard, members)
        return member_slice(ns, key, quota, tally, demand, self.budgets.step_for(ns, key))

    @staticmethod
    def _body(
        budget: str,
        mark: str | None,
        values: Mapping[str, int],
        quota: QuotaSnapshot,
        grows: bool,
        now: float,
    ) -> dict[str, Any]:
        texts = hard_text(values)
        annotations: dict[str, str] = {BUDGET: mark} if mark is not None else {}
        for key, text in texts.items():
            annotations[hard_key(key)] = text
            if grows or quota.hard_int(key) is None:  # a grow, or the key's first slice
                stamp = format_time(now)
                annotations[last_upscale_key(key)] = stamp
                annotations[last_change_key(key)] = stamp
        return {
            "metadata": {"labels": {BUDGET_LABEL: budget}, "annotations": annotations},
            "spec": {"hard": texts},
        }


def _mark(budget: str, mark: bool) -> dict[str, Any]:
    """A write of budget ``budget``'s label, and its mark with ``mark`` (the slice is
    enforced)."""
    metadata: dict[str, Any] = {"labels": {BUDGET_LABEL: budget}}
    if mark:
        metadata["annotations"] = {BUDGET: budget}
    return {"metadata": metadata}


def _enforced(quota: QuotaSnapshot, keys: Mapping[str, object]) -> bool:
    """Whether ``quota``'s ``status.hard`` has every one of ``keys`` and none above its
    ``spec.hard``: what the budget wrote (or less) is what admission enforces."""
    for key in keys:
        spec, enforced = quota.hard_int(key), quota.status_hard_int(key)
        if spec is None or enforced is None or enforced > spec:
            return False
    return True
