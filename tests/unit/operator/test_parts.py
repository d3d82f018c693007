"""Each part of the operator built alone, with the port fakes (issue 25): what it owns, what it
is handed, and that it works without the assembly (``operator/assembly.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dynquota._k8s.workqueue import Outcome, WorkQueue
from dynquota.kube.events import ObjectRef
from dynquota.kube.quotas import QuotaSnapshot
from dynquota.metrics import Metrics
from dynquota.operator.apply import QuotaWriter
from dynquota.operator.budget_task import BudgetTasks
from dynquota.operator.budgets import Budgets
from dynquota.operator.cluster_view import ClusterView, PolicySeen
from dynquota.operator.companion import Companions
from dynquota.operator.daemons import NodeGrowth
from dynquota.operator.deleter import Deleter, Deletion
from dynquota.operator.killswitch import KillSwitch, SwitchState
from dynquota.operator.policy_status import PolicyStatusWriter
from dynquota.operator.ports import HELD_KILL_SWITCH, HELD_POLICIES, HELD_STALE
from dynquota.operator.reconcile import Reconciler
from dynquota.operator.reporting import NEW_VALUE_AFTER, Reporter
from dynquota.operator.stall import StallWatch
from dynquota.operator.write_gate import (
    LIMIT_RANGE,
    PartsKnowledge,
    Write,
    WriteGate,
)
from dynquota.policy import Decision
from dynquota.settings import Settings
from dynquota.testing.wait import async_wait_until

from .fakes import (
    LABELLED,
    T0,
    Clock,
    FakeEvents,
    FakeLimitRanges,
    FakeQuotas,
    FakeStatus,
    FakeUsage,
    Leader,
    namespace,
    policy,
)

SETTINGS = Settings(metrics_port=0, probe_port=0, coalesce_seconds=0, unmanage_brake_share=1.0)


class Requeued:
    """A :class:`~dynquota.operator.ports.Requeue` that records what it was asked."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.now: list[str] = []

    def add(self, key: str) -> None:
        self.keys.append(key)

    def add_now(self, key: str) -> None:
        self.now.append(key)

    def add_all(self, keys: Any) -> None:
        self.keys.extend(keys)


def known_cluster(clock: Clock, usage: FakeUsage | None = None) -> ClusterView:
    """A cluster view that has listed the policies (one, ``p``), with ``usage`` set."""
    cluster = ClusterView(SETTINGS, clock=clock)
    cluster.usage = usage or FakeUsage()
    cluster.on_policy(None, policy())
    cluster.on_policies_synced()
    return cluster


def listed_budgets(cluster: ClusterView) -> Budgets:
    budgets = Budgets(SETTINGS, cluster.namespaces, cluster.governance)
    budgets.on_budget_list([])
    return budgets


def gate_of(cluster: ClusterView, state: SwitchState, leader: Leader) -> WriteGate:
    return WriteGate(PartsKnowledge(cluster, listed_budgets(cluster), state, leader))


def reporter_of(gate: WriteGate, clock: Clock, events: FakeEvents | None = None) -> Reporter:
    return Reporter(events or FakeEvents(), gate, Metrics(), clock, watched=lambda _ns: None)


# -- the cluster view --------------------------------------------------------------------------


def test_the_cluster_view_applies_events_and_says_what_changed() -> None:
    cluster = ClusterView(SETTINGS, clock=Clock())
    seen = cluster.on_namespace("ADDED", namespace("team-a", {"tenant": "a"}, rv=5))
    assert seen is not None
    assert (seen.changed, seen.before, seen.after) == (True, None, {"tenant": "a"})
    # a start-up listing older than the watch's event changes nothing
    assert cluster.on_namespace(None, namespace("team-a", rv=4)) is None
    same = cluster.on_namespace("MODIFIED", namespace("team-a", {"tenant": "a"}, rv=6))
    assert same is not None
    assert same.changed is False
    assert cluster.governance("team-a") is not None
    assert cluster.policies_listed is False
    assert cluster.on_policy(None, policy()) is PolicySeen.SPEC
    assert cluster.on_policy(None, policy()) is PolicySeen.NOTHING
    assert cluster.on_policies_synced() is True
    assert cluster.on_policies_synced() is False  # only the first list counts
    quota = FakeQuotas()
    quota.put("team-a", {"pods": "10"})
    quota.set_used("team-a", {"pods": "3"})
    seen_quota = cluster.on_quota("ADDED", quota.objects["team-a"])
    assert seen_quota is not None
    assert seen_quota.gone is False
    assert cluster.status_used("team-a") == {"pods": 3}
    assert cluster.with_quota() == ["team-a"]
    deleted = cluster.on_namespace("DELETED", namespace("team-a", rv=7))
    assert deleted is not None
    assert deleted.deleted is True
    assert cluster.namespaces == {}
    assert cluster.watched("team-a") is None
    assert cluster.with_quota() == []


