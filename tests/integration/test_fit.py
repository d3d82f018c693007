"""Issue 31: ``dynquota fit`` on the real apiserver, as a tenant with only the built-in
``admin`` role in its namespace: a LimitRange default (the dry run's defaulted pod), two
quotas (dynquota's, sized by a policy mid-cooldown, and a fixed ``compute`` one), the
AppliedDynamicQuota for the schedule; the count it says fits now is what the apiserver then
admits. A ``view``-only tenant gets the same numbers, with the dry run named as not done; a
user without any role there gets one line and exit 2; a dry run the budget guard refuses (until
a slice is enforced) is said, and the pods are still counted."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from cli_run import run_cli  # same directory

from dynquota.names import APPLIED_PLURAL, BUDGET_LABEL, GROUP, VERSION
from dynquota.testing.growth import deployment
from dynquota.testing.operator import OperatorCluster
from dynquota.testing.rbac import bind_cluster_role
from dynquota.testing.wait import wait_until

PODS = {"bufferPercent": 40, "minimum": 10, "maximum": 40, "upscaleCooldown": "5m",
        "downscaleCooldown": "1h"}  # fmt: skip


def _applied(op_cluster: OperatorCluster, ns: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = op_cluster.custom.get_namespaced_custom_object(
            GROUP, VERSION, ns, APPLIED_PLURAL, "dynquota"
        )
    except kubernetes.client.exceptions.ApiException:
        return None
    pods = (((obj.get("status") or {}).get("policy") or {}).get("resources") or {}).get("pods")
    return obj if pods and "nextRaiseAfter" in pods else None


def test_a_namespace_admin_learns_what_fits_now_and_when_the_rest_does(
    op_cluster: OperatorCluster,
    scope: dict[str, str],
    start_operator: Any,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    tag = uuid.uuid4().hex[:6]
    op_cluster.policy(f"fit-{tag}", scope, pods=PODS)
    ns = op_cluster.new_namespace(scope)
    alice, bob = f"alice-{tag}", f"bob-{tag}"
    bind_cluster_role(op_cluster.api, ns, alice, "admin")
    bind_cluster_role(op_cluster.api, ns, bob, "view")
    op_cluster.core.create_namespaced_limit_range(ns, {
        "metadata": {"name": "defaults"},
        "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "250m"},
                             "default": {"cpu": "500m"}}]},
    })  # fmt: skip
    op_cluster.core.create_namespaced_resource_quota(
        ns, {"metadata": {"name": "compute"}, "spec": {"hard": {"requests.cpu": "4"}}}
    )
    op = start_operator()
    try:
        applied = wait_until(lambda: _applied(op_cluster, ns), "the projection", timeout=90)
        assert applied is not None
        op_cluster.wait_hard(ns, {"pods": "10", "configmaps": "50"})

        def counted() -> bool:
            status = op_cluster.quota(ns, "compute").status
            return status is not None and "requests.cpu" in (status.used or {})

        wait_until(counted, "compute's status.used")
        next_raise = applied["status"]["policy"]["resources"]["pods"]["nextRaiseAfter"]
        manifest = tmp_path / "web.yaml"
        manifest.write_text(
            yaml.safe_dump({"apiVersion": "apps/v1", "kind": "Deployment", **deployment("web", 12)})
        )
        who = ["--kubeconfig", op_cluster.cp.kubeconfig, "--as", alice]

        code, out, err = run_cli(["fit", "-f", str(manifest), "-n", ns, "-o", "json", *who],
                                 capsys)  # fmt: skip
        assert (code, err) == (1, "")
        document = json.loads(out)
        assert document["summary"] == {"replicas": 12, "surge": 0, "fitsNow": 10,
                                       "fitsLater": 2, "never": 0,
                                       "allFitAt": next_raise}  # fmt: skip
        [web] = document["workloads"]
        assert web["later"] == [{"at": next_raise, "pods": 2}]
        assert web["nextRefusal"].endswith(
            "exceeded quota: dynquota, requested: pods=1, used: pods=10, limited: pods=10"
        )
        # the LimitRange's default request is what the dry run's pod is charged
        assert [(r["quota"], r["key"], r["hard"], r["used"], r["perPod"], r["fitsNow"],
                 r["sizedBy"]) for r in document["quotas"]] == [
            ("compute", "requests.cpu", "4", "0", "250m", 16, None),
            ("dynquota", "pods", "10", "0", "1", 10, "dynquota"),
        ]  # fmt: skip
        assert document["schedule"] == [
            {"at": next_raise, "raises": [{"quota": "dynquota", "key": "pods", "hard": "14"}],
             "pods": {"Deployment/web": 2}},
        ]  # fmt: skip
        assert document["notRead"] == []
        # the dry run stored and charged nothing
        assert op_cluster.core.list_namespaced_pod(ns).items == []
        assert op_cluster.quota(ns).status.used["pods"] == "0"

        # a view-only tenant may not create even a dry-run pod: named, same numbers
        code, out, err = run_cli(["fit", "-f", str(manifest), "-n", ns, "--replicas", "20",
                                  "--kubeconfig", op_cluster.cp.kubeconfig, "--as", bob],
                                 capsys)  # fmt: skip
        assert (code, err) == (1, "")
        lines = out.splitlines()
        assert lines[1:4] == [
            "QUOTA     KEY           HARD  USED  PER POD  FITS NOW  SIZED BY",
            "compute   requests.cpu  4     0     250m     16        -",
            "dynquota  pods          10    0     1        10        dynquota",
        ]
        assert lines[4:7] == [
            "Deployment/web: 20 pods, 10 fit now",
            f"  4 more at {next_raise} (raise dynquota pods to 14)",
            f"  2 more at {_plus(next_raise, 300)} (raise dynquota pods to 20)",
        ]
        assert "  4 never fit under the current policy, held back by:" in lines
        assert (
            "    quota compute requests.cpu (hard 4, used 4, 250m a pod): not sized by "
            "dynquota; whoever owns that quota can raise it"
        ) in lines
        [dry] = [line for line in lines if line.startswith("not read: a dry-run create")]
        assert "403" in dry
        assert "LimitRange defaults applied here" in dry

        # no role in the namespace at all: nothing to answer with, one line and exit 2
        code, out, err = run_cli(["fit", "-f", str(manifest), "-n", ns, "--kubeconfig",
                                  op_cluster.cp.kubeconfig, "--as", f"carol-{tag}"],
                                 capsys)  # fmt: skip
        assert (code, out) == (2, "")
        assert len(err.splitlines()) == 1, err
        assert "insufficient RBAC permissions (403)" in err

        # what the apiserver admits now is what fit said: 10 pods, then refusals
        op_cluster.apps.create_namespaced_deployment(ns, deployment("web", 12))

        def refused_at_ten() -> bool:
            pods = op_cluster.core.list_namespaced_pod(ns).items
            replica_sets = op_cluster.apps.list_namespaced_replica_set(ns).items
            failures = [
                c
                for rs in replica_sets
                for c in (rs.status.conditions or [])
                if c.type == "ReplicaFailure" and c.status == "True"
            ]
            return len(pods) == 10 and bool(failures)

        wait_until(refused_at_ten, "10 pods and a refused create", timeout=60)
        assert len(op_cluster.core.list_namespaced_pod(ns).items) == 10
        assert op_cluster.quota(ns).spec.hard["pods"] == "10"  # the raise waits for 5m

        # the budget guard refuses creates until a slice is enforced and marked (seconds; here
        # for good: no operator marks it): not a reason the pods never fit
        op.stop()
        op_cluster.core.patch_namespace(
            ns, {"metadata": {"labels": {BUDGET_LABEL: f"nobody-{tag}"}}}
        )
        code, out, err = run_cli(["fit", "-f", str(manifest), "-n", ns, "-o", "json", *who],
                                 capsys)  # fmt: skip
        assert (code, err) == (1, "")
        document = json.loads(out)
        assert document["workloads"][0]["refused"] is None
        # web's 10 running pods are its own, not other usage: they are 10 of the 12 that fit
        assert (document["summary"]["fitsNow"], document["summary"]["fitsLater"]) == (10, 2)
        [note] = [n for n in document["notes"] if "budget guard" in n]
        assert note.startswith(
            "the dry run of Deployment/web's pod was refused by dynquota's budget guard (pods"
        ), note
        assert f"is labelled dynquota.io/budget=nobody-{tag}" in note, note
    finally:
        op.stop()


def _plus(rfc3339: str, seconds: int) -> str:
    from dynquota.policy.state import format_time, parse_time

    return format_time(parse_time(rfc3339) + seconds)


def test_the_limit_range_port_defaults_as_the_apiserver_does(op_cluster: OperatorCluster) -> None:
    """``apply_limit_range_defaults`` (used when the dry run cannot show the defaulted pod)
    against the apiserver's own dry run: containers, init containers, a limit without request."""
    from dynquota.admission.limitranger import apply_limit_range_defaults

    ns = op_cluster.new_namespace()
    try:
        limit_range = {
            "metadata": {"name": "defaults"},
            "spec": {"limits": [{"type": "Container",
                                 "defaultRequest": {"cpu": "100m", "memory": "64Mi"},
                                 "default": {"cpu": "500m", "memory": "128Mi"}}]},
        }  # fmt: skip
        op_cluster.core.create_namespaced_limit_range(ns, limit_range)
        stored = op_cluster.core.read_namespaced_limit_range("defaults", ns)
        stored_json = op_cluster.api.sanitize_for_serialization(stored)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": "lr-"},
            "spec": {
                "initContainers": [{"name": "init", "image": "pause"}],
                "containers": [
                    {"name": "app", "image": "pause"},
                    {"name": "capped", "image": "pause",
                     "resources": {"limits": {"cpu": "2"}}},
                ],
            },
        }  # fmt: skip
        answer = op_cluster.core.create_namespaced_pod(ns, pod, dry_run="All")
        served = op_cluster.api.sanitize_for_serialization(answer)
        local, _ = apply_limit_range_defaults(pod, [stored_json])

        def resources(p: dict[str, Any]) -> list[Any]:
            spec = p["spec"]
            found = []
            for c in [*spec.get("initContainers", []), *spec["containers"]]:
                given = c.get("resources") or {}
                found.append({part: {k: str(v) for k, v in sorted(given.get(part, {}).items())}
                              for part in ("requests", "limits")})  # fmt: skip
            return found

        assert resources(local) == resources(served)
        assert resources(served)[2] == {
            "requests": {"cpu": "2", "memory": "64Mi"},
            "limits": {"cpu": "2", "memory": "128Mi"},
        }
    finally:
        op_cluster.delete_namespace(ns)


