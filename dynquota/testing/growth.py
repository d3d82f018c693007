"""A Deployment growing into its quota, measured (the test bed of issue 26): when each raise
was enforced and when the pods filled it.

Pods need no node to count against a quota: the ReplicaSet controller creates them, quota
admission charges them, they stay Pending.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from dynquota.testing.operator import PAUSE, OperatorCluster

__all__ = ["FillRun", "deployment", "grow"]


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
    c: OperatorCluster, ns: str, replicas: int, timeout: float, start_hard: int = 0
) -> FillRun:
    """Create a Deployment of ``replicas`` pods in ``ns`` and sample (every 0.2 s, each sample
    read afresh) its quota's ``status.hard`` of ``pods`` and the pod count, until every pod
    exists and every raise was filled, or ``timeout`` seconds passed."""
    c.apps.create_namespaced_deployment(ns, deployment("web", replicas), _request_timeout=30)
    run = FillRun(replicas)
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
            if h not in run.filled and run.pods >= min(h, replicas):
                run.filled[h] = now
        if run.pods >= replicas and not run.unfilled:
            break
        time.sleep(0.2)  # the sampling interval of a measurement, not a synchronisation
    run.seconds = time.monotonic() - started
    return run