def test_the_cluster_view_answers_what_the_write_gate_asks_of_the_informers() -> None:
    cluster = ClusterView(SETTINGS, clock=Clock())
    assert cluster.usage_synced() is False  # no usage informers yet
    usage = FakeUsage()
    cluster.usage = usage
    assert (cluster.usage_synced(), cluster.informers_fresh()) == (True, True)
    cluster.objects_fresh = lambda margin: False
    assert cluster.informers_fresh() is False
    usage.counts[("team-a", "pods")] = 7
    assert cluster.count("team-a", "pods", T0) == 7
    assert cluster.count("team-a", "secrets", T0) is None  # not counted by the informers


# -- the write gate on the parts that own what it asks -----------------------------------------


def test_the_write_gate_reads_the_parts_that_own_the_knowledge() -> None:
    clock, leader, state = Clock(), Leader(), SwitchState()
    cluster = ClusterView(SETTINGS, clock=clock)
    cluster.usage = FakeUsage()
    gate = gate_of(cluster, state, leader)
    shrink = Write("quota", shrinks=True)
    assert gate.hold(shrink) == HELD_POLICIES
    cluster.on_policies_synced()
    assert gate.hold(shrink) == HELD_KILL_SWITCH  # the switch not read yet
    state.engaged = False
    assert gate.hold(shrink) is None
    cluster.objects_fresh = lambda margin: False
    assert gate.hold(shrink) == HELD_STALE
    assert gate.hold(LIMIT_RANGE) is None


# -- the reporter ------------------------------------------------------------------------------


async def test_the_reporter_posts_through_the_gate_and_warns_once() -> None:
    clock, leader, state = Clock(), Leader(), SwitchState(engaged=False)
    events = FakeEvents()
    reporter = reporter_of(gate_of(known_cluster(clock), state, leader), clock, events)
    ref = ObjectRef.namespace_object("team-a", "uid-team-a")
    for _ in range(3):
        await reporter.warn_once(ref, "QuotaAtLimit", "at its limit", key="team-a")
    await reporter.warn_once(ref, "QuotaAtLimit", "at its limit", key="team-a", value="other")
    assert events.reasons("team-a") == ["QuotaAtLimit"]  # another value: not within a minute
    clock.now += NEW_VALUE_AFTER
    await reporter.warn_once(ref, "QuotaAtLimit", "at its limit", key="team-a", value="other")
    assert events.reasons("team-a") == ["QuotaAtLimit", "QuotaAtLimit"]
    leader.is_leader = False  # no Lease: no Event
    await reporter.emit(ref, "Normal", "Woken", "woke")
    assert len(events.posted) == 2
    reporter.quota_deleted("team-a", "not managed")
    assert (reporter.views["team-a"].action, reporter.views["team-a"].hard) == ("delete", {})
    reporter.forget("team-a")
    assert reporter.views == {}


