"""The write-rate governor (:mod:`dynquota.operator.governor`) in the production wiring, faked
only at its ports: the tarpit FlowSchema (:class:`FakeTarpit`), Events, the Lease."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from dynquota._k8s.errors import ConflictError, ForbiddenError
from dynquota.kube.flowschema import TarpitSchema
from dynquota.operator.governor import HELD_REREAD
from dynquota.policy.applied import WriteRateFacts
from dynquota.policy.churn import tarpit_rules, tarpitted
from dynquota.settings import Settings

from .fakes import (
    Clock,
    FakeEvents,
    FakeQuotas,
    FakeStatus,
    FakeUsage,
    Leader,
    Wired,
    namespace,
    policy,
    policy_list,
)

NAME = "dq-tarpit"
RELEASE_NS = "dynquota-system"
RESOURCES = ["pods", "configmaps"]


class FakeTarpit:
    """The tarpit FlowSchema in memory: rules, a resourceVersion, a write log, failures."""

    def __init__(self, listed: Sequence[str] = ()) -> None:
        self.rules: list[Mapping[str, Any]] = tarpit_rules(listed, RESOURCES, RELEASE_NS)
        self.rv = 10
        self.reads = 0
        self.writes: list[list[str]] = []
        self.fail_reads: list[Exception] = []

    def reset(self) -> None:
        """What a ``helm upgrade`` that re-applies the chart's object does: no rules."""
        self.rules, self.rv = [], self.rv + 1

    def _schema(self) -> TarpitSchema:
        return TarpitSchema(tuple(self.rules), str(self.rv))

    async def read(self, name: str) -> TarpitSchema:
        assert name == NAME
        self.reads += 1
        if self.fail_reads:
            raise self.fail_reads.pop(0)
        return self._schema()

    async def set_rules(
        self, name: str, rules: Sequence[Mapping[str, Any]], resource_version: str
    ) -> TarpitSchema:
        assert name == NAME
        if resource_version != str(self.rv):
            raise ConflictError(409, "Conflict", "modified")
        self.rules, self.rv = list(rules), self.rv + 1
        self.writes.append(sorted(tarpitted(rules)))
        return self._schema()


class Bed:
    """One operator with the governor on, a policy ``p`` with ``writeRate`` (limit 10 in 60 s,
    quiet period 120 s) over the namespaces labelled ``team=a``, and ``t1`` in it."""

    def __init__(self, tarpit: FakeTarpit | None = None, dry_run: bool = False) -> None:
        self.clock = Clock()
        self.tarpit = tarpit if tarpit is not None else FakeTarpit()
        self.events = FakeEvents()
        self.leader = Leader()
        self.settings = Settings(
            metrics_port=0,
            probe_port=0,
            coalesce_seconds=0,
            unmanage_brake_share=1.0,
            namespace=RELEASE_NS,
            tarpit_flow_schema=NAME,
            resync_seconds=600,
        )
        self.op = Wired(
            self.settings,
            quotas=FakeQuotas(),
            events=self.events,
            policy_status=FakeStatus(),
            gate=self.leader,
            clock=self.clock,
            tarpit=self.tarpit,
        )
        self.op.cluster.usage = FakeUsage()
        self.op.on_namespace(None, namespace("kube-system"))
        self.generation = 1
        body = policy(selector={"matchLabels": {"team": "a"}}, dry_run=dry_run)
        body["spec"]["writeRate"] = {"limit": 10, "window": "60s", "quietPeriod": "120s"}
        policy_list(self.op, [body])
        self.op.budgets.on_budget_list([])
        for ns in ("t1", "t2", RELEASE_NS):
            self.op.on_namespace(None, namespace(ns, {"team": "a"}))

    @property
    def governor(self) -> Any:
        return self.op.governor

    def edit(self, limit: int = 10, window: str = "60s", dry_run: bool = False) -> None:
        """The policy edited (a new generation): ``writeRate`` and ``dryRun``."""
        self.generation += 1
        body = policy(
            selector={"matchLabels": {"team": "a"}}, dry_run=dry_run, generation=self.generation
        )
        body["spec"]["writeRate"] = {"limit": limit, "window": window, "quietPeriod": "120s"}
        body["metadata"]["resourceVersion"] = str(self.generation)
        self.op.on_policy("MODIFIED", body)

    def churn(self, ns: str, writes: int) -> None:
        for i in range(writes):
            self.governor.observe(ns, "configmaps", "ADDED" if i % 2 == 0 else "DELETED")

    async def step(self, seconds: float = 0) -> None:
        self.clock.now += seconds
        await self.governor.step()

    def listed(self) -> set[str]:
        return tarpitted(self.tarpit.rules)

    def sample(self, ns: str, enforcement: str) -> float | None:
        labels = {"namespace": ns, "enforcement": enforcement}
        return self.op.metrics.registry.get_sample_value("dynquota_tarpitted", labels)

    def events_of(self, ns: str) -> list[tuple[str, str, str]]:
        return [(t, r, m) for n, t, r, m in self.events.posted if n == ns]


