"""Issue 16, "done means": a fresh `helm install` with default values on a cluster that already
runs busy namespaces changes no namespace's enforcement until the admin switches to enforcing
(`defaultPolicy.dryRun=false`); after that, the namespace already above the policy maximum can
still replace objects (ConfigMaps and pods), because its quota holds at usage, never below it.

A private control plane (the default policy selects every namespace, so nothing else may run
there). The chart is installed with `helm install` and its default values, except a small
ConfigMap maximum (20) and pod maximum (3) so "above the maximum" takes 25 ConfigMaps and 4
pods instead of 2,001 and 1,001. Without a kubelet the chart's operator pod never runs, so the
operator runs in-process with exactly the Settings the chart's Deployment gives it (its
environment, read back from the cluster) and a TokenRequest token of the chart's own
ServiceAccount (the chart's RBAC, not cluster admin).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from dynquota.settings import Settings
from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.operator import PAUSE, OperatorThread
from dynquota.testing.podtoken import pod_kubeconfig
from dynquota.testing.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "dynquota"
RELEASE, RELEASE_NS = "dynquota", "dynquota-system"
BATCH, WEB = "batch", "web"
MAXIMUM = 20  # the chart's ConfigMap maximum for this test (default 2000)
PODS_MAXIMUM = 3  # the chart's pod maximum for this test (default 1000)
SMALL_MAXIMUM = (
    "--set", "defaultPolicy.resources.configmaps.minimum=10",
    "--set", f"defaultPolicy.resources.configmaps.maximum={MAXIMUM}",
    "--set", "defaultPolicy.resources.pods.minimum=1",
    "--set", f"defaultPolicy.resources.pods.maximum={PODS_MAXIMUM}",
)  # fmt: skip


def pod(name: str) -> dict[str, Any]:
    """A pod no scheduler places here: Pending, yet charged by quota admission."""
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": PAUSE}]}}


@dataclass
class Cluster:
    cp: LocalControlPlane
    core: Any
    apps: Any
    env: dict[str, str]

    def helm(self, *args: str) -> str:
        assert self.cp.bin_dir is not None
        done = subprocess.run(
            [str(self.cp.bin_dir / "helm"), "--kubeconfig", self.cp.kubeconfig, *args],
            capture_output=True, text=True, env=self.env, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def quotas(self) -> list[tuple[str, str]]:
        items = self.core.list_resource_quota_for_all_namespaces().items
        return sorted((q.metadata.namespace, q.metadata.name) for q in items)

    def quota(self, ns: str) -> Any:
        try:
            return self.core.read_namespaced_resource_quota("dynquota", ns)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def configmaps(self, ns: str) -> int:
        return len(self.core.list_namespaced_config_map(ns).items)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A private control plane with two busy namespaces, before dynquota is installed:
    ``batch`` holds 25 ConfigMaps (24 + kube-root-ca.crt), above the maximum of 20, and
    ``batch`` also 4 Pending pods (above the pod maximum of 3); ``web`` 2 Pending pods and 3
    ConfigMaps."""
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        **os.environ,
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    with LocalControlPlane(resource_quota_sync_period=10) as cp:
        api = kubernetes.config.new_client_from_config(config_file=cp.kubeconfig)
        c = Cluster(cp, kubernetes.client.CoreV1Api(api), kubernetes.client.AppsV1Api(api), env)
        for ns, configmaps, pods in ((BATCH, 24, 4), (WEB, 2, 2)):
            c.core.create_namespace({"metadata": {"name": ns}})
            for i in range(configmaps):
                c.core.create_namespaced_config_map(ns, {"metadata": {"name": f"cm-{i}"}})
            for i in range(pods):
                c.core.create_namespaced_pod(ns, pod(f"p-{i}"))
            wait_until(
                lambda ns=ns, n=configmaps: c.configmaps(ns) == n + 1,  # type: ignore[misc]
                f"kube-root-ca.crt published in {ns}",
                timeout=60,
            )
        yield c
        api.close()


def operator_settings(c: Cluster, workdir: Path) -> Settings:
    """The Settings the chart's Deployment gives the operator (its env, read back from the
    cluster), plus what only the test bed needs: a kubeconfig with a TokenRequest token of the
    chart's ServiceAccount, and free ports."""
    deployment = c.apps.read_namespaced_deployment(RELEASE, RELEASE_NS)
    (container,) = deployment.spec.template.spec.containers
    sa = deployment.spec.template.spec.service_account_name
    # a token bound to a Pod named as the operator's pod (its holder identity), as a real
    # replica's projected token is: the chart's Lease fence admits the Lease holder's writes
    kubeconfig = pod_kubeconfig(c.cp, c.core, workdir, (RELEASE_NS, sa), f"{RELEASE}-adoption")
    downward = {"metadata.namespace": RELEASE_NS, "metadata.name": f"{RELEASE}-adoption"}
    with pytest.MonkeyPatch.context() as env:
        for item in container.env:
            if item.value_from is not None:
                env.setenv(item.name, downward[item.value_from.field_ref.field_path])
            else:
                env.setenv(item.name, item.value or "")
        env.setenv("DYNQUOTA_KUBECONFIG", str(kubeconfig))
        env.setenv("DYNQUOTA_METRICS_PORT", "0")
        env.setenv("DYNQUOTA_PROBE_PORT", "0")
        return Settings()


