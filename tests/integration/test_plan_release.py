"""`dynquota plan` sees what the operator sees: the running release's settings, read from its
operator Deployment as the chart renders it (helm/dynquota/templates/deployment.yaml), on the
real apiserver; the namespaces not managed or not enforced, and why; the other quotas of a
namespace. Without a release it says so and falls back to the local environment.

On the operator tests' private control plane (no chart Deployment there but the one made
here; no operator runs during these tests).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dynquota.cli import main
from dynquota.testing.operator import OperatorCluster

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "dynquota"
RELEASE, RELEASE_NS = "dqplan", "dqplan-system"
PROFILE = {
    "bufferPercent": 40,
    "minimum": 10,
    "maximum": 100,
    "upscaleCooldown": "5m",
    "downscaleCooldown": "1h",
}


def run_plan(args: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    """``dynquota plan ARGS``'s stdout lines, blanks runs of spaces made one (the table's
    padding depends on every name shown)."""
    capsys.readouterr()
    assert main(["plan", *args]) == 0
    return [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]


@pytest.fixture
def release(op_cluster: OperatorCluster, tmp_path: Path) -> Iterator[str]:
    """The chart's operator Deployment of release ``dqplan`` in ``dqplan-system`` (pods never
    run: nothing here schedules them), rendered with excludeNamespaces, an override TTL from
    a ConfigMap and a log level from a Secret; yields the excluded namespace's name."""
    cp = op_cluster.cp
    assert cp.bin_dir is not None
    excluded = f"dq-excl-{uuid.uuid4().hex[:6]}"
    values = {
        "operator": {
            "dryRun": False,
            "excludeNamespaces": [excluded],
            "includeNamespaces": [],
            "extraEnv": [
                {
                    "name": "DYNQUOTA_OVERRIDE_TTL",
                    "valueFrom": {"configMapKeyRef": {"name": "dqplan-env", "key": "ttl"}},
                },
                {
                    "name": "DYNQUOTA_LOG_LEVEL",
                    "valueFrom": {"secretKeyRef": {"name": "dqplan-secret", "key": "level"}},
                },
            ],
        }
    }
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    rendered = subprocess.run(
        [str(cp.bin_dir / "helm"), "template", RELEASE, str(CHART), "--namespace", RELEASE_NS,
         "-f", str(tmp_path / "values.yaml"), "--show-only", "templates/deployment.yaml"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    if subprocess.run(
        [str(cp.bin_dir / "kubectl"), f"--kubeconfig={cp.kubeconfig}", "get", "ns", RELEASE_NS],
        capture_output=True,
        check=False,
    ).returncode:
        cp.kubectl("create", "namespace", RELEASE_NS)
    cp.kubectl("create", "configmap", "dqplan-env", "-n", RELEASE_NS, "--from-literal=ttl=72h")
    cp.kubectl("apply", "-f", "-", input=rendered)
    try:
        yield excluded
    finally:
        cp.kubectl("delete", "--ignore-not-found", "-f", "-", input=rendered)
        cp.kubectl("delete", "configmap", "dqplan-env", "-n", RELEASE_NS, "--ignore-not-found")


def test_plan_reads_the_release_settings_and_says_why(
    op_cluster: OperatorCluster,
    scope: dict[str, str],
    release: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    c = op_cluster
    admin = c.cp.kubeconfig
    selected = {**scope, "dq-plan": "yes"}
    excluded = release
    c.core.create_namespace({"metadata": {"name": excluded, "labels": selected}})
    foreign = c.new_namespace(selected)
    c.core.create_namespaced_resource_quota(
        foreign,
        {"metadata": {"name": "team"}, "spec": {"hard": {"pods": "5", "configmaps": "20"}}},
    )
    managed = c.new_namespace(selected)
    opted_out = c.new_namespace({**selected, "dynquota.io/managed": "false"})
    unmatched = c.new_namespace(scope)
    audited = c.new_namespace({**scope, "dq-plan": "audit"})
    compute = c.new_namespace({**scope, "dq-plan": "compute"})
    c.policy("plan-p", {"dq-plan": "yes"}, pods=PROFILE)
    c.policy("plan-audit", {"dq-plan": "audit"}, pods=PROFILE, dry_run=True)
    cpu = {**PROFILE, "minimum": "500m", "maximum": "2"}
    c.policy(
        "plan-compute",
        {"dq-plan": "compute"},
        extra_spec={"defaultRequests": {"memory": "64Mi"}},
        **{"requests.cpu": cpu, "requests.memory": {**cpu, "minimum": "1Gi", "maximum": "4Gi"}},
    )
    c.create_pods(managed, 3)
    shown = [excluded, RELEASE_NS, foreign, managed, opted_out, unmatched, audited, compute]

    lines = run_plan(
        ["--kubeconfig", admin, *(f"--namespace={ns}" for ns in [*shown, "kube-system"])],
        capsys,
    )

    assert lines[:4] == [
        f"settings: release {RELEASE}, Deployment {RELEASE_NS}/{RELEASE}-dynquota (container "
        "operator; 0/1 replicas ready: no operator runs now, nothing is written)",
        "settings: DYNQUOTA_LOG_LEVEL not resolved (secretKeyRef: plan reads no Secrets): its "
        "default is used",
        f"settings: dryRun=false, own namespace {RELEASE_NS}, excludeNamespaces={excluded}, "
        "includeNamespaces=(all), overrideTTL=72h",
        "",
    ]
    table = lines[4 : lines.index("", 4)]
    assert table[0] == "NAMESPACE RESOURCE TALLY STATUS.USED HARD TARGET NEXT WHY"
    rows = {tuple(line.split()[:2]): line for line in table[1:]}
    # only the namespaces the operator writes in (in dry run: would write): never the excluded
    assert {ns for ns, _ in rows} == {foreign, managed, audited, compute}
    assert rows[(managed, "pods")] == (
        f"{managed} pods 3 - - 10 create create pods 10: usage 3, buffer 40%, at minimum 10"
    )
    assert rows[(foreign, "pods")] == (
        f"{foreign} pods 0 - - 10 create create pods 10: usage 0, buffer 40%, at minimum 10; "
        "lower limit in quota team: pods=5 (the lowest limit wins)"
    )
    # no LimitRange gives cpu a default request: held, as the operator holds it; memory's
    # comes from the companion LimitRange the operator would create first
    assert rows[(compute, "requests.cpu")] == (
        f"{compute} requests.cpu - - - - held NeedsDefaultRequests: requests.cpu not added to "
        "the quota: with a quota on it the apiserver refuses every pod whose containers do not "
        "all declare a cpu request, and this namespace has no LimitRange (type Container) with "
        "defaultRequest.cpu; add one and dynquota adds the key"
    )
    assert rows[(compute, "requests.memory")].startswith(
        f"{compute} requests.memory - - - - create create requests.memory 1Gi"
    )
    assert rows[(audited, "pods")].startswith(
        f"{audited} pods 0 - - 10 create dry run, not written: create pods 10: "
    )

    rest = lines[len(table) + 5 :]
    not_managed = rest[: rest.index("")]
    assert not_managed[0] == "not managed or not enforced (6 namespaces):"
    assert not_managed[1] == "NAMESPACE WHY"
    assert sorted(not_managed[2:]) == sorted(
        [
            f"{excluded} excluded: listed in excludeNamespaces",
            f"{RELEASE_NS} excluded: the release's own namespace",
            "kube-system excluded: system namespace (always excluded)",
            f"{opted_out} opted out: labelled dynquota.io/managed=false",
            f"{unmatched} no policy matches this namespace",
            f"{audited} dry run: policy plan-audit has spec.dryRun=true (decisions reported, "
            "no quota written)",
        ]
    )
    others = rest[len(not_managed) + 1 :]
    assert others == [
        "other quotas (not dynquota's; admission checks a create against every quota of the "
        "namespace: the lowest limit wins):",
        "NAMESPACE QUOTA HARD",
        f"{foreign} team configmaps=20, pods=5",
        "",
        "companion LimitRanges (dynquota; they give the compute keys their default requests):",
        "NAMESPACE STATE DEFAULTS WHY",
        f"{compute} create defaultRequest memory=64Mi the operator writes it, then adds the "
        "compute keys it covers",
    ]

    # -o json: the same, for scripts
    capsys.readouterr()
    assert main(["plan", "--kubeconfig", admin, "-o", "json", "-n", excluded, "-n", foreign]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["settings"] == {
        "from": "release",
        "release": RELEASE,
        "deployment": f"{RELEASE_NS}/{RELEASE}-dynquota",
        "replicas": 1,
        "readyReplicas": 0,
        "notes": [
            "DYNQUOTA_LOG_LEVEL not resolved (secretKeyRef: plan reads no Secrets): its "
            "default is used"
        ],
        "dryRun": False,
        "namespace": RELEASE_NS,
        "excludeNamespaces": [excluded],
        "includeNamespaces": [],
        "overrideTTLSeconds": 72 * 3600,
    }
    assert document["notManaged"] == [
        {"namespace": excluded, "why": "excluded: listed in excludeNamespaces"}
    ]
    assert document["otherQuotas"] == [
        {"namespace": foreign, "name": "team", "hard": {"configmaps": "20", "pods": "5"}}
    ]

    # named explicitly: the same release; a named release that does not exist: an error
    named = run_plan(
        ["--kubeconfig", admin, "--release", RELEASE, "--release-namespace", RELEASE_NS,
         "-n", excluded],
        capsys,
    )  # fmt: skip
    assert named[:3] == lines[:3]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["plan", "--kubeconfig", admin, "--release", "nope", "-n", excluded])
    assert exited.value.code == 2
    missing = capsys.readouterr()
    assert missing.out == ""
    assert (
        "no Deployment labelled app.kubernetes.io/part-of=dynquota,"
        "app.kubernetes.io/component=operator,app.kubernetes.io/instance=nope in any namespace "
        "(--release/--release-namespace as given)"
    ) in missing.err


def test_without_a_release_plan_says_so_and_uses_the_local_environment(
    op_cluster: OperatorCluster,
    scope: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    c = op_cluster
    ns = c.new_namespace({**scope, "dq-plan": "yes"})
    c.policy("plan-p", {"dq-plan": "yes"}, pods=PROFILE)
    monkeypatch.setenv("DYNQUOTA_EXCLUDE_NAMESPACES", ns)
    lines = run_plan(["--kubeconfig", c.cp.kubeconfig, "-n", ns], capsys)
    assert lines[0] == (
        "settings: no dynquota release found (no Deployment labelled "
        "app.kubernetes.io/part-of=dynquota,app.kubernetes.io/component=operator in any "
        "namespace): using the local environment (DYNQUOTA_*) instead; "
        "--release/--release-namespace to name one"
    )
    assert lines[1] == (
        f"settings: dryRun=false, own namespace (none), excludeNamespaces={ns}, "
        "includeNamespaces=(all), overrideTTL=168h"
    )
    assert lines[-1] == f"{ns} excluded: listed in excludeNamespaces"
    local = run_plan(["--kubeconfig", c.cp.kubeconfig, "--local", "-n", ns], capsys)
    assert local[0] == "settings: the local environment (--local, DYNQUOTA_*)"
    assert local[1:] == lines[1:]