LIMITS = {
    "metadata": {"name": "limits"},
    "spec": {"limits": [
        {"type": "Container", "max": {"cpu": "1"}, "min": {"memory": "16Mi"},
         "maxLimitRequestRatio": {"memory": "2"},
         "defaultRequest": {"memory": "32Mi"}, "default": {"memory": "64Mi"}},
        {"type": "Pod", "max": {"cpu": "1500m"}},
    ]},
}  # fmt: skip


def _pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"image": "pause", **c} for c in containers]}
    if init:
        spec["initContainers"] = [{"image": "pause", **c} for c in init]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "lr-"}, "spec": spec}


def _dry_run_refusal(op_cluster: OperatorCluster, ns: str, pod: dict[str, Any]) -> str | None:
    """The apiserver's message refusing a dry-run create of ``pod`` (a 403), or ``None``."""
    try:
        op_cluster.core.create_namespaced_pod(ns, pod, dry_run="All")
    except kubernetes.client.exceptions.ApiException as exc:
        if exc.status != 403:
            raise
        return str(json.loads(exc.body or "{}")["message"])
    return None


def _judged(op_cluster: OperatorCluster, limit_range: dict[str, Any],
            pods: list[dict[str, Any]]) -> list[tuple[str, str] | None]:  # fmt: skip
    """``limit_range_refusal`` of each pod (defaulted here) in a namespace holding only
    ``limit_range`` (as the apiserver stores it: its defaulting fills ``default`` from ``max``),
    each asserted equal to what the apiserver's dry run (as admin) answers."""
    from dynquota.admission.limitranger import apply_limit_range_defaults, limit_range_refusal

    ns = op_cluster.new_namespace()
    try:
        name = limit_range["metadata"]["name"]
        op_cluster.core.create_namespaced_limit_range(ns, limit_range)
        stored = op_cluster.api.sanitize_for_serialization(
            op_cluster.core.read_namespaced_limit_range(name, ns)
        )
        local = []
        for pod in pods:
            defaulted, _ = apply_limit_range_defaults(pod, [stored])
            local.append(limit_range_refusal(defaulted, [stored]))
            served = _dry_run_refusal(op_cluster, ns, pod)
            said = local[-1]
            assert (said is None) == (served is None), (pod, served, said)
            if served is not None and said is not None:
                assert served.endswith(f" is forbidden: {said[1]}"), (served, said)
        return local
    finally:
        op_cluster.delete_namespace(ns)