def plan(c: Cluster, ns: str) -> dict[tuple[str, str], dict[str, Any]]:
    """`dynquota plan -n NS -o json` as cluster admin: its rows by (namespace, resource)."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "dynquota"), "plan", "--kubeconfig",
         c.cp.kubeconfig, "--operator-namespace", RELEASE_NS, "-n", ns, "-o", "json"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return {(r["namespace"], r["resource"]): r for r in json.loads(done.stdout)["rows"]}


def dry_run_events(c: Cluster, ns: str) -> list[tuple[str, str]]:
    """(reason, message) of the Events about the managed quota of ``ns``, sorted."""
    events = c.core.list_namespaced_event(
        ns, field_selector="involvedObject.kind=ResourceQuota,involvedObject.name=dynquota"
    ).items
    return sorted((e.reason, e.message) for e in events)


def test_install_with_default_values_enforces_nothing_until_switched(
    cluster: Cluster, tmp_path: Path
) -> None:
    c = cluster
    c.helm("install", RELEASE, str(CHART), "-n", RELEASE_NS, "--create-namespace", *SMALL_MAXIMUM)
    policy = yaml.safe_load(c.cp.kubectl("get", "dqp", "default", "-o", "yaml"))
    assert policy["spec"]["dryRun"] is True
    assert policy["spec"]["namespaceSelector"] == {}
    settings = operator_settings(c, tmp_path)
    assert settings.dry_run is False  # the operator is not in dry run: the policy is
    # Leader election is on for the one replica: the writes below need the chart's Lease Role.
    assert (settings.leader_election, settings.lease_name) == (True, "dynquota")
    op = OperatorThread(settings).start()
    try:
        # Audit: every namespace is evaluated and reported, none is enforced.
        wait_until(
            lambda: dry_run_events(c, BATCH) and dry_run_events(c, WEB),
            "dry-run Events in batch and web",
        )
        op.idle()
        assert c.quotas() == []
        for reason, message in dry_run_events(c, BATCH) + dry_run_events(c, WEB):
            assert message.startswith("(dry run) "), (reason, message)
        batch_events = dry_run_events(c, BATCH)
        assert any("held at usage 25" in m for _, m in batch_events), batch_events
        # The target is clamped at the maximum; the (simulated) hard holds at usage.
        batch = {"namespace": BATCH, "resource": "configmaps"}
        assert op.sample("dynquota_target", batch) == MAXIMUM
        assert op.sample("dynquota_hard", batch) == 25
        assert op.sample("dynquota_usage_above_maximum", batch) == 1
        # (Other dry-run reasons may join, e.g. a tenant's at-limit notice: all are prefixed.)
        assert {"Resized", "UsageAboveMaximum"} <= {r for r, _ in batch_events}, batch_events
        assert op.sample("dynquota_target", {"namespace": WEB, "resource": "pods"}) == 3
        batch_pods = {"namespace": BATCH, "resource": "pods"}
        assert op.sample("dynquota_target", batch_pods) == PODS_MAXIMUM
        assert op.sample("dynquota_hard", batch_pods) == 4
        # `dynquota plan` (read-only, as the admin would run it) tells the same.
        rows = plan(c, BATCH)
        assert rows[(BATCH, "configmaps")]["tally"] == 25
        assert "held at usage 25" in rows[(BATCH, "configmaps")]["why"], rows

        # The one value that enforces.
        c.helm("upgrade", RELEASE, str(CHART), "-n", RELEASE_NS, "--reuse-values",
               "--set", "defaultPolicy.dryRun=false")  # fmt: skip

        def enforced(ns: str, expected: dict[str, str]) -> Any:
            q = c.quota(ns)
            if q is None or q.spec.hard != expected or (q.status.hard or {}) != expected:
                return None
            return q

        # batch is above the maximum: held at its usage (25 > 20), never below it.
        wait_until(lambda: enforced(BATCH, {"configmaps": "25", "pods": "4"}), "batch enforced")
        wait_until(lambda: enforced(WEB, {"configmaps": "10", "pods": "3"}), "web enforced")
        names = {ns for ns, _ in c.quotas()}
        assert names.isdisjoint({RELEASE_NS, "kube-system", "kube-public", "kube-node-lease"})
        assert {BATCH, WEB} <= names

        # A new object beyond usage is refused in batch ...
        with pytest.raises(ApiException) as refused:
            c.core.create_namespaced_config_map(BATCH, {"metadata": {"name": "new"}})
        assert refused.value.status == 403
        assert "exceeded quota: dynquota, requested: configmaps=1, used: configmaps=25, " \
            "limited: configmaps=25" in str(refused.value.body)  # fmt: skip
        # ... and a replacement is admitted: delete one, create one.
        c.core.delete_namespaced_config_map("cm-0", BATCH)
        wait_until(
            lambda: (c.quota(BATCH).status.used or {}).get("configmaps") == "24",
            "status.used.configmaps == 24 after the delete",
        )
        c.core.create_namespaced_config_map(BATCH, {"metadata": {"name": "cm-0"}})
        assert c.configmaps(BATCH) == 25
        # The same for pods: a 5th is refused, the replacement of a deleted one is admitted.
        with pytest.raises(ApiException) as refused:
            c.core.create_namespaced_pod(BATCH, pod("p-new"))
        assert refused.value.status == 403
        assert "exceeded quota: dynquota, requested: pods=1, used: pods=4, limited: pods=4" \
            in str(refused.value.body)  # fmt: skip
        c.core.delete_namespaced_pod("p-0", BATCH)
        wait_until(
            lambda: (c.quota(BATCH).status.used or {}).get("pods") == "3",
            "status.used.pods == 3 after the delete",
        )
        c.core.create_namespaced_pod(BATCH, pod("p-0"))
        # The quota held: no write lowered it below usage at any point.
        assert c.quota(BATCH).spec.hard == {"configmaps": "25", "pods": "4"}
    finally:
        op.stop()