async def test_engage_lists_the_namespace_with_the_exact_rule() -> None:
    b = Bed()
    b.churn("t1", 11)
    await b.step()
    assert b.tarpit.writes == [["t1"]]
    assert b.tarpit.rules == [
        {
            "subjects": [{"kind": "Group", "group": {"name": "system:authenticated"}}],
            "resourceRules": [
                {
                    "verbs": ["create", "update", "patch", "delete", "deletecollection"],
                    "apiGroups": ["*"],
                    "resources": ["pods", "configmaps"],
                    "namespaces": ["t1"],
                    "clusterScope": False,
                }
            ],
        }
    ]
    ((kind, reason, message),) = b.events_of("t1")
    assert (kind, reason) == ("Warning", "Tarpitted")
    assert message.startswith("tarpit: 11 writes in 60 s (limit 10): writes (pods, configmaps)")
    assert b.sample("t1", "enforced") == 1
    assert b.governor.tarpitted() == {"t1": "tarpit: 11 writes in 60 s (limit 10)"}
    # the tenant projection's facts
    crd = {"limit": 10, "window": "1m", "quietPeriod": "2m"}
    assert b.governor.facts("t1") == WriteRateFacts(crd, "tarpit: 11 writes in 60 s (limit 10)")
    assert b.governor.facts("t2") == WriteRateFacts(crd)
    assert b.governor.facts("elsewhere") is None


async def test_at_the_limit_and_at_rest_nothing_is_written() -> None:
    b = Bed()
    b.churn("t1", 10)  # at the limit, not over it
    for _ in range(5):
        await b.step(1)
    assert b.tarpit.writes == []
    assert b.tarpit.reads == 1  # read once; again only at the resync
    await b.step(600)
    assert (b.tarpit.writes, b.tarpit.reads) == ([], 2)
    assert b.events.posted == []


async def test_release_after_the_quiet_period() -> None:
    b = Bed()
    b.churn("t1", 11)
    await b.step()
    await b.step(30)
    b.churn("t1", 6)  # more than limit // 2 in the window: held, the quiet clock restarts
    await b.step(1)
    await b.step(60)  # the 6 writes left the window at 91 s: quiet since then
    assert b.listed() == {"t1"}
    await b.step(119)
    assert b.listed() == {"t1"}
    await b.step(1)
    assert b.tarpit.writes == [["t1"], []]
    assert b.tarpit.rules == []
    assert [r for _, r, _ in b.events_of("t1")] == ["Tarpitted", "Released"]
    assert b.events_of("t1")[1][2] == (
        "released from the tarpit: 0 writes in 60 s (limit 10), quiet for 120 s (quietPeriod 120 s)"
    )
    assert b.sample("t1", "enforced") is None


async def test_kill_switch_releases_every_namespace_and_engages_none() -> None:
    b = Bed()
    b.churn("t1", 11)
    await b.step()
    b.op.on_namespace(
        None, namespace("kube-system", annotations={"dynquota.io/kill-switch": "true"})
    )
    b.churn("t2", 50)
    await b.step(1)
    assert b.tarpit.writes == [["t1"], []]
    assert [r for _, r, _ in b.events_of("t1")] == ["Tarpitted", "Released"]
    assert "the kill switch is engaged" in b.events_of("t1")[1][2]
    assert b.events_of("t2") == []