def test_the_limit_range_checks_refuse_as_the_apiserver_does(op_cluster: OperatorCluster) -> None:
    """The min/max/ratio port (``limit_range_refusal``, what ``fit`` answers without a dry run)
    against the apiserver's own refusals: Container and Pod items, a sidecar in the Pod's sum,
    several violations in one aggregate, a Pod item's missing request and limit."""
    cpu = {"requests": {"cpu": "600m"}, "limits": {"cpu": "600m"}}
    ratio = {"requests": {"memory": "16Mi"}, "limits": {"memory": "64Mi"}}
    small = {"cpu": "100m"}  # the Pod max (1500m) is not what these say
    four = {"requests": {"memory": "16Mi", **small}, "limits": {"memory": "64Mi", **small}}
    three = {"requests": {"memory": "16Mi", **small}, "limits": {"memory": "48Mi", **small}}
    pods = [
        _pod({"name": "big", "resources": {"limits": {"cpu": "2"}}}),  # Container and Pod max
        _pod({"name": "tiny", "resources": {"requests": {"memory": "8Mi"}}}),  # min
        _pod({"name": "ratio", "resources": ratio}),
        _pod(  # the Pod max: a sidecar adds to the containers' sum
            {"name": "a", "resources": cpu},
            {"name": "b", "resources": cpu},
            init=({"name": "side", "resources": cpu, "restartPolicy": "Always"},),
        ),
        _pod({"name": "fine", "resources": cpu}),
        # containers at the same ratio: one text (the apiserver's aggregate gives each once)
        _pod({"name": "x", "resources": four}, {"name": "y", "resources": four}),
        _pod(
            {"name": "x", "resources": four},
            {"name": "y", "resources": three},
            {"name": "z", "resources": four},
        ),
    ]
    assert _judged(op_cluster, LIMITS, pods) == [
        (
            "limits",
            "[maximum cpu usage per Container is 1, but limit is 2, maximum cpu usage "
            "per Pod is 1500m, but limit is 2]",
        ),
        (  # the default limit 64Mi makes a ratio of 8 too
            "limits",
            "[minimum memory usage per Container is 16Mi, but request is 8Mi, memory max limit "
            "to request ratio per Container is 2, but provided ratio is 8.000000]",
        ),
        (
            "limits",
            "memory max limit to request ratio per Container is 2, but provided ratio is 4.000000",
        ),
        ("limits", "maximum cpu usage per Pod is 1500m, but limit is 1800m"),
        None,
        (
            "limits",
            "memory max limit to request ratio per Container is 2, but provided ratio is 4.000000",
        ),
        (
            "limits",
            "[memory max limit to request ratio per Container is 2, but provided ratio is "
            "4.000000, memory max limit to request ratio per Container is 2, but provided ratio "
            "is 3.000000]",
        ),
    ]
    storage = {
        "metadata": {"name": "storage"},
        "spec": {"limits": [{"type": "Pod", "min": {"ephemeral-storage": "1Gi"},
                             "max": {"ephemeral-storage": "3Gi"}}]},
    }  # fmt: skip
    tmp = {"requests": {"ephemeral-storage": "2Gi"}, "limits": {"ephemeral-storage": "2Gi"}}
    plain, sized = _pod({"name": "c"}), _pod({"name": "c", "resources": tmp})
    assert _judged(op_cluster, storage, [plain, sized]) == [
        ("storage", "[minimum ephemeral-storage usage per Pod is 1Gi.  No request is specified, "
                    "maximum ephemeral-storage usage per Pod is 3Gi.  No limit is specified]"),
        None,
    ]  # fmt: skip


