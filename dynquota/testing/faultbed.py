"""The fault-injection test bed: a control plane with an audit log, operator replicas behind
Toxiproxy, fault switches, and the invariant checker. Shared by the fault tests and the soak.

Layout::

    replica-a --kubeconfig--> toxiproxy proxy-replica-a --\\
                                                            >--> kube-apiserver --> etcd
    replica-b --kubeconfig--> toxiproxy proxy-replica-b --/           ^
    tests, InvariantChecker (admin, official sync client) ------------'

Each replica has its own proxy, so a fault can hit one replica's path (the leader's) or all.
Admin traffic never passes the proxy.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes.client.exceptions import ApiException

from dynquota.testing.audit import AuditLog
from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.faults import Throttle
from dynquota.testing.invariants import InvariantChecker
from dynquota.testing.operator import OPERATOR_NS, OperatorCluster, install_operator
from dynquota.testing.replicas import Replica, operator_token, write_kubeconfig
from dynquota.testing.toxiproxy import Proxy, Toxiproxy, TransportFault
from dynquota.testing.wait import wait_until

__all__ = ["FaultBed"]


@dataclass
class FaultBed:
    """Everything a fault scenario needs; a context manager (:meth:`start`/:meth:`stop`).

    Args:
        workdir: logs (replicas, Toxiproxy) and kubeconfigs go here.
        replica_names: one operator process per name (``--pod-name``).
        resync_seconds: the operator's ``--resync-seconds``.
        watch_timeout_seconds: the operator's ``--watch-timeout-seconds``.
        lease: (duration, renew deadline, retry period) seconds.
        env: extra ``DYNQUOTA_*`` settings for every replica.
    """

    workdir: Path
    replica_names: Sequence[str] = ("replica-a", "replica-b")
    resync_seconds: int = 10
    watch_timeout_seconds: int = 30
    lease: tuple[int, int, int] = (15, 4, 1)
    env: dict[str, str] = field(default_factory=dict)
    resource_quota_sync_period: int = 5

    cp: LocalControlPlane = field(init=False)
    cluster: OperatorCluster = field(init=False)
    toxiproxy: Toxiproxy = field(init=False)
    proxies: dict[str, Proxy] = field(init=False, default_factory=dict)
    replicas: dict[str, Replica] = field(init=False, default_factory=dict)
    checker: InvariantChecker = field(init=False)
    fault_counts: dict[str, int] = field(init=False, default_factory=dict)
    _api: Any = field(init=False, default=None)

    def __enter__(self) -> FaultBed:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the control plane (audit on), install the CRD and RBAC, start Toxiproxy with
        one proxy per replica, write each replica's kubeconfig (its own token, through its
        proxy), start the checker. Replicas are not started: :meth:`start_replicas`.

        Raises ``ControlPlaneError``/``ToxiproxyError`` when a component does not start."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.cp = LocalControlPlane(
            audit=True, resource_quota_sync_period=self.resource_quota_sync_period
        )
        self.cp.start()
        try:
            direct = install_operator(self.cp, self.workdir)
            self._api = kubernetes.config.new_client_from_config(config_file=self.cp.kubeconfig)  # type: ignore[no-untyped-call]
            self.cluster = OperatorCluster(self.cp, self._api, direct)
            self.toxiproxy = Toxiproxy(log_path=self.workdir / "toxiproxy.log")
            self.toxiproxy.start()
            duration, renew, retry = self.lease
            env = {
                "DYNQUOTA_LEASE_DURATION_SECONDS": str(duration),
                "DYNQUOTA_LEASE_RENEW_DEADLINE_SECONDS": str(renew),
                "DYNQUOTA_LEASE_RETRY_PERIOD_SECONDS": str(retry),
                "DYNQUOTA_COALESCE_SECONDS": "0.05",
                **self.env,
            }
            self.checker = InvariantChecker(
                self._api,
                audit=AuditLog(self.cp.audit_log_path),
                lease_duration=float(duration),
                liveness_grace=float(self.watch_timeout_seconds + 60 + 30),
            )
            for name in self.replica_names:
                proxy = self.toxiproxy.proxy(f"proxy-{name}", f"127.0.0.1:{self.cp.apiserver_port}")
                self.proxies[name] = proxy
                token = operator_token(self._api)
                kubeconfig = write_kubeconfig(
                    self.cp, proxy.url, token.token, self.workdir / f"{name}.kubeconfig"
                )
                replica = Replica(
                    name,
                    kubeconfig,
                    self.workdir / f"{name}.log",
                    env=env,
                    args=[
                        "--resync-seconds", str(self.resync_seconds),
                        "--watch-timeout-seconds", str(self.watch_timeout_seconds),
                    ],
                )  # fmt: skip
                self.replicas[name] = replica
                self.checker.add_replica(replica, token.jti)
            self.checker.start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the checker, replicas, Toxiproxy and the control plane (idempotent)."""
        with contextlib.suppress(AttributeError):
            self.checker.stop()
        for replica in self.replicas.values():
            replica.stop()
        with contextlib.suppress(AttributeError):
            self.toxiproxy.stop()
        if self._api is not None:
            self._api.close()
            self._api = None
        with contextlib.suppress(AttributeError):
            self.cp.resume_etcd()
            self.cp.stop()

    # -- replicas ----------------------------------------------------------------------------

    def start_replicas(self, wait: bool = True, timeout: float = 90) -> None:
        """Start every replica not running; with ``wait``, until :meth:`wait_ready`."""
        for replica in self.replicas.values():
            if replica.pid is None:
                replica.start()
        if wait:
            self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 90) -> Replica:
        """Wait until every running replica answers ``/healthz`` 200 and one of them holds
        the Lease and reports ``dynquota_leader 1``; returns the leader."""
        for replica in self.replicas.values():
            if replica.pid is not None:
                wait_until(_live(replica), f"{replica.name} live", timeout=timeout)
        return wait_until(self._reporting_leader, "a leader", timeout=timeout)

    def _reporting_leader(self) -> Replica | None:
        holder = self.lease_holder()
        replica = self.replicas.get(holder or "")
        if replica is None or replica.pid is None or replica.metric("dynquota_leader") != 1:
            return None
        return replica

    def lease_holder(self) -> str | None:
        """The Lease's holderIdentity (``None`` when unreadable or absent)."""
        coordination: Any = kubernetes.client.CoordinationV1Api(self._api)
        try:
            lease = coordination.read_namespaced_lease("dynquota", OPERATOR_NS, _request_timeout=5)
        except (ApiException, OSError):
            return None
        holder: str | None = lease.spec.holder_identity
        return holder

    def leader(self) -> Replica:
        """The replica holding the Lease (waits up to 60 s)."""
        return wait_until(self._reporting_leader, "a leader", timeout=60)

    def kill_leader(self) -> Replica:
        """SIGKILL the Lease holder (no cleanup: its Lease stays until it expires); returns
        it (restart with ``start()``)."""
        leader = self.leader()
        leader.kill()
        self._count("kill-9")
        return leader

    # -- faults ------------------------------------------------------------------------------

    def _count(self, kind: str) -> None:
        self.fault_counts[kind] = self.fault_counts.get(kind, 0) + 1

    @contextlib.contextmanager
    def _fault(self, kind: str) -> Iterator[None]:
        """Count fault ``kind`` and tell the checker it lasts while inside."""
        index = self.checker.note_fault(kind, time.time())
        self._count(kind)
        try:
            yield
        finally:
            self.checker.end_fault(index)

    @contextlib.contextmanager
    def transport(
        self, kind: TransportFault, replicas: Sequence[str] | None = None, **options: int
    ) -> Iterator[None]:
        """Fault ``kind`` on the proxies of ``replicas`` (default: all) while inside."""
        names = list(replicas) if replicas is not None else list(self.proxies)
        with self._fault(kind):
            try:
                for name in names:
                    self.proxies[name].apply(kind, **options)
                yield
            finally:
                for name in names:
                    self.proxies[name].clear()

    @contextlib.contextmanager
    def etcd_paused(self) -> Iterator[None]:
        """etcd SIGSTOPped while inside: timeouts and 5xx from the apiserver."""
        with self._fault("etcd-pause"), self.cp.etcd_paused():
            yield

    @contextlib.contextmanager
    def throttled(self, noise_threads: int = 3) -> Iterator[Throttle]:
        """429s for the operator's ServiceAccount while inside (see :class:`Throttle`)."""
        throttle = Throttle(self.cp, noise_threads=noise_threads)
        with self._fault("429"):
            throttle.start()
            try:
                yield throttle
            finally:
                throttle.stop()

    def restart_apiserver(self) -> None:
        """Stop and start kube-apiserver (same port); waits for ``/readyz``."""
        with self._fault("apiserver-restart"):
            self.cp.restart_apiserver()

    def compact_etcd(self) -> None:
        """Compact etcd at its current revision (watchers resuming from before get 410)."""
        with self._fault("etcd-compaction"):
            self.cp.compact_etcd()


def _live(replica: Replica) -> Callable[[], bool]:
    return lambda: replica.healthz() == 200
