"""The leader elector (dynquota.kube.leader) on a real coordination.k8s.io Lease.

Two electors in one process share one monotonic clock, so their validity windows can be
compared exactly: the leader's recorded ``valid_until`` against the send time of the
follower's takeover. etcd is frozen with SIGSTOP to make the apiserver hang and fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from kubernetes_asyncio import client

from dynquota.kube.leader import LeaderGate
from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.wait import async_wait_until

D, RD, RP, RT = 6.0, 2.0, 1.0, 3.0  # lease duration, renew deadline, retry period, timeout


class Elector:
    """A LeaderGate running as a task, with its on_change calls (monotonic time, value)."""

    def __init__(self, api: client.ApiClient, namespace: str, identity: str) -> None:
        self.changes: list[tuple[float, bool]] = []

        async def on_change(leading: bool) -> None:
            self.changes.append((time.monotonic(), leading))

        self.gate = LeaderGate(
            api,
            namespace=namespace,
            name="dq-leader-test",
            identity=identity,
            lease_duration=D,
            renew_deadline=RD,
            retry_period=RP,
            request_timeout=RT,
            on_change=on_change,
        )
        self.task = asyncio.create_task(self.gate.run())

    async def crash(self) -> None:
        """Cancel without releasing the Lease (as after SIGKILL)."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    @property
    def leading(self) -> list[bool]:
        return [leading for _, leading in self.changes]


def _one_leader(a: Elector, b: Elector) -> Elector | None:
    assert not (a.gate.is_leader and b.gate.is_leader), "two leaders at once"
    if a.gate.is_leader:
        return a
    return b if b.gate.is_leader else None


async def test_two_electors_one_leads_and_the_other_takes_over_without_overlap(
    async_api_client: client.ApiClient, namespace: str
) -> None:
    a = Elector(async_api_client, namespace, "elector-a")
    b = Elector(async_api_client, namespace, "elector-b")
    try:
        leader = await async_wait_until(lambda: _one_leader(a, b), "one leader", timeout=30)
        follower = b if leader is a else a
        renewals = leader.gate.renewals
        # several renewals later, still exactly one leader (checked at every poll)
        await async_wait_until(
            lambda: _one_leader(a, b) is leader and leader.gate.renewals >= renewals + 4,
            "four more renewals by the leader",
            timeout=30,
            interval=0.05,
        )
        assert follower.changes == []
        assert leader.leading == [True]
        coordination: Any = client.CoordinationV1Api(async_api_client)
        lease = await coordination.read_namespaced_lease("dq-leader-test", namespace)
        assert lease.spec.holder_identity == leader.gate.identity
        assert lease.spec.lease_duration_seconds == int(D)

        leader_valid_until = leader.gate.valid_until  # no await between this and the cancel
        crashed = time.monotonic()
        await leader.crash()
        assert not leader.gate.is_leader
        await async_wait_until(
            lambda: _one_leader(a, b) is follower, "takeover", timeout=3 * D, interval=0.05
        )
        took = time.monotonic() - crashed
        follower_send = follower.gate.valid_until - (D - 1)
        # the follower observed the leader's last write after it was sent, and waited a whole
        # lease duration from then: its window starts at least 1 s after the leader's ended
        assert follower_send >= leader_valid_until + 1, (follower_send, leader_valid_until)
        assert took <= D + 2 * RP * 1.2 + 2, took
        # the change is delivered to on_change by a task after the gate turned (CI under load:
        # asserted at once, it was still [])
        await async_wait_until(lambda: follower.leading, "the follower told", timeout=5)
        assert follower.leading == [True]
        lease = await coordination.read_namespaced_lease("dq-leader-test", namespace)
        assert lease.spec.holder_identity == follower.gate.identity
        assert lease.spec.lease_transitions == 1
    finally:
        await a.crash()
        await b.crash()


async def test_frozen_etcd_ends_leadership_within_the_lease_and_it_leads_again(
    controlplane: LocalControlPlane, async_api_client: client.ApiClient, namespace: str
) -> None:
    a = Elector(async_api_client, namespace, "elector-a")
    try:
        await async_wait_until(lambda: a.gate.is_leader, "a leads", timeout=30)
        with controlplane.etcd_paused():
            paused = time.monotonic()
            valid_until = a.gate.valid_until
            assert valid_until <= paused + D - 1
            await async_wait_until(
                lambda: not a.gate.is_leader, "a stops leading", timeout=D, interval=0.05
            )
            lost = time.monotonic()
            assert lost <= valid_until + 0.2
            # announced (renew deadline or the valid_until timer), and the loop goes on: its
            # requests time out after 3 s, so liveness stays green
            await async_wait_until(lambda: a.leading == [True, False], "loss announced", timeout=2)
            assert a.changes[-1][0] <= valid_until + 0.2
            await async_wait_until(
                lambda: a.gate.consecutive_failures >= 2,
                "two failed Lease requests",
                timeout=4 * RT,
            )
            assert a.gate.healthy()
            assert not a.task.done()
        await async_wait_until(lambda: a.gate.is_leader, "a leads again", timeout=60)
        assert a.leading == [True, False, True]
        assert a.gate.healthy()
    finally:
        await a.crash()