async def test_dry_run_decides_and_reports_but_never_writes() -> None:
    b = Bed(dry_run=True)
    b.churn("t1", 11)
    await b.step()
    assert b.tarpit.writes == []
    ((kind, reason, message),) = b.events_of("t1")
    assert (kind, reason) == ("Warning", "Tarpitted")
    assert message.startswith("dry run, not enforced: tarpit: 11 writes in 60 s (limit 10)")
    assert b.sample("t1", "dry-run") == 1
    assert b.sample("t1", "enforced") is None
    await b.step(60)  # quiet from here
    await b.step(120)
    assert b.tarpit.writes == []
    assert [r for _, r, _ in b.events_of("t1")] == ["Tarpitted", "Released"]
    assert b.events_of("t1")[1][2].startswith("dry run, not enforced: released from the tarpit")
    assert b.sample("t1", "dry-run") is None


async def test_restart_holds_a_namespace_found_in_the_rules_for_a_quiet_period() -> None:
    b = Bed(FakeTarpit(["t1"]))
    await b.step()
    assert b.tarpit.writes == []
    assert b.governor.tarpitted() == {
        "t1": "found in the tarpit FlowSchema dq-tarpit at start: held until quiet for its "
        "quiet period"
    }
    await b.step(119)
    assert b.listed() == {"t1"}
    await b.step(1)  # quiet for 120 s since the start
    assert b.tarpit.writes == [[]]


async def test_rules_reset_by_an_upgrade_are_written_again_at_the_next_read() -> None:
    """While a namespace is held the FlowSchema is read every HELD_REREAD (10) s, not at the
    resync (600 s): rules reset by a `helm upgrade` are written again within 10 s."""
    b = Bed()
    b.churn("t1", 11)
    await b.step()
    assert b.tarpit.reads == 1
    b.tarpit.reset()
    await b.step(1)
    assert b.listed() == set()  # not read again yet
    await b.step(HELD_REREAD - 1)
    assert (b.tarpit.reads, b.tarpit.writes) == (2, [["t1"], ["t1"]])
    assert b.listed() == {"t1"}
    assert [r for _, r, _ in b.events_of("t1")] == ["Tarpitted"]  # no second Event


async def test_a_conflict_reads_again_never_overwrites() -> None:
    b = Bed()
    await b.step()
    b.tarpit.rv += 1  # changed by someone since the read
    b.churn("t1", 11)
    await b.step(1)
    assert b.tarpit.writes == []
    await b.step(1)
    assert (b.tarpit.writes, b.tarpit.reads) == ([["t1"]], 2)


@pytest.mark.parametrize("error", [ForbiddenError(403, "Forbidden", "no"), ConflictError(409)])
async def test_unknown_rules_hold_every_write(error: Exception) -> None:
    b = Bed()
    b.tarpit.fail_reads = [error, error]
    b.churn("t1", 11)
    await b.step()
    await b.step(1)
    assert b.tarpit.writes == []
    assert (
        b.op.metrics.registry.get_sample_value(
            "dynquota_writes_held_total", {"reason": "tarpit-unknown"}
        )
        == 2
    )
    await b.step(1)
    assert b.tarpit.writes == [["t1"]]


async def test_a_deleted_namespace_is_taken_out() -> None:
    b = Bed()
    b.churn("t1", 11)
    b.churn("t2", 11)
    await b.step()
    assert b.listed() == {"t1", "t2"}
    b.op.on_namespace("DELETED", namespace("t2", {"team": "a"}, rv=2))
    await b.step(1)
    assert b.tarpit.writes == [["t1", "t2"], ["t1"]]
    assert [r for _, r, _ in b.events_of("t2")] == ["Tarpitted"]  # no Event in a deleted one
    assert b.sample("t2", "enforced") is None


async def test_never_the_release_or_a_system_namespace() -> None:
    b = Bed()
    b.churn(RELEASE_NS, 50)
    b.churn("kube-system", 50)
    await b.step()
    assert b.tarpit.writes == []


async def test_standby_writes_nothing_and_reads_again_once_leading() -> None:
    b = Bed()
    b.leader.is_leader = False
    b.churn("t1", 11)
    await b.step()
    assert (b.tarpit.reads, b.tarpit.writes) == (0, [])
    b.leader.is_leader = True
    await b.step(1)
    assert (b.tarpit.reads, b.tarpit.writes) == (1, [["t1"]])


