"""The write-rate governor: a namespace's create/delete churn puts it in the APF tarpit (a part
of :class:`~dynquota.operator.assembly.Operator`, built alone in tests; issue 32).

:class:`Governor` counts, per namespace and second, the creates and deletes of pods and
ConfigMaps the usage informers' watch events show (:meth:`Governor.observe`, fed by
``UsageWatcher(on_write=...)``: no watch of its own), and once a second decides each counted or
tarpitted namespace with :func:`~dynquota.policy.churn.decide_churn` (``now`` from the monotonic
clock; the rule: the governing policy's ``spec.writeRate``; ``held_at_maximum``, a quota held
at its maximum under refusals, is not fed yet: refused creates reach no watch). The namespaces
it holds are the namespace list of the tarpit FlowSchema's one rule
(:func:`~dynquota.policy.churn.tarpit_rules`; ``DYNQUOTA_TARPIT_FLOW_SCHEMA``, empty: off).

- The FlowSchema is read (a consistent GET; :class:`TarpitStore`) before any write and again
  every ``resync_seconds`` (every :data:`HELD_REREAD` s while one is held); while its rules are
  not known nothing is written (held:
  ``tarpit-unknown``), and nothing is decided before the policies are listed (a rule unknown is
  not a rule removed). A namespace its rules list when first read is held (a restart:
  :mod:`dynquota.policy.churn` rule 5, no quiet clock starts before this replica did).
- A write sets the whole rule list, conditional on the resourceVersion of that read (409: read
  again, decide again), through the write gate (``TARPIT_ENGAGE`` when it lists a namespace the
  FlowSchema does not, else ``TARPIT_RELEASE``). Nothing is written while the listed namespaces
  are the ones held: 0 writes at rest. Rules reset by ``helm upgrade --force`` (or anyone) are
  written again at the next read.
- The kill switch engaged: every namespace is released (no rules), none is put in. Dry run (the
  operator's or the policy's): decided and reported, never listed. Never a system namespace,
  the operator's own or an excluded one (:meth:`~dynquota.settings.Settings.excluded`). A
  deleted namespace is forgotten (and taken out of the rules).

Reports (after the write, or at the decision in dry run): the Events ``Tarpitted`` (Warning)
and ``Released`` (Normal) on the namespace's managed quota ``dynquota`` (where its tenants read
dynquota's Events; the chart's policy allows no other Event there) with the decision's reason,
``dynquota_tarpitted{namespace, enforcement}``, the tenant projection's facts (:meth:`facts`).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from dynquota._k8s.errors import ConflictError, KubeError
from dynquota.kube.events import EventType, ObjectRef
from dynquota.kube.flowschema import TarpitSchema
from dynquota.kube.quotas import MANAGED_QUOTA_NAME
from dynquota.metrics import Metrics
from dynquota.names import EventReason
from dynquota.operator.ports import (
    HELD_POLICIES,
    HELD_TARPIT,
    LeaderView,
    SwitchView,
)
from dynquota.operator.reporting import Reporter
from dynquota.operator.write_gate import TARPIT_ENGAGE, TARPIT_RELEASE, WriteGate
from dynquota.operator.write_rate import Rule
from dynquota.policy.applied import WriteRateFacts
from dynquota.policy.churn import (
    ChurnSample,
    TarpitState,
    decide_churn,
    tarpit_rules,
    tarpitted,
)
from dynquota.policy.durations import format_duration
from dynquota.policy.models import WRITE_RATE_MAX_WINDOW
from dynquota.settings import Settings

__all__ = ["HELD_REREAD", "TICK", "Governor", "TarpitStore"]

log = logging.getLogger("dynquota.operator")

TICK: Final = 1.0
"""Seconds between two passes of :meth:`Governor.run` (engage latency: one tick and a write)."""
HELD_REREAD: Final = 10.0
"""Seconds between reads of the FlowSchema while a namespace is held (else ``resync_seconds``)."""


class TarpitStore(Protocol):
    """The tarpit FlowSchema's I/O (:class:`dynquota.kube.flowschema.FlowSchemaClient`)."""

    async def read(self, name: str) -> TarpitSchema: ...
    async def set_rules(
        self, name: str, rules: Sequence[Mapping[str, Any]], resource_version: str
    ) -> TarpitSchema: ...


