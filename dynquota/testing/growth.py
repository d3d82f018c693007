"""A Deployment growing into its quota, measured (the test bed of issue 26): when each raise
was enforced and when the pods filled it.

Pods need no node to count against a quota: the ReplicaSet controller creates them, quota
admission charges them, they stay Pending.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from dynquota.testing.operator import PAUSE, OperatorCluster

__all__ = [
    "FillRun",
    "daemon_set",
    "daemon_status",
    "deployment",
    "grow",
    "job",
    "node_pod_delays",
    "stateful_set",
]


def deployment(name: str, replicas: int) -> dict[str, Any]:
    """A Deployment body: ``replicas`` pause pods labelled ``app=<name>`` (no grace period:
    the test bed's pods never run)."""
    labels = {"app": name}
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "app", "image": PAUSE}],
                    "terminationGracePeriodSeconds": 0,
                },
            },
        },
    }


PENDING = {"dynquota.io/test-no-such-node": "true"}
"""A nodeSelector no node matches: on a cluster with kwok nodes the pods stay Pending (charged
to the quota, never run, never completed)."""


def _pod_template(name: str, restart: str = "Always", pending: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "app", "image": PAUSE}],
        "terminationGracePeriodSeconds": 0,
        "restartPolicy": restart,
    }
    if pending:
        spec["nodeSelector"] = PENDING
    return {"metadata": {"labels": {"app": name}}, "spec": spec}


def stateful_set(name: str, replicas: int, pending: bool = False) -> dict[str, Any]:
    """A StatefulSet body: ``replicas`` pause pods, ``podManagementPolicy: Parallel`` (the
    default OrderedReady creates the next pod only when the previous one is Ready: without
    nodes, never)."""
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": _pod_template(name, pending=pending),
        },
    }


def job(name: str, parallelism: int, pending: bool = False) -> dict[str, Any]:
    """A Job body: ``parallelism`` pause pods at once, as many completions (``pending``: a
    node selector no node matches, so its pods stay Pending, active and charged)."""
    return {
        "metadata": {"name": name},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "backoffLimit": 0,
            "template": _pod_template(name, "Never", pending),
        },
    }


def daemon_set(name: str) -> dict[str, Any]:
    """A DaemonSet body: a pause pod on every node, labelled ``app=<name>``."""
    return {
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": _pod_template(name)},
    }


def daemon_status(c: OperatorCluster, ns: str, name: str) -> tuple[int, int]:
    """DaemonSet ``ns/name``'s ``(desiredNumberScheduled, currentNumberScheduled)``."""
    ds = c.apps.read_namespaced_daemon_set_status(name, ns, _request_timeout=30).status
    return ds.desired_number_scheduled or 0, ds.current_number_scheduled or 0


def node_pod_delays(c: OperatorCluster, ns: str, nodes: Iterable[str]) -> dict[str, float]:
    """For each of ``nodes`` that has a pod of ``ns``: seconds from the Node's creation to
    that pod's (both creationTimestamps: 1 s resolution)."""
    wanted = set(nodes)
    born = {
        n.metadata.name: n.metadata.creation_timestamp.timestamp()
        for n in c.core.list_node(_request_timeout=30).items
        if n.metadata.name in wanted
    }
    return {
        pod.spec.node_name: pod.metadata.creation_timestamp.timestamp() - born[pod.spec.node_name]
        for pod in c.core.list_namespaced_pod(ns, _request_timeout=30).items
        if pod.spec.node_name in born
    }


@dataclass
class FillRun:
    """What :func:`grow` saw: ``raises`` (monotonic seconds when ``status.hard`` of ``pods``
    grew, and to what), ``filled`` (that hard -> when the pods reached ``min(hard,
    replicas)``), the final ``pods`` count and the run's length in seconds."""

    replicas: int
    raises: list[tuple[float, int]] = field(default_factory=list)
    filled: dict[int, float] = field(default_factory=dict)
    pods: int = 0
    seconds: float = 0.0

    @property
    def delays(self) -> list[float]:
        """Seconds from each raise to its fill, for the raises that were filled."""
        return [self.filled[h] - t for t, h in self.raises if h in self.filled]

    @property
    def unfilled(self) -> list[int]:
        """The hard values of the raises the pods never filled."""
        return [h for _, h in self.raises if h not in self.filled]


def grow(
    c: OperatorCluster,
    ns: str,
    replicas: int,
    timeout: float,
    start_hard: int = 0,
    kind: str = "Deployment",
    expect: int | None = None,
    pending: bool = False,
) -> FillRun:
    """Create a ``kind`` (``Deployment``, ``StatefulSet`` or ``Job``) ``web`` of ``replicas``
    pods in ``ns`` and sample (every 0.2 s, each sample read afresh) its quota's
    ``status.hard`` of ``pods`` and the pod count, until every pod exists and every raise was
    filled, or ``timeout`` seconds passed. ``expect``: the pods the namespace ends with when
    other workloads grow there too (default ``replicas``); ``pending``: StatefulSet and Job
    pods select no node (:data:`PENDING`)."""
    if kind == "StatefulSet":
        c.apps.create_namespaced_stateful_set(ns, stateful_set("web", replicas, pending),
                                              _request_timeout=30)  # fmt: skip
    elif kind == "Job":
        c.batch.create_namespaced_job(ns, job("web", replicas, pending), _request_timeout=30)
    else:
        c.apps.create_namespaced_deployment(ns, deployment("web", replicas), _request_timeout=30)
    run = FillRun(expect if expect is not None else replicas)
    started = time.monotonic()
    hard_seen = start_hard
    while time.monotonic() - started < timeout:
        quota = c.quota(ns)
        status = (quota.status.hard if quota is not None and quota.status else None) or {}
        hard = int(status.get("pods", "0"))
        now = time.monotonic()
        if hard > hard_seen:
            if hard_seen:
                run.raises.append((now, hard))
            hard_seen = hard
        run.pods = len(c.core.list_namespaced_pod(ns, _request_timeout=30).items)
        for _, h in run.raises:
            if h not in run.filled and run.pods >= min(h, run.replicas):
                run.filled[h] = now
        if run.pods >= run.replicas and not run.unfilled:
            break
        time.sleep(0.2)  # the sampling interval of a measurement, not a synchronisation
    run.seconds = time.monotonic() - started
    return run