async def test_off_without_a_flow_schema_name() -> None:
    b = Bed()
    off = Wired(
        b.settings.model_copy(update={"tarpit_flow_schema": ""}),
        quotas=FakeQuotas(),
        events=FakeEvents(),
        policy_status=FakeStatus(),
        tarpit=b.tarpit,
    )
    assert not off.governor.enabled
    off.governor.observe("t1", "pods", "ADDED")
    await off.governor.step()
    assert (b.tarpit.reads, off.governor.samples("t1")) == (0, [])


async def test_nothing_is_decided_before_the_policies_are_listed() -> None:
    """A restart: the namespace found in the rules is not released for want of a rule while
    the policies are not listed yet."""
    b = Bed(FakeTarpit(["t1"]))
    b.op.cluster.policies_listed = False
    await b.step()
    await b.step(600)
    assert (b.tarpit.writes, b.listed()) == ([], {"t1"})
    b.op.cluster.policies_listed = True
    await b.step(1)
    assert b.listed() == {"t1"}  # held: quiet for 0 s of 120 s


async def test_a_larger_limit_releases_at_the_next_tick() -> None:
    """MED-5: docs/runbook.md's "a policy change applies within a second" (churn.py rule 6)."""
    b = Bed()
    b.clock.now += 60  # a window of history since the start
    b.churn("t1", 11)
    await b.step()
    assert b.listed() == {"t1"}
    woken: list[bool] = []
    b.op.on_policy_spec = lambda: woken.append(True)  # the tenant projections' writer
    b.edit(limit=100_000)
    assert woken == [True]
    assert b.governor.facts("t1") == WriteRateFacts(
        {"limit": 100_000, "window": "1m", "quietPeriod": "2m"},
        "tarpit: 11 writes in 60 s (limit 10)",
    )
    await b.step(1)
    assert b.tarpit.writes == [["t1"], []]
    assert [r for _, r, _ in b.events_of("t1")] == ["Tarpitted", "Released"]
    assert b.events_of("t1")[1][2] == (
        "released from the tarpit: its writeRate was relaxed (10 writes in 60 s -> 100000 in "
        "60 s): 11 writes in 60 s (limit 100000), quiet at 50000 or fewer"
    )
    assert b.sample("t1", "enforced") is None


async def test_a_smaller_limit_never_releases_sooner() -> None:
    b = Bed()
    b.clock.now += 60
    b.churn("t1", 11)
    await b.step()
    await b.step(60)  # the writes left the window: quiet from here
    b.edit(limit=4)
    await b.step(1)
    await b.step(118)
    assert b.listed() == {"t1"}
    await b.step(1)  # 120 s of quiet: released by rule 4, as before the edit
    assert b.tarpit.writes == [["t1"], []]


async def test_a_larger_limit_still_over_half_of_it_holds() -> None:
    b = Bed()
    b.clock.now += 60
    b.churn("t1", 15)
    await b.step()
    b.edit(limit=20)  # 15 > 20 // 2: held under the new rule
    await b.step(1)
    assert b.listed() == {"t1"}
    assert b.governor._why["t1"] == (
        "held in the tarpit: 15 writes in 60 s (limit 20) (quiet at 10 or fewer)"
    )


@pytest.mark.parametrize("to_dry_run", [False, True])
async def test_switching_dry_run_applies_at_the_next_tick(to_dry_run: bool) -> None:
    """dryRun true -> false while held in dry run: listed at the next tick (was: only once
    the quiet clock changed its state, ~20 s); false -> true: taken out."""
    b = Bed(dry_run=not to_dry_run)
    b.churn("t1", 11)
    await b.step()
    assert b.listed() == (set() if not to_dry_run else {"t1"})
    b.edit(dry_run=to_dry_run)
    await b.step(1)
    assert b.listed() == ({"t1"} if not to_dry_run else set())
    enforcement = "dry-run" if to_dry_run else "enforced"
    assert b.sample("t1", enforcement) == 1
    assert [r for _, r, _ in b.events_of("t1")] == ["Tarpitted"]
