"""The operator under API faults, on the real control plane (issue 10, "Tests").

Two operator processes (leader election on, the chart's ServiceAccount, each with its own
token) reach kube-apiserver through their own Toxiproxy proxy; this module shares one
:class:`~dynquota.testing.faultbed.FaultBed` (control plane with an audit log, Toxiproxy,
replicas, invariant checker). The tests assert the checker's invariants (no delete while
governed, hard never above the maximum, cooldowns honoured, one writer per lease period, no
exit, liveness red only near a fault) and convergence within 2 x the resync after the fault,
never timings.

Matrix (phase x fault; each fault kind and each phase at least once):

=====================  =========================================================
(a) start-up           apiserver restart (CRD not served yet), 429 (APF Reject)
(b) runaway throttled  latency 2 s, bandwidth 4 KB/s, etcd paused 30 s (504/5xx)
(c) kill-switch sweep  connection resets, refused connections (proxy down)
(d) leader handover    leader's path half-open (timeout toxic), leader's path
                       refused, kill -9 of the leader under latency 2 s
=====================  =========================================================
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from dynquota.testing.faultbed import FaultBed
from dynquota.testing.invariants import Violation
from dynquota.testing.toxiproxy import TransportFault
from dynquota.testing.wait import wait_until

RESYNC = 10
CONVERGE = 2 * RESYNC
PODS = {
    "bufferPercent": 40,
    "minimum": 10,
    "maximum": 60,
    "upscaleCooldown": "3s",
    "downscaleCooldown": "1h",
}
CONFIGMAPS = {**PODS, "minimum": 20, "maximum": 200}


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultBed]:
    with FaultBed(tmp_path_factory.mktemp("faults"), resync_seconds=RESYNC) as fault_bed:
        fault_bed.start_replicas()
        yield fault_bed
        checker = fault_bed.checker
        print(f"checker: {checker.samples} samples, {checker.failed_samples} failed")
        for replica in fault_bed.replicas.values():
            text = replica.log.read_text(errors="replace")
            print(f"==> {replica.log} (last 3000 chars) <==\n{text[-3000:]}")


class Scenario:
    """One test's namespaces and policy (a unique scope label), its checker mark, cleanup."""

    def __init__(self, bed: FaultBed) -> None:
        self.bed = bed
        self.cluster = bed.cluster
        self.scope = {"dq-fault": uuid.uuid4().hex[:10]}
        self.policy_name = f"p-{self.scope['dq-fault']}"
        self.namespaces: list[str] = []
        self.mark = bed.checker.mark()

    def governed(self, count: int, pods: int = 0) -> list[str]:
        """``count`` namespaces with ``pods`` pods each under this scenario's policy; waits
        until each has its managed quota at T(pods)."""
        created = [self.cluster.new_namespace(self.scope) for _ in range(count)]
        for ns in created:
            self.cluster.create_pods(ns, pods)
        self.namespaces += created
        if len(self.namespaces) == len(created):
            self.cluster.policy(self.policy_name, self.scope, pods=PODS, configmaps=CONFIGMAPS)
        expected = str(max(10, -(-pods * 140 // 100)))
        for ns in created:
            self.cluster.wait_hard(ns, {"pods": expected, "configmaps": "20"}, timeout=60)
        return created

    def hold(self, seconds: float) -> None:
        """Let ``seconds`` pass (the length of a fault; nothing is awaited)."""
        deadline = time.monotonic() + seconds
        wait_until(lambda: time.monotonic() >= deadline, f"{seconds:g} s", timeout=seconds + 5)

    def runaway(self, ns: str, seconds: float) -> int:
        """Be a runaway for ``seconds``: create pods until the quota refuses one, again each
        time the quota grows. Returns the pods created."""
        deadline = time.monotonic() + seconds
        created = 0
        while time.monotonic() < deadline:
            created += self.cluster.fill_pods(ns)
            hard = self.cluster.hard(ns)
            with contextlib.suppress(AssertionError):
                wait_until(
                    lambda h=hard: self.cluster.hard(ns) != h or time.monotonic() >= deadline,
                    "the quota grows",
                    timeout=seconds,
                    interval=0.25,
                )
        return created

    def converge(self) -> float:
        """Wait until every namespace is where its stamps permit (2 x resync)."""
        return self.bed.checker.wait_converged(CONVERGE)

    def violations(self) -> list[Violation]:
        return self.bed.checker.since(self.mark)

    def assert_clean(self) -> None:
        """Converged -- a namespace created now included, so a replica that stopped deciding
        is caught here and not in the next scenario -- then no invariant broken since the
        scenario began."""
        self.namespaces.append(self.cluster.new_namespace(self.scope))
        self.converge()
        found = self.violations()
        assert not found, "invariants broken:\n" + "\n".join(str(v) for v in found)

    def cleanup(self) -> None:
        with contextlib.suppress(ApiException):
            self.cluster.kill_switch(None)
        self.cluster.delete_policy(self.policy_name)
        for ns in self.namespaces:
            self.cluster.delete_namespace(ns)


@pytest.fixture
def scenario(bed: FaultBed, request: pytest.FixtureRequest) -> Iterator[Scenario]:
    """A scenario with both replicas running and a leader elected. After a failed scenario
    both replicas are restarted, so that one broken replica (a dead elector, say) does not
    fail the scenarios after it."""
    bed.start_replicas()
    failed = request.session.testsfailed
    case = Scenario(bed)
    yield case
    case.cleanup()
    if request.session.testsfailed != failed:
        for replica in bed.replicas.values():
            replica.stop()


def _unmanaged_quota(scenario: Scenario, ns: str) -> Any:
    return scenario.cluster.core.create_namespaced_resource_quota(
        ns, {"metadata": {"name": "team-limits"}, "spec": {"hard": {"pods": "100"}}}
    )


# -- (a) start-up -----------------------------------------------------------------------------


def test_startup_while_the_apiserver_restarts(bed: FaultBed, scenario: Scenario) -> None:
    """Both replicas die and start again while kube-apiserver restarts: their first lists
    meet refused connections, then an apiserver whose CRD handler is not ready (404/503).
    Nothing governed may be deleted; the override and the stamps survive."""
    a, b, c = scenario.governed(3, pods=14)
    scenario.cluster.core.patch_namespaced_resource_quota(
        "dynquota", a, {"metadata": {"annotations": {"dynquota.io/override": "max"}}}
    )
    scenario.cluster.wait_hard(a, {"pods": "60", "configmaps": "200"})
    before = {ns: scenario.cluster.quota(ns).metadata.uid for ns in (a, b, c)}
    for replica in bed.replicas.values():
        replica.kill()
    index = bed.checker.note_fault("apiserver-restart", time.time())
    bed.cp.stop_apiserver()
    bed.start_replicas(wait=False)
    bed.cp.start_apiserver()
    bed.checker.end_fault(index)
    bed.wait_ready()
    scenario.assert_clean()
    assert {ns: scenario.cluster.quota(ns).metadata.uid for ns in (a, b, c)} == before
    assert scenario.cluster.hard(a) == {"pods": "60", "configmaps": "200"}


def test_startup_under_429(bed: FaultBed, scenario: Scenario) -> None:
    """Both replicas start while API Priority and Fairness rejects most of their requests
    (429): start-up must hold, not delete."""
    namespaces = scenario.governed(3, pods=14)
    before = {ns: scenario.cluster.quota(ns).metadata.uid for ns in namespaces}
    for replica in bed.replicas.values():
        replica.kill()
    with bed.throttled():
        bed.start_replicas(wait=False)
        scenario.hold(15)
    bed.wait_ready()
    # the fault took effect: the replicas' own client met 429s (kopf's requests are not counted)
    rejected = [r.metric("dynquota_api_errors_total", 'code="429"') for r in bed.replicas.values()]
    assert sum(n or 0 for n in rejected) > 0, rejected
    scenario.assert_clean()
    assert {ns: scenario.cluster.quota(ns).metadata.uid for ns in namespaces} == before


# -- (b) a runaway being throttled --------------------------------------------------------------


@pytest.mark.parametrize("fault", ["latency", "bandwidth"])
def test_runaway_under_a_slow_path(
    bed: FaultBed, scenario: Scenario, fault: TransportFault
) -> None:
    """A runaway fills its quota while every replica's path is slow (2 s latency, or
    4 KB/s): each raise waits for its cooldown and never passes the maximum."""
    (ns,) = scenario.governed(1)
    with bed.transport(fault):
        created = scenario.runaway(ns, 12)
    assert created >= 10
    scenario.runaway(ns, 2)
    scenario.assert_clean()


def test_runaway_with_etcd_paused(bed: FaultBed, scenario: Scenario) -> None:
    """etcd stops for 30 s in the middle of a runaway: the operator's calls time out or get
    5xx; nothing governed is deleted or raised early, and sizing resumes after."""
    (ns,) = scenario.governed(1)
    scenario.runaway(ns, 5)
    with bed.etcd_paused():
        scenario.hold(30)
    scenario.runaway(ns, 8)
    scenario.assert_clean()


# -- (c) a kill-switch sweep --------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["reset", "down"])
def test_kill_switch_sweep_under_transport_faults(
    bed: FaultBed, scenario: Scenario, fault: TransportFault
) -> None:
    """The kill switch is engaged while every replica's connections are reset (or refused):
    after the fault every managed quota is gone, unmanaged ones untouched, nothing created
    while engaged; released, every quota comes back."""
    namespaces = scenario.governed(4, pods=3)
    kept = _unmanaged_quota(scenario, namespaces[0])
    with bed.transport(fault):
        scenario.cluster.kill_switch("true")
        scenario.hold(8)
    wait_until(
        lambda: all(scenario.cluster.quota(ns) is None for ns in namespaces),
        "every managed quota deleted",
        timeout=CONVERGE,
    )
    assert scenario.cluster.quota(namespaces[0], "team-limits").metadata.uid == kept.metadata.uid
    scenario.cluster.kill_switch(None)
    scenario.assert_clean()
    assert all(scenario.cluster.quota(ns) is not None for ns in namespaces)


# -- (d) a leader handover ----------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["hang", "down"])
def test_handover_when_the_leaders_path_fails(
    bed: FaultBed, scenario: Scenario, fault: TransportFault
) -> None:
    """The leader's own path hangs half-open (or refuses connections): the standby takes the
    Lease and sizes; the old leader must not write once its lease period is over, neither
    during the fault nor after it heals."""
    (ns,) = scenario.governed(1)
    leader = bed.leader()
    other = next(r for r in bed.replicas.values() if r is not leader)
    with bed.transport(fault, replicas=[leader.name]):
        wait_until(lambda: bed.lease_holder() == other.name, "the standby leads", timeout=60)
        fresh = scenario.cluster.new_namespace(scenario.scope)
        scenario.namespaces.append(fresh)
        scenario.cluster.wait_hard(fresh, {"pods": "10", "configmaps": "20"}, timeout=CONVERGE)
        scenario.runaway(ns, 6)
    # healed: the old leader is a standby now; let both run past a resync
    scenario.runaway(ns, RESYNC)
    scenario.assert_clean()


def test_handover_after_kill_9_under_latency(bed: FaultBed, scenario: Scenario) -> None:
    """kill -9 of the leader while every path has 2 s latency: the standby takes over, the
    killed replica restarts as a standby, nothing is deleted or written twice."""
    namespaces = scenario.governed(2, pods=5)
    with bed.transport("latency"):
        killed = bed.kill_leader()
        # Generous: with 2 s on every path a Lease request that must open a new TLS connection
        # exceeds its 3 s timeout, and the standby retries every second; a loaded CI machine
        # took 61 s (9 timeouts in a row). What is asserted is the takeover, not its speed.
        wait_until(
            lambda: bed.lease_holder() not in (None, killed.name), "another leader", timeout=150
        )
        killed.start()
        scenario.runaway(namespaces[0], 8)
    bed.wait_ready()
    scenario.assert_clean()


def test_checker_sees_a_delete_of_a_governed_quota(bed: FaultBed, scenario: Scenario) -> None:
    """The checker can fail: a governed quota deleted by the operator's identity (here the
    test, with the operator's token, straight to the apiserver) is a ``no-delete``
    violation, attributed by the token's id in the audit log."""
    (ns,) = scenario.governed(1)
    # the checker must have seen the namespace governed before the delete
    assert bed.checker.wait_sample(10)
    direct = kubernetes.config.new_client_from_config(config_file=bed.cluster.sa_kubeconfig)
    try:
        core: Any = kubernetes.client.CoreV1Api(direct)
        core.delete_namespaced_resource_quota("dynquota", ns)
    finally:
        direct.close()
    scenario.cluster.wait_hard(ns, {"pods": "10", "configmaps": "20"}, timeout=CONVERGE)
    found = wait_until(
        lambda: [v for v in scenario.violations() if v.invariant == "no-delete"],
        "the no-delete violation",
        timeout=10,
    )
    assert found[0].namespace == ns
    assert "delete of quota dynquota" in found[0].what
