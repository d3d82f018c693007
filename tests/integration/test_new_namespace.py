"""Issue 16, point 4 measured: what a pipeline's `kubectl create namespace X` followed at once by
creates in X sees while dynquota enforces (the real apiserver, quota admission and quota
controller of v1.37.2; an in-process operator with the chart's RBAC). docs/install.md
("Before you install") gives the figures and the recipe tested here.

- Creates below the policy minimum are never refused, however they race the new quota: a
  ResourceQuota whose `status.hard` the quota controller has not filled yet matches no create
  (upstream `generic.Matches` reads `status.hard`), so it admits without charging, and once
  synced the controller counts what was admitted. No "status unknown for quota" at all.
- A burst beyond the minimum is refused from the create that passes it ("exceeded quota"),
  however fast or slow the pipeline: only the number admitted before the quota syncs varies.
  The documented way: create the namespace with the label of a policy whose minimum covers the
  burst (its first quota is sized by that policy), then wait for the quota to be in force.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable

import pytest
from kubernetes.client.exceptions import ApiException

from dynquota.policy.models import DEFAULT_PROFILES
from dynquota.testing.operator import PAUSE, OperatorCluster, OperatorThread
from dynquota.testing.wait import wait_until

BURST = 60  # ConfigMaps: above the default minimum of 50
#: runs of the racing cases; the figures in docs/install.md are from 10 runs:
#: DYNQUOTA_NEW_NAMESPACE_RUNS=10 .venv/bin/pytest tests/integration/test_new_namespace.py -s
RUNS = int(os.environ.get("DYNQUOTA_NEW_NAMESPACE_RUNS", "1"))
PIPELINE_LABEL = {"dynquota.io/profile": "pipeline"}


def burst(c: OperatorCluster, ns: str, configmaps: int, pods: int) -> Counter[str]:
    """Create ``configmaps`` ConfigMaps then ``pods`` pods in ``ns`` as fast as one client can;
    return the refusals: ``exceeded quota``, ``conflict`` (409), or status and message."""
    refused: Counter[str] = Counter()
    for kind, count in (("configmaps", configmaps), ("pods", pods)):
        for i in range(count):
            try:
                if kind == "configmaps":
                    c.core.create_namespaced_config_map(ns, {"metadata": {"name": f"cm-{i}"}})
                else:
                    c.core.create_namespaced_pod(
                        ns,
                        {
                            "metadata": {"name": f"p-{i}"},
                            "spec": {"containers": [{"name": "c", "image": PAUSE}]},
                        },
                    )
            except ApiException as exc:
                message = str(exc.body)
                if exc.status == 403 and "exceeded quota: dynquota" in message:
                    refused["exceeded quota"] += 1
                elif exc.status == 409:  # quota admission's status write lost a race
                    refused["conflict"] += 1
                else:
                    refused[f"{exc.status} {message}"] += 1
    return refused


def new_namespace(c: OperatorCluster, labels: dict[str, str]) -> str:
    name = f"t-new-{uuid.uuid4().hex[:6]}"
    c.core.create_namespace({"metadata": {"name": name, "labels": labels}})
    return name


def counted(c: OperatorCluster, ns: str, key: str, value: str) -> Callable[[], bool]:
    """A check for :func:`wait_until`: ``status.used[key]`` of the quota in ``ns`` is ``value``."""
    return lambda: (c.quota(ns).status.used or {}).get(key) == value


def wait_in_force(c: OperatorCluster, ns: str) -> None:
    """The recipe of docs/install.md: wait for dynquota's quota, then for the quota controller
    to have synced it (status.hard filled): from then on admission enforces it."""
    c.cp.kubectl("wait", "--for=create", "resourcequota/dynquota", "-n", ns, "--timeout=60s")
    c.cp.kubectl(
        "wait", "--for=jsonpath={.status.hard}", "resourcequota/dynquota", "-n", ns,
        "--timeout=60s",
    )  # fmt: skip


def test_creates_right_after_create_namespace(
    op_cluster: OperatorCluster,
    start_operator: Callable[..., OperatorThread],
    scope: dict[str, str],
) -> None:
    c = op_cluster
    defaults = {name: p.to_crd() for name, p in DEFAULT_PROFILES.items()}
    c.policy("p-default", scope, pods=defaults["pods"], configmaps=defaults["configmaps"])
    pipeline = {**defaults["configmaps"], "minimum": 100}
    c.policy("p-pipeline", {**scope, **PIPELINE_LABEL}, pods=defaults["pods"],
             configmaps=pipeline, priority=10)  # fmt: skip
    start_operator()

    # 20 ConfigMaps and 5 pods (below the minimums 50 and 10): none refused.
    synced: list[float] = []
    for _ in range(max(3, RUNS)):
        start = time.monotonic()
        ns = new_namespace(c, scope)
        assert burst(c, ns, 20, 5) == Counter()
        c.wait_hard(ns, {"configmaps": "50", "pods": "10"})
        synced.append(time.monotonic() - start)
        # The quota controller counts every pod admitted before the quota synced; its first
        # recount may come from an informer that has not seen the last pod yet (4 of 5 seen
        # under load 28): the count is reached by its next sync, not at the instant status.hard
        # is filled.
        wait_until(counted(c, ns, "pods", "5"), f"status.used.pods == 5 in {ns}")
    print(f"measured: quota in force {min(synced):.2f}-{max(synced):.2f} s after the namespace")

    # 60 ConfigMaps with nothing done: refused from the one passing the minimum, only by
    # "exceeded quota". How many of the 60 were admitted before the quota synced varies
    # (10 or 11 mostly; 0 when the whole burst beats the sync), so: bounds.
    counts: Counter[int] = Counter()
    conflicts = 0
    for _ in range(RUNS):
        ns = new_namespace(c, scope)
        refused = burst(c, ns, BURST, 0)
        # Other writers (kube-root-ca.crt's publisher, the quota controller's sync) race
        # quota admission's status writes here: a 409 is a known side effect, not this one.
        assert set(refused) <= {"exceeded quota", "conflict"}, refused
        assert 0 <= refused["exceeded quota"] <= BURST - 49
        counts[refused["exceeded quota"]] += 1
        conflicts += refused["conflict"]
    print(
        f"measured: {BURST} ConfigMaps right after create namespace, runs by number refused "
        f"(exceeded quota): {dict(counts)}; 409 conflicts: {conflicts}"
    )

    # Waiting until the quota is in force (and kube-root-ca.crt is charged) makes it exact:
    # 60 - (50 - 1) = 11 refused. Quota admission admits one more when the quota controller's
    # recount from a lagging informer lowers status.used meanwhile (kubernetes#123434: seen
    # under load, 10 refused): the audit log tells that race from a dynquota failure, and
    # `make test` reruns only that (OperatorCluster.race_explains, docs/controlplane.md).
    ns = new_namespace(c, scope)
    wait_in_force(c, ns)
    wait_until(
        lambda: (c.quota(ns).status.used or {}).get("configmaps") == "1",
        f"kube-root-ca.crt charged in {ns}",
    )
    with c.race_explains(ns, "configmaps"):
        assert burst(c, ns, BURST, 0) == Counter({"exceeded quota": BURST - 49})

    # The documented way: the namespace created with the label of a policy whose minimum
    # covers the burst (its first quota is sized by that policy), then waited for.
    ns = new_namespace(c, {**scope, **PIPELINE_LABEL})
    wait_in_force(c, ns)
    assert c.hard(ns) == {"configmaps": "100", "pods": "10"}
    assert burst(c, ns, BURST, 5) == Counter()

    # Where no policy enforces (here: a policy in dry run) no quota comes: the recipe's first
    # wait ends at its timeout with an error a pipeline can tell apart (and skip).
    audit = {**scope, "dynquota.io/profile": "audit"}
    c.policy("p-audit", audit, pods=defaults["pods"], configmaps=defaults["configmaps"],
             priority=20, dry_run=True)  # fmt: skip
    ns = new_namespace(c, audit)
    with pytest.raises(subprocess.CalledProcessError) as failed:
        c.cp.kubectl("wait", "--for=create", "resourcequota/dynquota", "-n", ns,
                     "--timeout=3s")  # fmt: skip
    assert failed.value.returncode == 1
    assert "timed out waiting for the condition" in failed.value.stderr
    assert c.quota(ns) is None