def test_the_reporter_sets_a_keys_series_from_new_inputs_and_again_after_a_removal() -> None:
    """Issue 25: a key whose inputs did not change since its series were set is skipped; a
    removal of one of its series (the quota deleted) makes the next report set them again."""
    clock, leader, state = Clock(), Leader(), SwitchState(engaged=False)
    cluster = known_cluster(clock)
    cluster.on_namespace(None, namespace("team-a"))
    governance = cluster.governance("team-a")
    assert governance is not None
    reporter = reporter_of(gate_of(cluster, state, leader), clock)
    quota = QuotaSnapshot("team-a", "dynquota", "uid", "1", spec_hard={"pods": "14"})

    def sample(name: str) -> float | None:
        labels = {"namespace": "team-a", "resource": "pods", "enforcement": "unknown"}
        value: float | None = reporter.metrics.registry.get_sample_value(name, labels)
        return value

    usage = {"pods": 10, "configmaps": 3}
    for _ in range(2):
        reporter.report_usage("team-a", governance, usage, usage, usage, quota)
        assert (sample("dynquota_hard"), sample("dynquota_usage")) == (14, 10)
    reporter.quota_deleted("team-a", "not managed")
    assert sample("dynquota_hard") is None
    reporter.report_usage("team-a", governance, usage, usage, usage, quota)
    assert (sample("dynquota_hard"), sample("dynquota_usage")) == (14, 10)
    grown = {"pods": 11, "configmaps": 3}
    reporter.report_usage("team-a", governance, grown, usage, grown, quota)
    assert (sample("dynquota_usage"), sample("dynquota_tally"), sample("dynquota_drift")) == (
        11,
        11,
        1,
    )


# -- the deleter -------------------------------------------------------------------------------


async def test_the_deleter_deletes_counts_and_tells_its_own_deletes_from_others() -> None:
    clock, leader, state = Clock(), Leader(), SwitchState(engaged=False)
    cluster = known_cluster(clock)
    cluster.on_namespace(None, namespace("team-a"))
    quotas = FakeQuotas()
    told: list[tuple[str, str]] = []
    metrics = Metrics()
    deleter = Deleter(
        quotas,
        gate_of(cluster, state, leader),
        state,
        metrics,
        SETTINGS.model_copy(update={"kill_switch_delete_qps": 1000.0}),
        governance=cluster.governance,
        on_deleted=lambda ns, why: told.append((ns, why)),
    )
    quotas.put("team-a", {"pods": "10"})
    gone = QuotaSnapshot.from_object(quotas.objects["team-a"])
    assert await deleter.delete("team-a", gone.uid, "unmanaged", "opted out") is Deletion.DELETED
    assert told == [("team-a", "opted out")]
    assert metrics.quota_deletions.labels("unmanaged")._value.get() == 1
    deleter.observe("DELETED", gone)  # our own: not someone else's
    assert deleter.previously_managed("team-a", None, None) is False
    # the kill switch's delete needs it still engaged after the rate limiter's wait
    quotas.put("team-a", {"pods": "10"})
    assert await deleter.delete("team-a", None, "kill-switch", "engaged") is Deletion.HELD
    assert await deleter.delete("team-b", None, "unmanaged", "gone") is Deletion.GONE
    # someone else deleted a quota of a managed namespace: a re-creation, until created
    deleter.observe("DELETED", QuotaSnapshot.from_object(quotas.objects["team-a"]))
    assert deleter.previously_managed("team-a", None, None) is True
    deleter.created("team-a")
    assert deleter.previously_managed("team-a", None, None) is False


# -- the kill switch ---------------------------------------------------------------------------


async def test_the_kill_switch_reads_the_annotation_and_sweeps_through_the_deleter() -> None:
    clock, leader, state = Clock(), Leader(), SwitchState()
    cluster = known_cluster(clock)
    gate = gate_of(cluster, state, leader)
    quotas = FakeQuotas()
    for name in ("team-a", "team-b"):
        quotas.put(name, {"pods": "10"})
    reporter = reporter_of(gate, clock)
    settings = SETTINGS.model_copy(update={"kill_switch_delete_qps": 1000.0})
    deleter = Deleter(
        quotas,
        gate,
        state,
        Metrics(),
        settings,
        governance=cluster.governance,
        on_deleted=reporter.quota_deleted,
    )
    requeued: list[str] = []
    switch = KillSwitch(
        state,
        settings,
        deleter=deleter,
        reporter=reporter,
        write_gate=gate,
        quotas=quotas,
        leader=leader,
        metrics=Metrics(),
        requeue_all=lambda: requeued.append("all"),
        reread=lambda obj: None,
        kube_system_uid=lambda: "uid-kube-system",
    )
    switch.observe(None)  # the first reading: released, nothing to announce
    assert (state.engaged, requeued) == (False, ["all"])
    switch.observe("True", consistent=False)
    assert state.engaged is True
    assert state.sweeping is True  # marked at once: reconciles leave deletes to the sweep
    await async_wait_until(lambda: not quotas.objects, "the sweep deleted every quota")
    await async_wait_until(lambda: not state.sweeping, "the sweep ended")
    assert sorted(ns for _, ns in quotas.writes) == ["team-a", "team-b"]
    assert requeued == ["all", "all"]
    await switch.stop()


