"""Every file of examples/ accepted by the real apiserver: values files rendered by the real
`helm template` (values schema included) and every rendered object applied with a server-side
dry run, the operator's Pod template admitted under the `restricted` Pod Security Standard;
policies applied with a server-side dry run against the CRD (schema, CEL rules, defaults)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dynquota.policy.models import validate_policy
from dynquota.testing.controlplane import LocalControlPlane

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "dynquota"
EXAMPLES = ROOT / "examples"
VALUES_FILES = sorted(EXAMPLES.glob("*-values.yaml"))
POLICY_FILES = sorted(EXAMPLES.glob("*-policy.yaml"))
NS = "examples-dryrun"


def test_the_four_deployment_shapes_are_there() -> None:
    assert [p.name for p in VALUES_FILES] == ["pilot-values.yaml", "production-values.yaml"]
    assert [p.name for p in POLICY_FILES] == [
        "batch-policy.yaml",
        "hpa-heavy-policy.yaml",
        "pilot-policy.yaml",
    ]


@pytest.fixture(scope="module")
def release_namespace(controlplane: LocalControlPlane) -> Iterator[str]:
    """A namespace enforcing the `restricted` Pod Security Standard, with the CRD installed."""
    controlplane.kubectl("create", "namespace", NS)
    controlplane.kubectl("label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted")
    controlplane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    controlplane.kubectl(
        "wait", "--for=condition=Established", "crd/dynamicquotapolicies.dynquota.io"
    )
    yield NS
    controlplane.kubectl("delete", "namespace", NS, "--wait=false")


def render(cp: LocalControlPlane, values: Path) -> list[dict[str, Any]]:
    assert cp.bin_dir is not None
    done = subprocess.run(
        [str(cp.bin_dir / "helm"), "template", "dynquota", str(CHART), "--namespace", NS,
         "--values", str(values)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.name)
def test_values_file_renders_and_every_object_is_accepted(
    controlplane: LocalControlPlane, release_namespace: str, values: Path
) -> None:
    objs = render(controlplane, values)
    out = controlplane.kubectl(
        "apply", "--dry-run=server", "-o", "name", "-f", "-", input=yaml.safe_dump_all(objs)
    )
    assert len(out.split()) == len(objs)
    (deployment,) = [o for o in objs if o["kind"] == "Deployment"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "examples-psa", "namespace": release_namespace},
        "spec": {**deployment["spec"]["template"]["spec"], "serviceAccountName": "default"},
    }
    controlplane.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(pod))
    kinds = sorted(o["kind"] for o in objs)
    assert not any(o["apiVersion"].startswith("monitoring.coreos.com/") for o in objs)
    if values.name == "production-values.yaml":
        assert deployment["spec"]["replicas"] == 2
        assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
        assert kinds.count("PodDisruptionBudget") == 1
        assert "Role" in kinds  # leader election's Lease rights
        env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]
               ["containers"][0]["env"]}  # fmt: skip
        assert env["DYNQUOTA_LEADER_ELECTION"] == "true"
        # Production enforces; the chart's own default is audit only (dry run).
        (policy,) = [o for o in objs if o["kind"] == "DynamicQuotaPolicy"]
        assert policy["spec"]["dryRun"] is False
        assert env["DYNQUOTA_DRY_RUN"] == "false"
    else:
        (policy,) = [o for o in objs if o["kind"] == "DynamicQuotaPolicy"]
        assert policy["spec"]["dryRun"] is True
        assert policy["spec"]["namespaceSelector"] == {}


@pytest.mark.parametrize("policy_file", POLICY_FILES, ids=lambda p: p.name)
def test_policy_is_accepted_by_the_crd_and_the_operator(
    controlplane: LocalControlPlane, release_namespace: str, policy_file: Path
) -> None:
    out = controlplane.kubectl("apply", "--dry-run=server", "-o", "yaml", "-f", str(policy_file))
    stored = yaml.safe_load(out)
    written = yaml.safe_load(policy_file.read_text())
    assert stored["kind"] == "DynamicQuotaPolicy"
    # Nothing the file says was pruned or changed by the apiserver.
    for resource, profile in written["spec"]["resources"].items():
        for field, value in profile.items():
            assert stored["spec"]["resources"][resource][field] == value, (resource, field)
    # The operator's own validation agrees (it would otherwise freeze the namespaces).
    info = validate_policy(stored)
    assert info.reason is None
    assert info.spec is not None


@pytest.mark.parametrize("policy_file", POLICY_FILES, ids=lambda p: p.name)
def test_policy_selects_on_guarded_keys_only(policy_file: Path) -> None:
    """The chart's `<fullname>-policy-selectors` refuses a selector on a key outside
    governanceLabels (default: the prefix dynquota.io/, and kubernetes.io/metadata.name):
    the examples select on guarded keys, so they apply where the chart runs (issue 23)."""
    selector = yaml.safe_load(policy_file.read_text())["spec"].get("namespaceSelector") or {}
    keys = [
        *selector.get("matchLabels", {}),
        *(e["key"] for e in selector.get("matchExpressions", [])),
    ]
    assert keys, "an example policy selects on something"
    assert [k for k in keys if not k.startswith("dynquota.io/")] == []
