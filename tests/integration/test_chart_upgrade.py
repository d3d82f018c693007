"""`helm upgrade` from the released 0.1.0 chart to this one on the real local control plane
(docs/upgrade.md, issue #22): the 0.1.0 chart is taken from git history (the commit of the
0.1.0 release: the last first-parent commit of the day CHANGELOG.md gives for it), CRDs are
applied first as the upgrade notes say, then the release is upgraded.

A clone without history (``--depth``) cannot give the old chart: the test is skipped then,
saying so. CI clones with full history.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import tarfile
import uuid
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "dynquota"


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True, timeout=60
    ).stdout


def release_commit(version: str) -> str:
    """The commit of release ``version``: the last first-parent commit on or before the date
    CHANGELOG.md gives it (``## <version> — YYYY-MM-DD``), checked to carry that chart
    version. Skips the test in a shallow clone (the history is not there)."""
    if _git("rev-parse", "--is-shallow-repository").strip() != "false":
        pytest.skip("shallow clone: the 0.1.0 chart comes from git history (git fetch --unshallow)")
    changelog = (ROOT / "CHANGELOG.md").read_text()
    found = re.search(rf"^## {re.escape(version)} — (\d{{4}}-\d\d-\d\d)$", changelog, re.M)
    assert found, f"CHANGELOG.md has no '## {version} — <date>' heading"
    commit = _git(
        "log", "--first-parent", "-1", "--format=%H", f"--until={found.group(1)} 23:59:59 +0000"
    ).strip()
    chart = _git("show", f"{commit}:helm/dynquota/Chart.yaml")
    assert re.search(rf"^version: {re.escape(version)}$", chart, re.M), commit
    return commit


def extract_chart(commit: str, into: Path) -> Path:
    """``helm/dynquota`` as it was at ``commit`` (git archive), under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit, "helm/dynquota"],
        capture_output=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "helm" / "dynquota"


def guard_read(guard: str) -> tuple[list[str], list[str], list[str]]:
    """The one admissionregistration rule of the operator's ClusterRole (issue 30): get of the
    budget guard's policy and binding, by name; no write, no list."""
    return (
        ["validatingadmissionpolicies", "validatingadmissionpolicybindings"],
        [guard],
        ["get"],
    )


def admission_rules(role: Any) -> list[tuple[list[str], list[str], list[str]]]:
    """The ClusterRole's rules on admissionregistration.k8s.io: (resources, names, verbs)."""
    return [
        (rule.resources, rule.resource_names, rule.verbs)
        for rule in role.rules
        if "admissionregistration.k8s.io" in (rule.api_groups or [])
    ]


def test_helm_upgrade_from_0_1_0(controlplane: LocalControlPlane, tmp_path: Path) -> None:
    """0.1.0 installed, CRDs applied, `helm upgrade --reset-then-reuse-values` to this chart:
    the budget guard and its binding exist, the operator's ClusterRole has no rule on
    admissionregistration.k8s.io, the QuotaBudget CRD is served, a create in a labelled
    namespace without a quota is admitted, and `rbac.budgetAdmissionPolicies` is still
    accepted (ignored)."""
    old = extract_chart(release_commit("0.1.0"), tmp_path / "old")
    cp = controlplane
    assert cp.bin_dir is not None
    tag = uuid.uuid4().hex[:6]
    name, namespace = f"dqup{tag}", f"dq-upgrade-{tag}"
    home = tmp_path / "helm-home"
    env = {
        **os.environ,
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }

    def helm(*args: str) -> str:
        done = subprocess.run(
            [str(cp.bin_dir / "helm"), "--kubeconfig", cp.kubeconfig, *args],
            capture_output=True, text=True, env=env, check=False, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    cp.kubectl("create", "namespace", namespace)
    selector = f"defaultPolicy.namespaceSelector.matchLabels.dqupgrade={tag}"
    try:
        helm("install", name, str(old), "-n", namespace, "--set-string", selector)
        assert "0.1.0" in helm("list", "-n", namespace, "-o", "json")
        # docs/upgrade.md: CRDs first (Helm never upgrades crds/), then the release
        cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
        # 0.1.0's default policy selects on `dqupgrade`, a key no guard covers: the upgrade is
        # refused (test_chart_install) until the key is guarded, the documented migration
        helm("upgrade", name, str(CHART), "-n", namespace, "--reset-then-reuse-values",
             "--set", "governanceLabels.guardedKeys={dqupgrade}")  # fmt: skip
        api = kubernetes.config.new_client_from_config(config_file=cp.kubeconfig)
        admission = kubernetes.client.AdmissionregistrationV1Api(api)
        rbac = kubernetes.client.RbacAuthorizationV1Api(api)
        guard = f"{name}-dynquota-budget-guard"
        policy = admission.read_validating_admission_policy(guard)
        binding = admission.read_validating_admission_policy_binding(guard)
        assert policy.spec.failure_policy == "Ignore"
        assert (binding.spec.param_ref.name, binding.spec.param_ref.parameter_not_found_action) == (
            "dynquota",
            "Allow",
        )
        role = rbac.read_cluster_role(f"{name}-dynquota")
        assert admission_rules(role) == [guard_read(guard)]
        cp.kubectl(
            "wait", "--for=condition=Established", "crd/quotabudgets.dynquota.io", "--timeout=60s"
        )
        # a namespace labelled into a budget, no quota: the guard admits
        core = kubernetes.client.CoreV1Api(api)
        ns = f"dq-upgrade-ns-{tag}"
        core.create_namespace(
            {"metadata": {"name": ns, "labels": {"dynquota.io/budget": f"b-{tag}"}}}
        )
        pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}

        def admitted() -> bool:
            try:
                core.create_namespaced_pod(ns, pod, dry_run="All", _request_timeout=10)
            except ApiException:
                return False
            return True

        wait_until(admitted, "a create in a labelled namespace without a quota admitted")
        # the value of v0.2 builds is accepted and ignored (a --reuse-values upgrade of such a
        # release must not fail): the ClusterRole gets no write rule
        helm("upgrade", name, str(CHART), "-n", namespace, "--reuse-values",
             "--set", "rbac.budgetAdmissionPolicies=true")  # fmt: skip
        role = rbac.read_cluster_role(f"{name}-dynquota")
        assert admission_rules(role) == [guard_read(guard)]
        core.delete_namespace(ns)
        api.close()
    finally:
        subprocess.run(
            [str(cp.bin_dir / "helm"), "--kubeconfig", cp.kubeconfig, "uninstall", name, "-n",
             namespace, "--no-hooks", "--wait"],
            capture_output=True, env=env, check=False, timeout=300,
        )  # fmt: skip
        cp.kubectl("delete", "namespace", namespace, "--wait=false")