# -- the policy status writer ------------------------------------------------------------------


async def test_the_policy_status_writer_writes_what_differs() -> None:
    clock, leader, state = Clock(), Leader(), SwitchState(engaged=False)
    cluster = known_cluster(clock)
    cluster.on_namespace(None, namespace("team-a"))
    gate = gate_of(cluster, state, leader)
    sink = FakeStatus()
    writer = PolicyStatusWriter(
        cluster,
        sink,
        reporter=reporter_of(gate, clock),
        write_gate=gate,
        leader=leader,
        metrics=Metrics(),
        stall=StallWatch(SETTINGS.quota_sync_period, Metrics(), lambda stalled: None),
        settings=SETTINGS,
    )
    assert await writer.write() == 1
    assert sink.patches[0][0] == "p"
    assert sink.patches[0][1]["namespaces"] == 1
    assert await writer.write() == 0  # what was written is what is stored now
    leader.is_leader = False
    cluster.on_namespace(None, namespace("team-b"))
    assert await writer.write() == 0  # a standby writes nothing


# -- the quota writer --------------------------------------------------------------------------


@dataclass
class Writing:
    """A quota writer and the parts it is handed, built by hand on the fakes."""

    cluster: ClusterView
    budgets: Budgets
    gate: WriteGate
    events: FakeEvents
    reporter: Reporter
    quotas: FakeQuotas
    deleter: Deleter
    writer: QuotaWriter


def writing(
    clock: Clock, state: SwitchState, leader: Leader, usage: FakeUsage | None = None
) -> Writing:
    cluster = known_cluster(clock, usage)
    budgets = listed_budgets(cluster)
    gate = WriteGate(PartsKnowledge(cluster, budgets, state, leader))
    events = FakeEvents()
    reporter = reporter_of(gate, clock, events)
    quotas = FakeQuotas()
    deleter = Deleter(
        quotas,
        gate,
        state,
        Metrics(),
        SETTINGS,
        governance=cluster.governance,
        on_deleted=reporter.quota_deleted,
    )
    writer = QuotaWriter(
        quotas,
        deleter=deleter,
        reporter=reporter,
        write_gate=gate,
        switch=state,
        cluster=cluster,
        leader=leader,
        requeue=Requeued(),
        metrics=Metrics(),
        settings=SETTINGS,
        clock=clock,
    )
    return Writing(cluster, budgets, gate, events, reporter, quotas, deleter, writer)


async def test_the_quota_writer_writes_or_holds_one_decision() -> None:
    clock, leader, state = Clock(), Leader(), SwitchState(engaged=False)
    parts = writing(clock, state, leader)
    writer, quotas = parts.writer, parts.quotas
    governance = writer.cluster.governance("team-a")
    assert governance is None  # the writer decides nothing: it is handed a decision
    writer.cluster.on_namespace(None, namespace("team-a"))
    governance = writer.cluster.governance("team-a")
    assert governance is not None
    create = Decision("create", hard={"pods": 10})
    applied = await writer.apply("team-a", governance, create, None)
    assert applied.outcome is None
    assert quotas.hard("team-a") == {"pods": "10"}
    state.engaged = None  # the switch unread: a create decided before is decided again
    again = await writer.apply("team-a", governance, create, None)
    assert (again.outcome, again.result) == (Outcome(requeue_at=T0), "retry")
    state.engaged = False
    writer.cluster.policies_listed = False
    held = await writer.apply("team-a", governance, Decision("patch", hard={"pods": 5}), None)
    assert held.result == "held"
    assert quotas.writes == [("create", "team-a")]


# -- the companion LimitRanges -----------------------------------------------------------------