def test_a_view_only_tenant_is_told_the_limit_range_refuses_its_pods(
    op_cluster: OperatorCluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A tenant with only ``view`` may not dry-run a create: ``fit`` checks the LimitRanges
    here and says which one refuses the Deployment's pods (exit 1), not that they fit."""
    ns = op_cluster.new_namespace()
    try:
        op_cluster.core.create_namespaced_limit_range(ns, LIMITS)
        bob = f"bob-{uuid.uuid4().hex[:6]}"
        bind_cluster_role(op_cluster.api, ns, bob, "view")
        manifest = tmp_path / "big.yaml"
        big = {"apiVersion": "apps/v1", "kind": "Deployment", **deployment("big", 3)}
        big["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "2"}}
        manifest.write_text(yaml.safe_dump(big))
        code, out, err = run_cli(["fit", "-f", str(manifest), "-n", ns, "-o", "json",
                                  "--kubeconfig", op_cluster.cp.kubeconfig, "--as", bob],
                                 capsys)  # fmt: skip
        assert (code, err) == (1, "")
        document = json.loads(out)
        [workload] = document["workloads"]
        assert (workload["fitsNow"], workload["never"], workload["refused"]) == (
            0, 3, "refused by LimitRange limits (checked here): [maximum cpu usage per Container "
            "is 1, but limit is 2, maximum cpu usage per Pod is 1500m, but limit is 2]",
        )  # fmt: skip
        [dry] = document["notRead"]
        assert dry["what"] == "a dry-run create of Deployment/big's pod"
    finally:
        op_cluster.delete_namespace(ns)
