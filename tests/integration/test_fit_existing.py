"""Issue 31's fixes on the real apiserver, which judges: a StatefulSet's replicas need their
claims (``fit`` counts them against the storage quota; the StatefulSet controller's refused
claim is the one ``fit`` names), and a workload that exists is no other usage of its own (a
scale fits where its own pods run; a rollout's surge is what the apiserver then admits above
the replicas)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_run import run_cli  # same directory

from dynquota.testing.growth import deployment
from dynquota.testing.operator import OperatorCluster
from dynquota.testing.wait import wait_until


def _statefulset(replicas: int) -> dict[str, Any]:
    """db: pause pods created in parallel (no node runs them), a 4Gi ``data`` claim each."""
    labels = {"app": "db"}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {
            "replicas": replicas,
            "serviceName": "db",
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "pause"}],
                         "terminationGracePeriodSeconds": 0},
            },
            "volumeClaimTemplates": [
                {"metadata": {"name": "data"},
                 "spec": {"accessModes": ["ReadWriteOnce"],
                          "resources": {"requests": {"storage": "4Gi"}}}},
            ],
        },
    }  # fmt: skip


def _fit(op_cluster: OperatorCluster, ns: str, body: dict[str, Any], tmp_path: Path,
         capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:  # fmt: skip
    manifest = tmp_path / "m.yaml"
    manifest.write_text(yaml.safe_dump(body))
    code, out, err = run_cli(["fit", "-f", str(manifest), "-n", ns, "-o", "json",
                              "--kubeconfig", op_cluster.cp.kubeconfig], capsys)  # fmt: skip
    assert err == ""
    return code, json.loads(out)


def _used(op_cluster: OperatorCluster, ns: str, name: str, key: str) -> str | None:
    status = op_cluster.quota(ns, name).status
    return None if status is None else (status.used or {}).get(key)


def test_a_statefulsets_claims_count_and_the_refused_claim_is_named(
    op_cluster: OperatorCluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ns = op_cluster.new_namespace()
    try:
        op_cluster.core.create_namespaced_resource_quota(ns, {
            "metadata": {"name": "storage"},
            "spec": {"hard": {"persistentvolumeclaims": "3", "requests.storage": "100Gi"}},
        })  # fmt: skip
        wait_until(lambda: _used(op_cluster, ns, "storage", "persistentvolumeclaims") == "0",
                   "the storage quota counted")  # fmt: skip
        code, document = _fit(op_cluster, ns, _statefulset(4), tmp_path, capsys)
        assert code == 1
        [db] = document["workloads"]
        assert (db["fitsNow"], db["never"]) == (3, 1)
        assert [(b["quota"], b["key"], b["reason"]) for b in db["blockedBy"]] == [
            ("storage", "persistentvolumeclaims", "fixed")
        ]
        assert [(r["quota"], r["key"], r["perPod"], r["fitsNow"]) for r in document["quotas"]] == [
            ("storage", "persistentvolumeclaims", "1", 3),
            ("storage", "requests.storage", "4Gi", 25),
        ]
        refusal = db["nextRefusal"]
        assert refusal == (
            'persistentvolumeclaims "data-db-3" is forbidden: exceeded quota: storage, '
            "requested: persistentvolumeclaims=1, used: persistentvolumeclaims=3, limited: "
            "persistentvolumeclaims=3"
        )

        # the apiserver admits three claims and refuses data-db-3 with that very text
        op_cluster.apps.create_namespaced_stateful_set(ns, _statefulset(4))

        def refused_claim() -> bool:
            events = op_cluster.core.list_namespaced_event(ns).items
            return any(refusal in (e.message or "") for e in events)

        wait_until(refused_claim, "the StatefulSet controller's refused claim", timeout=60)
        claims = op_cluster.core.list_namespaced_persistent_volume_claim(ns).items
        assert sorted(c.metadata.name for c in claims) == ["data-db-0", "data-db-1", "data-db-2"]

        # asked again with the StatefulSet there: its pods are its own, its claims exist
        wait_until(lambda: len(op_cluster.core.list_namespaced_pod(ns).items) == 3, "3 pods")
        wait_until(lambda: _used(op_cluster, ns, "storage", "persistentvolumeclaims") == "3",
                   "three claims counted")  # fmt: skip
        code, document = _fit(op_cluster, ns, _statefulset(4), tmp_path, capsys)
        [db] = document["workloads"]
        assert (code, db["fitsNow"], db["never"], db["nextRefusal"]) == (1, 3, 1, refusal)
        code, document = _fit(op_cluster, ns, _statefulset(3), tmp_path, capsys)
        assert (code, document["workloads"][0]["fitsNow"]) == (0, 3)
    finally:
        op_cluster.delete_namespace(ns)


def test_an_existing_deployment_scales_into_its_own_room_and_a_rollout_asks_for_its_surge(
    op_cluster: OperatorCluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ns = op_cluster.new_namespace()
    try:
        op_cluster.core.create_namespaced_resource_quota(
            ns, {"metadata": {"name": "compute"}, "spec": {"hard": {"requests.cpu": "8"}}}
        )
        web = {"apiVersion": "apps/v1", "kind": "Deployment", **deployment("web", 25)}
        web["spec"]["template"]["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": "250m"}
        }
        op_cluster.apps.create_namespaced_deployment(ns, web)
        wait_until(lambda: _used(op_cluster, ns, "compute", "requests.cpu") == "6250m",
                   "25 pods counted")  # fmt: skip

        web["spec"]["replicas"] = 30  # a scale: the 25 running are among the 30
        code, document = _fit(op_cluster, ns, web, tmp_path, capsys)
        [fit] = document["workloads"]
        assert (code, fit["fitsNow"], fit["surge"], fit["never"]) == (0, 30, 0, 0)
        assert document["quotas"][0]["used"] == "0"

        rolled = json.loads(json.dumps(web))  # a rollout: a new template, 25 % surge (8)
        rolled["spec"]["template"]["metadata"]["labels"]["version"] = "2"
        code, document = _fit(op_cluster, ns, rolled, tmp_path, capsys)
        [fit] = document["workloads"]
        assert (code, fit["replicas"], fit["surge"], fit["fitsNow"], fit["never"]) == (
            1, 30, 8, 32, 6,
        )  # fmt: skip

        # the apiserver: the scale to 30 is admitted, then the rollout's surge up to 32 pods
        op_cluster.apps.patch_namespaced_deployment("web", ns, {"spec": {"replicas": 30}})
        wait_until(lambda: _used(op_cluster, ns, "compute", "requests.cpu") == "7500m",
                   "30 pods counted")  # fmt: skip
        op_cluster.apps.patch_namespaced_deployment("web", ns, {
            "spec": {"template": {"metadata": {"labels": {"version": "2"}}}}
        })  # fmt: skip

        def refused_at_32() -> bool:
            pods = op_cluster.core.list_namespaced_pod(ns).items
            events = op_cluster.core.list_namespaced_event(ns).items
            refused = any("exceeded quota: compute" in (e.message or "") for e in events)
            return len(pods) == 32 and refused

        wait_until(refused_at_32, "32 pods and a refused surge pod", timeout=60)
        assert _used(op_cluster, ns, "compute", "requests.cpu") == "8"
    finally:
        op_cluster.delete_namespace(ns)