async def test_the_companions_write_the_defaults_a_policy_asks_for() -> None:
    clock, leader, state = Clock(), Leader(), SwitchState(engaged=False)
    cluster = ClusterView(SETTINGS, clock=clock)
    cluster.usage = FakeUsage()
    body = policy()
    body["spec"]["resources"]["requests.cpu"] = {"minimum": "1", "maximum": "8"}
    body["spec"]["defaultRequests"] = {"cpu": "100m"}
    cluster.on_policy(None, body)
    cluster.on_policies_synced()
    cluster.on_namespace(None, namespace("team-a"))
    gate = gate_of(cluster, state, leader)
    ranges = FakeLimitRanges()
    companions = Companions(ranges, reporter=reporter_of(gate, clock), write_gate=gate)
    governance = cluster.governance("team-a")
    assert governance is not None
    assert await companions.missing_defaults("team-a", governance, None) == frozenset()
    assert ranges.calls == [("list", "team-a"), ("create", "team-a")]
    assert ranges.objects["team-a"][0]["metadata"]["labels"] == LABELLED
    assert await companions.missing_defaults("team-a", governance, None) == frozenset()
    assert len(ranges.calls) == 3  # in place now: the next decision lists once, writes nothing
    ranges.objects["team-a"] = []
    state.engaged = True  # the gate holds a companion write: the compute key stays held
    companions.forget("team-a")
    held = await companions.missing_defaults("team-a", governance, None)
    assert held == frozenset({"requests.cpu"})


# -- the budget tasks --------------------------------------------------------------------------


async def test_the_budget_tasks_pass_without_the_operator() -> None:
    clock, leader, state = Clock(), Leader(leading=False), SwitchState(engaged=False)
    cluster = known_cluster(clock)
    budgets = listed_budgets(cluster)
    gate = WriteGate(PartsKnowledge(cluster, budgets, state, leader))
    tasks = BudgetTasks(
        budgets,
        quotas=FakeQuotas(),
        write_gate=gate,
        leader=leader,
        reporter=reporter_of(gate, clock),
        status=None,
        metrics=Metrics(),
        settings=SETTINGS,
        tally=cluster.count,
        clock=clock,
    )
    budgets.on_budget(None, {"metadata": {"name": "b", "generation": 1}, "spec": {"hard": {}}})
    assert (await tasks.run_pass("b")).again == 1.0  # a standby looks again, cheaply


# -- the reconciler, on parts built by hand ----------------------------------------------------


async def test_the_reconciler_decides_with_the_parts_it_is_handed() -> None:
    clock, leader, state = Clock(), Leader(), SwitchState(engaged=False)
    usage = FakeUsage()
    usage.counts[("team-a", "pods")] = 14
    parts = writing(clock, state, leader, usage)
    cluster, reporter, gate, quotas = parts.cluster, parts.reporter, parts.gate, parts.quotas
    cluster.on_namespace(None, namespace("team-a"))
    metrics = Metrics()
    forgotten: list[str] = []

    async def nothing(namespace: str) -> Outcome:
        return Outcome()

    reconciler = Reconciler(
        SETTINGS,
        quotas=quotas,
        cluster=cluster,
        writer=parts.writer,
        companions=Companions(None, reporter=reporter, write_gate=gate),
        reporter=reporter,
        deleter=parts.deleter,
        switch=state,
        budgets=parts.budgets,
        stall=StallWatch(SETTINGS.quota_sync_period, metrics, lambda stalled: None),
        node_growth=NodeGrowth(
            None, lambda ns: None, lambda ns: False, lambda: True, lambda ns, key: 0
        ),
        queue=WorkQueue(nothing, clock=clock),
        leader=leader,
        metrics=metrics,
        forget=forgotten.append,
        clock=clock,
    )
    outcome = await reconciler.reconcile("team-a")
    assert quotas.hard("team-a") == {"pods": "20", "configmaps": "50"}
    assert parts.events.reasons("team-a") == ["Resized"]
    assert outcome == Outcome()  # created: nothing to look at before an event
    assert await reconciler.reconcile("gone") == Outcome()  # no such namespace: forgotten
    assert forgotten == ["gone"]