class Governor:
    """See the module docs.

    Args:
        settings: ``tarpit_flow_schema`` (empty: off), ``tarpit_resources``, ``namespace``
            (the release namespace: never listed), ``excluded``, ``resync_seconds`` (how often
            the FlowSchema is read again), ``dry_run``.
        store: the FlowSchema's I/O (``None``: off).
        write_gate: asked before every write of the rules.
        reporter: Events.
        metrics: ``dynquota_tarpitted``, ``dynquota_writes_held_total``.
        leader: only the leader decides and writes.
        switch: the kill switch (engaged: release all, engage none).
        rule_of: the :class:`~dynquota.operator.write_rate.Rule` of a namespace now
            (:func:`~dynquota.operator.write_rate.rule_for`).
        exists: whether a namespace exists (is known to the cluster view).
        quota_uid: the uid of a namespace's managed quota (the Events' object; ``""``: none).
        monotonic: seconds on a clock that never steps.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store: TarpitStore | None,
        write_gate: WriteGate,
        reporter: Reporter,
        metrics: Metrics,
        leader: LeaderView,
        switch: SwitchView,
        rule_of: Callable[[str], Rule],
        exists: Callable[[str], bool],
        quota_uid: Callable[[str], str],
        monotonic: Callable[[], float],
    ) -> None:
        self.settings = settings
        self.name = settings.tarpit_flow_schema
        self.store = store if self.name else None
        self.write_gate = write_gate
        self.reporter = reporter
        self.metrics = metrics
        self.leader = leader
        self.switch = switch
        self.rule_of = rule_of
        self.exists = exists
        self.quota_uid = quota_uid
        self.monotonic = monotonic
        self.started_at = monotonic()
        """When this replica started counting (s): no quiet clock starts earlier."""
        self.schema: TarpitSchema | None = None
        """The FlowSchema as last read or written (``None``: not known; nothing is written)."""
        self._read_at = -math.inf
        self._counts: dict[str, deque[list[int]]] = {}
        """Namespace -> ``[second, creates, deletes]`` buckets, oldest first."""
        self._states: dict[str, TarpitState] = {}
        self._dry: set[str] = set()
        """Namespaces whose tarpitted state is a dry-run decision (never listed)."""
        self._why: dict[str, str] = {}
        """The last decision's reason per namespace (the Events, ``plan``)."""
        self._engaged: dict[str, str] = {}
        """Why each tarpitted namespace was put in (the tenant projection's reason)."""
        self.on_change: Callable[[str], None] | None = None
        """Called with a namespace put in or taken out of the tarpit (the tenant projections'
        writer; the runtime sets it)."""
        self._reported: dict[str, str] = {}
        """Namespace -> the enforcement its ``dynquota_tarpitted`` series carries."""
        self._held: str | None = None

    @property
    def enabled(self) -> bool:
        """Whether the governor runs (a FlowSchema named and a store given)."""
        return self.store is not None

    # -- counting ---------------------------------------------------------------------------

    def observe(self, namespace: str, resource: str, event_type: str) -> None:
        """A watch event added (``ADDED``) or removed (``DELETED``) an object of ``resource``
        in ``namespace`` (``UsageWatcher``'s ``on_write``)."""
        if self.store is None:
            return
        second = math.floor(self.monotonic())
        buckets = self._counts.setdefault(namespace, deque())
        if not buckets or buckets[-1][0] != second:
            buckets.append([second, 0, 0])
            while buckets[0][0] <= second - WRITE_RATE_MAX_WINDOW:
                buckets.popleft()
        buckets[-1][1 if event_type == "ADDED" else 2] += 1

    def samples(self, namespace: str) -> list[ChurnSample]:
        """The counts of ``namespace`` (one sample per second that saw a write)."""
        return [ChurnSample(*bucket) for bucket in self._counts.get(namespace, ())]

    def tarpitted(self) -> dict[str, str]:
        """Namespace -> why it was put in, for each in the tarpit now (dry run: it says so)."""
        return {
            ns: self._engaged.get(ns, "") + (" (dry run: not enforced)" if ns in self._dry else "")
            for ns, state in self._states.items()
            if state.tarpitted
        }

    def facts(self, namespace: str) -> WriteRateFacts | None:
        """What the tenant projection of ``namespace`` shows of the governor: its policy's
        ``writeRate`` and, while in the tarpit, why (``None``: off, or no writeRate)."""
        rule = self.rule_of(namespace) if self.store is not None else None
        if rule is None or rule.rate is None:
            return None
        rate = rule.rate
        crd = {
            "limit": rate.limit,
            "window": format_duration(rate.window),
            "quietPeriod": format_duration(rate.quiet_period),
        }
        return WriteRateFacts(crd, self.tarpitted().get(namespace))

    def forget(self, namespace: str) -> None:
        """``namespace`` is gone: its counts and state go (the next write leaves it out)."""
        self._counts.pop(namespace, None)
        self._states.pop(namespace, None)
        self._dry.discard(namespace)
        self._why.pop(namespace, None)
        self._engaged.pop(namespace, None)
        self._unreport(namespace)

    # -- the loop -----------------------------------------------------------------------------

    async def run(self, tick: float = TICK) -> None:
        """Decide and write every ``tick`` seconds until cancelled (nothing when off)."""
        if self.store is None:
            return
        while True:
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("write-rate governor: a pass failed")
            await asyncio.sleep(tick)

    async def step(self) -> None:
        """One pass: read the FlowSchema when due, decide every namespace, write the rules if
        the namespaces they list are not the ones held, report."""
        if self.store is None:
            return
        if not self.leader.is_leader:
            self.schema = None  # read again once leading: another replica may have written
            return
        now = self.monotonic()
        # while one is held, read often: a `helm upgrade --force` resets the rules
        due = float(self.settings.resync_seconds)
        if any(state.tarpitted for state in self._states.values()):
            due = min(due, HELD_REREAD)
        if self.schema is None or now - self._read_at >= due:
            await self._read(now)
        if self.schema is None:
            return
        if not self.write_gate.knowledge.policies_listed:
            # no rule is known yet: deciding now would release what the policies still hold
            self._hold(f"tarpit FlowSchema {self.name} not written: {HELD_POLICIES}", None)
            return
        self._decide(now)
        await self._write()
        await self._report()

    async def _read(self, now: float) -> None:
        assert self.store is not None
        try:
            schema = await self.store.read(self.name)
        except KubeError as exc:
            self._hold(f"reading the tarpit FlowSchema {self.name} failed ({exc})", HELD_TARPIT)
            self.schema = None
            return
        first = self.schema is None and not self._states
        self.schema, self._read_at = schema, now
        listed = tarpitted(schema.rules)
        if first and listed:
            log.info(
                "write-rate governor: %s lists %s: held until quiet for their quiet period",
                self.name,
                ", ".join(sorted(listed)),
            )
        for ns in listed:  # found in the tarpit (a restart, a new leader): held, rule 5
            if ns not in self._states:
                self._states[ns] = TarpitState(True)
                self._why[ns] = self._engaged[ns] = (
                    f"found in the tarpit FlowSchema {self.name} at start: held until quiet "
                    "for its quiet period"
                )

    def _decide(self, now: float) -> None:
        engaged = self.switch.engaged
        for ns in sorted(set(self._counts) | set(self._states)):
            if not self.exists(ns) or self.settings.excluded(ns):
                self.forget(ns)
                continue
            rule = self.rule_of(ns)
            state = self._states.get(ns, TarpitState())
            if rule.rate is None or engaged:
                if rule.rate is None:
                    self._counts.pop(ns, None)
                if state.tarpitted:
                    why = "the kill switch is engaged" if engaged else "no writeRate governs it"
                    self._set(ns, TarpitState(), f"released from the tarpit: {why}", rule)
                continue
            self._prune(ns, now, rule.rate.window)
            decision = decide_churn(
                rule=rule.rate,
                samples=self.samples(ns),
                state=state,
                held_at_maximum=False,
                now=now,
                started_at=self.started_at,
            )
            dry = decision.state.tarpitted and rule.dry_run
            if decision.state != state or dry != (ns in self._dry):  # dry run switched: now
                self._set(ns, decision.state, decision.reason, rule)
            elif decision.action == "hold":
                self._why[ns] = decision.reason

    def _set(self, ns: str, state: TarpitState, why: str, rule: Rule) -> None:
        before = self._states.get(ns, TarpitState())
        if state == TarpitState():
            self._states.pop(ns, None)
            self._engaged.pop(ns, None)
        else:
            self._states[ns] = state
            if not before.tarpitted:
                self._engaged[ns] = why
        if state.tarpitted and rule.dry_run:
            self._dry.add(ns)
        else:
            self._dry.discard(ns)
        self._why[ns] = why

    def _prune(self, ns: str, now: float, window: int) -> None:
        buckets = self._counts.get(ns)
        while buckets and buckets[0][0] <= now - window:
            buckets.popleft()
        if buckets is not None and not buckets:
            del self._counts[ns]

    def held(self) -> set[str]:
        """The namespaces the FlowSchema's rules should list now."""
        return {
            ns
            for ns, state in self._states.items()
            if state.tarpitted and ns not in self._dry and not self.settings.excluded(ns)
        }

    async def _write(self) -> None:
        assert self.store is not None
        assert self.schema is not None
        listed = tarpitted(self.schema.rules)
        wanted = self.held()
        if wanted == listed:
            self._held = None
            return
        write = TARPIT_ENGAGE if wanted - listed else TARPIT_RELEASE
        why = self.write_gate.hold(write)
        if why is not None and write is TARPIT_ENGAGE:
            wanted &= listed  # the releases may still go
            if wanted != listed:
                write, why = TARPIT_RELEASE, self.write_gate.hold(TARPIT_RELEASE)
        if why is not None:
            self._hold(f"tarpit FlowSchema {self.name} not written: {why}", why)
            return
        if wanted == listed:
            return
        rules = tarpit_rules(wanted, self.settings.tarpit_resources, self.settings.namespace)
        try:
            self.schema = await self.store.set_rules(self.name, rules, self.schema.resource_version)
        except ConflictError:
            log.info("write-rate governor: %s changed since it was read; reading again", self.name)
            self.schema = None
            return
        except KubeError as exc:
            self._hold(f"writing the tarpit FlowSchema {self.name} failed ({exc})", None)
            return
        self._held = None
        listing = ", ".join(sorted(wanted)) or "no namespace"
        log.info("write-rate governor: %s now lists %s", self.name, listing)

    def _hold(self, message: str, reason: str | None) -> None:
        """Say (once per ``message``) why nothing was written; count ``reason`` in
        ``dynquota_writes_held_total`` (``None``: a failure, the API metrics count it)."""
        if reason is not None:
            self.metrics.writes_held.labels(reason).inc()
        if message != self._held:
            log.warning("write-rate governor: %s; retrying", message)
            self._held = message

    # -- reports ------------------------------------------------------------------------------

    async def _report(self) -> None:
        listed = tarpitted(self.schema.rules) if self.schema is not None else set()
        now = {ns: "dry-run" for ns in self._dry if ns in self._states}
        now.update({ns: "enforced" for ns in listed if ns in self._states})
        for ns in sorted(set(now) | set(self._reported)):
            before, after = self._reported.get(ns), now.get(ns)
            if before == after:
                continue
            if self.on_change is not None:
                self.on_change(ns)
            if after is None:
                self._unreport(ns)
                if self.exists(ns):
                    await self._event(ns, "Normal", EventReason.RELEASED, before == "dry-run")
                continue
            if before is not None:
                self.metrics.tarpitted.remove(ns, before)
            self.metrics.tarpitted.labels(ns, after).set(1)
            self._reported[ns] = after
            if before is None:
                await self._event(ns, "Warning", EventReason.TARPITTED, after == "dry-run")

    def _unreport(self, ns: str) -> None:
        enforcement = self._reported.pop(ns, None)
        if enforcement is not None:
            self.metrics.tarpitted.remove(ns, enforcement)

    async def _event(self, ns: str, type_: EventType, reason: EventReason, dry_run: bool) -> None:
        why = self._why.get(ns, "")
        if reason is EventReason.TARPITTED:
            what = (
                f"{why}: writes ({', '.join(self.settings.tarpit_resources)}) in this namespace "
                "go to the API Priority and Fairness tarpit (few seats; 429 with Retry-After "
                "when they are taken) until it is quiet (docs/tenants.md, 'Why am I getting "
                "429s')"
            )
        else:
            what = why
        if dry_run:
            what = f"dry run, not enforced: {what}"
        ref = ObjectRef.quota(ns, MANAGED_QUOTA_NAME, self.quota_uid(ns))
        await self.reporter.emit(ref, type_, reason, what)
