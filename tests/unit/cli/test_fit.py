"""``dynquota fit``'s pure parts: the manifest's workloads, the answer from what was read
(every quota, the projection's schedule, a budget), its text and document, the exit code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dynquota.admission.limitranger import apply_limit_range_defaults
from dynquota.cli import main
from dynquota.cli.fit_manifest import ManifestError, read_manifest
from dynquota.cli.fit_model import Candidate, evaluate
from dynquota.cli.fit_text import FIT_API_VERSION, fit_document, fit_text
from dynquota.cli.parser import build_parser
from dynquota.policy.state import parse_time

NOW = parse_time("2026-12-01T09:50:00Z")

MANIFEST = """
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: team-a}
spec:
  replicas: 30
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: app, image: pause}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: batch}
spec:
  parallelism: 8
  completions: 3
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: pause, resources: {requests: {cpu: "1"}}}]
"""

MANAGED = {"app.kubernetes.io/managed-by": "dynquota"}


def quota(name: str, hard: dict[str, str], used: dict[str, str],
          labels: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    return {"metadata": {"name": name, "namespace": "team-a", "labels": labels or {}},
            "spec": {"hard": hard}, "status": {"hard": hard, "used": used}}  # fmt: skip


def applied(pods: dict[str, Any], budget: dict[str, Any] | None = None,
            state: str = "Enforced") -> dict[str, Any]:  # fmt: skip
    profile = {"minimum": "10", "maximum": "40", "bufferPercent": 40, "upscaleCooldown": "5m",
               "downscaleCooldown": "1h", **pods}  # fmt: skip
    policy = {"name": "p", "resources": {"pods": profile}}
    status: dict[str, Any] = {"state": state, "policy": policy}
    if budget is not None:
        status["budget"] = budget
    return {"status": status}


LIMIT_RANGE = {"spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "250m"},
                                    "default": {"cpu": "500m"}}]}}  # fmt: skip


def candidates(text: str = MANIFEST, replicas: int | None = None) -> list[Candidate]:
    manifest = read_manifest(text, "m.yaml", replicas)
    return [
        Candidate(w, apply_limit_range_defaults(w.pod, [LIMIT_RANGE])[0])
        for w in manifest.workloads
    ]


def test_the_manifest_gives_each_workloads_pod_and_count() -> None:
    manifest = read_manifest(MANIFEST, "m.yaml")
    assert [(w.title, w.namespace, w.replicas) for w in manifest.workloads] == [
        ("Deployment/web", "team-a", 30),
        ("Job/batch", "", 3),  # parallelism 8, at most its 3 completions
    ]
    assert manifest.skipped == ("ConfigMap/settings",)
    web = manifest.workloads[0].pod
    assert web["metadata"] == {"generateName": "web-fit-", "labels": {"app": "web"}}
    assert web["spec"]["containers"] == [{"name": "app", "image": "pause"}]
    assert [w.replicas for w in read_manifest(MANIFEST, "m", replicas=4).workloads] == [4, 4]


def test_a_list_and_bare_pods_are_read_and_defaults_are_one() -> None:
    text = """{"kind": "List", "items": [
        {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}},
        {"kind": "StatefulSet", "metadata": {"name": "db"},
         "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}]}"""
    manifest = read_manifest(text, "list.json")
    assert [(w.title, w.replicas) for w in manifest.workloads] == [
        ("Pod/p", 1),
        ("StatefulSet/db", 1),
    ]
    assert manifest.workloads[0].pod["metadata"] == {"generateName": "p-fit-"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [", "m: not valid YAML"),
        ("kind: ConfigMap\nmetadata: {name: x}",
         "m: no Deployment, ReplicaSet, StatefulSet, Job or Pod (only ConfigMap/x)"),
        ("- 1", "m: document 1 is not an object"),
        ("kind: Deployment\nmetadata: {name: w}\nspec: {}",
         "m: Deployment/w: spec.template.spec is missing"),
        ("kind: Deployment\nspec: {}", "m: document 1 (Deployment) has no metadata.name"),
        ("kind: Deployment\nmetadata: {name: w}\nspec: {replicas: -1, template: {spec: {}}}",
         "m: Deployment/w: spec.replicas must be a whole number >= 0, not -1"),
    ],
)  # fmt: skip
def test_a_manifest_that_cannot_be_read_says_where(text: str, message: str) -> None:
    with pytest.raises(ManifestError) as caught:
        read_manifest(text, "m")
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


DEPLOYMENT = "kind: Deployment\nmetadata: {name: w}\nspec: {template: {spec: %s}}"
STS = ("kind: StatefulSet\nmetadata: {name: db}\nspec: {template: {spec: {containers: []}}, "
       "volumeClaimTemplates: %s}")  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (DEPLOYMENT % "{containers: [{name: c, resources: {requests: {cpu: 1e3m}}}]}",
         "m: Deployment/w: spec.template.spec.containers[0].resources.requests.cpu: invalid "
         "quantity '1e3m': expected a signed decimal number with an optional suffix"),
        (DEPLOYMENT % "{initContainers: [{name: i, resources: {limits: {memory: [1]}}}]}",
         "m: Deployment/w: spec.template.spec.initContainers[0].resources.limits.memory: not a "
         "quantity: [1]"),
        (DEPLOYMENT % "{containers: [x]}",
         "m: Deployment/w: spec.template.spec.containers[0] must be an object, not 'x'"),
        (DEPLOYMENT % "{containers: {c: 1}}",
         "m: Deployment/w: spec.template.spec.containers must be a list, not {'c': 1}"),
        (DEPLOYMENT % "{containers: [{name: c, resources: 1}]}",
         "m: Deployment/w: spec.template.spec.containers[0].resources must be an object, not 1"),
        (DEPLOYMENT % "{overhead: {cpu: lots}}",
         "m: Deployment/w: spec.template.spec.overhead.cpu: invalid quantity 'lots'"),
        ("kind: Deployment\nmetadata: {name: w}\nspec: {template: [1]}",
         "m: Deployment/w: spec.template must be an object, not [1]"),
        ("kind: Deployment\nmetadata: {name: w}\nspec: {replicas: '3', template: {spec: {}}}",
         "m: Deployment/w: spec.replicas must be a whole number >= 0, not '3'"),
        ("kind: Deployment\nmetadata: [w]", "m: document 1: metadata must be an object, not ['w']"),
        ("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{resources: {requests: "
         "{memory: 1 Gi}}}]}",
         "m: Pod/p: spec.containers[0].resources.requests.memory: invalid quantity '1 Gi'"),
        (STS % "[{metadata: {name: data}, spec: {resources: {requests: {storage: 4GB}}}}]",
         "m: StatefulSet/db: spec.volumeClaimTemplates[0].spec.resources.requests.storage: "
         "invalid quantity '4GB'"),
        (STS % "[{spec: {}}]", "m: StatefulSet/db: spec.volumeClaimTemplates[0].metadata.name "
         "is missing"),
        (STS % "{data: 1}", "m: StatefulSet/db: spec.volumeClaimTemplates must be a list"),
        ("a: [x\n", "m: not valid YAML: line 2, column 1: expected ',' or ']', but got '<stream "
         "end>'"),
        # README-only attack: a traceback (a bad maxSurge of a Deployment that exists), or
        # silently accepted (a new one, an int32 overflow)
        ("kind: Deployment\nmetadata: {name: w}\nspec: {strategy: {rollingUpdate: {maxSurge: "
         "abc%}}, template: {spec: {}}}",
         "m: Deployment/w: spec.strategy.rollingUpdate.maxSurge must be a whole number >= 0 or "
         "a percentage like 25%, not 'abc%'"),
        ("kind: Deployment\nmetadata: {name: w}\nspec: {strategy: {rollingUpdate: "
         "{maxUnavailable: -1}}, template: {spec: {}}}",
         "m: Deployment/w: spec.strategy.rollingUpdate.maxUnavailable must be a whole number"),
        ("kind: Deployment\nmetadata: {name: w}\nspec: {replicas: 99999999999999999999, "
         "template: {spec: {}}}",
         "m: Deployment/w: spec.replicas must be at most 2147483647 (int32), not "
         "99999999999999999999"),
    ],
)  # fmt: skip
def test_a_malformed_pod_or_claim_is_one_line_naming_the_object_and_field(
    text: str, message: str
) -> None:
    test_a_manifest_that_cannot_be_read_says_where(text, message)


QUOTAS = [
    quota("dynquota", {"pods": "10", "configmaps": "50"}, {"pods": "2", "configmaps": "1"},
          MANAGED),
    quota("compute", {"requests.cpu": "8"}, {"requests.cpu": "500m"}),
    quota("besteffort", {"pods": "0"}, {"pods": "0"}),
]  # fmt: skip
QUOTAS[2]["spec"]["scopes"] = ["BestEffort"]


def test_the_answer_fills_now_then_each_raise_until_a_fixed_quota_holds() -> None:
    report = evaluate("team-a", candidates(), QUOTAS,
                      applied({"nextRaiseAfter": "2026-12-01T09:52:24Z"}), NOW)  # fmt: skip
    assert fit_text(report).splitlines() == [
        "namespace: team-a (as of 2026-12-01T09:50:00Z)",
        "WORKLOAD        QUOTA     KEY           HARD  USED  PER POD  FITS NOW  SIZED BY",
        "Deployment/web  compute   requests.cpu  8     500m  250m     30        -",
        "Deployment/web  dynquota  pods          10    2     1        8         dynquota",
        "Job/batch       compute   requests.cpu  8     500m  1        7         -",
        "Job/batch       dynquota  pods          10    2     1        8         dynquota",
        "Deployment/web: 30 pods, 8 fit now",
        "  4 more at 2026-12-01T09:52:24Z (raise dynquota pods to 14)",
        "  6 more at 2026-12-01T09:57:24Z (raise dynquota pods to 20)",
        "  8 more at 2026-12-01T10:02:24Z (raise dynquota pods to 28)",
        "  4 more at 2026-12-01T10:07:24Z (raise dynquota pods to 40)",
        "  all fit at 2026-12-01T10:07:24Z",
        "  the next pod now: pods is forbidden: exceeded quota: dynquota, requested: pods=1, "
        "used: pods=10, limited: pods=10",
        "Job/batch: 3 pods, 0 fit now",
        "  3 never fit under the current policy, held back by:",
        "    quota compute requests.cpu (hard 8, used 8, 1 a pod): not sized by dynquota; "
        "whoever owns that quota can raise it",
        "  the next pod now: pods is forbidden: exceeded quota: dynquota, requested: pods=1, "
        "used: pods=10, limited: pods=10",
        "note: quota besteffort does not apply to Deployment/web's pods (its scopes do not "
        "match them)",
        "note: quota besteffort does not apply to Job/batch's pods (its scopes do not match them)",
    ]
    assert report.exit_code == 1
    document = fit_document(report)
    assert document["apiVersion"] == FIT_API_VERSION == "fit.dynquota.io/v1"
    assert document["summary"] == {"replicas": 33, "surge": 0, "fitsNow": 8, "fitsLater": 22,
                                   "never": 3, "allFitAt": None}  # fmt: skip
    assert document["workloads"][1]["blockedBy"][0]["reason"] == "fixed"
    assert document["quotas"][1] == {
        "workload": "Deployment/web", "quota": "dynquota", "key": "pods", "hard": "10",
        "used": "2", "perPod": "1", "fitsNow": 8, "sizedBy": "dynquota",
    }  # fmt: skip
    assert document["schedule"][0] == {
        "at": "2026-12-01T09:52:24Z",
        "raises": [{"quota": "dynquota", "key": "pods", "hard": "14"}],
        "pods": {"Deployment/web": 4, "Job/batch": 0},
    }


def test_everything_fitting_now_exits_zero() -> None:
    report = evaluate("team-a", candidates(replicas=2), QUOTAS, None, NOW)
    assert [(w.fits_now, w.later, w.never, w.next_refusal) for w in report.workloads] == [
        (2, (), 0, None),
        (2, (), 0, None),
    ]
    assert report.exit_code == 0
    document = fit_document(report)
    assert document["summary"]["allFitAt"] == "2026-12-01T09:50:00Z"
    # every pod fits now: the workload's last pod fits at the time of the answer, not null
    assert [w["allFitAt"] for w in document["workloads"]] == ["2026-12-01T09:50:00Z"] * 2
    assert "all fit at" not in fit_text(report)  # said by "2 fit now"


def test_quantities_are_printed_canonically_in_the_keys_format() -> None:
    text = MANIFEST.replace('cpu: "1"', "cpu: 1e-1, memory: 1536e6")
    [_, job] = candidates(text)
    exponent = [quota("compute", {"requests.cpu": "2e3", "requests.memory": "1e12"},
                      {"requests.cpu": "1.5", "requests.memory": "0"})]  # fmt: skip
    report = evaluate("team-a", [job], exponent, None, NOW)
    assert fit_text(report).splitlines()[1:4] == [
        "QUOTA    KEY              HARD  USED   PER POD  FITS NOW  SIZED BY",
        "compute  requests.cpu     2k    1500m  100m     19985     -",
        "compute  requests.memory  1T    0      1536M    651       -",
    ]


def test_without_the_projection_dynquotas_quota_is_fixed() -> None:
    not_read = [("applieddynamicquotas/dynquota in team-a", "403: no")]
    report = evaluate("team-a", candidates()[:1], QUOTAS, None, NOW, not_read=not_read)
    [web] = report.workloads
    assert (web.fits_now, web.later, web.never) == (8, (), 22)
    assert [b.reason for b in web.blocked_by] == ["fixed"]
    assert "not read: applieddynamicquotas/dynquota in team-a: 403: no" in fit_text(report)


def budgeted(free: str) -> Any:
    """Deployment/web's answer under a budget of 60 pods, slice 10, ``free`` pods free."""
    budget = {"name": "team", "hard": {"pods": "60"}, "slice": {"pods": "10"},
              "free": {"pods": free}}  # fmt: skip
    status = applied({"nextRaiseAfter": "2026-12-01T09:40:00Z"}, budget)
    report = evaluate("team-a", candidates()[:1], QUOTAS, status, NOW)
    assert not [n for n in report.notes if "cannot be read" in n]
    return report.workloads[0]


def test_a_budgeted_key_grows_only_up_to_its_slice_and_the_free_room() -> None:
    web = budgeted("6")
    assert (web.fits_now, [(x.at, x.pods) for x in web.later], web.never) == (
        8, [("2026-12-01T09:50:00Z", 4), ("2026-12-01T09:55:00Z", 2)], 16,
    )  # fmt: skip
    [block] = web.blocked_by
    assert (block.reason, block.hard) == ("budget", "16")
    assert "QuotaBudget team" in block.message


def test_a_budget_over_its_hard_is_the_blocker_not_an_unsized_quota() -> None:
    web = budgeted("-2")
    assert (web.fits_now, web.later, web.never) == (8, (), 22)
    [block] = web.blocked_by
    assert (block.reason, block.hard, block.used) == ("over-budget", "10", "10")
    assert block.message == (
        "quota dynquota pods (hard 10, used 10, 1 a pod): QuotaBudget team is over budget (2 "
        "more granted than its hard): no member grows until some give room back; ask the "
        "platform team for a larger budget"
    )


def test_a_policy_not_enforced_does_not_grow_and_a_refused_pod_never_fits() -> None:
    dry = applied({}, state="DryRun")
    dry["status"]["message"] = "policy p is in dry run"
    report = evaluate("team-a", candidates()[:1], QUOTAS, dry, NOW)
    assert [b.reason for b in report.workloads[0].blocked_by] == ["not-growing"]
    assert report.notes[0] == "dynquota's state here is DryRun: policy p is in dry run"
    [workload] = read_manifest(MANIFEST, "m").workloads[:1]
    refused = Candidate(workload, workload.pod, "refused by the apiserver: violates PodSecurity")
    report = evaluate("team-a", [refused], QUOTAS, None, NOW)
    assert fit_text(report).splitlines()[4:6] == [
        "Deployment/web: 30 pods, 0 fit now",
        "  none is ever admitted: refused by the apiserver: violates PodSecurity",
    ]


def test_a_quota_demanding_what_the_pod_lacks_refuses_it_for_good() -> None:
    memory = [quota("mem", {"requests.memory": "1Gi"}, {"requests.memory": "0"})]
    report = evaluate("team-a", candidates()[:1], memory, None, NOW)
    assert report.workloads[0].refused == "failed quota: mem: must specify requests.memory for: app"
    assert report.workloads[0].fits_now == 0


def test_the_command_line() -> None:
    args = build_parser().parse_args(["fit", "-f", "-", "-n", "x", "-o", "json", "--replicas", "3"])
    assert (args.filename, args.namespace, args.output, args.replicas) == ("-", "x", "json", 3)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["fit", "-n", "x"])  # -f is required


def test_what_the_command_refuses_before_asking_the_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST)
    bad = tmp_path / "bad.yaml"
    bad.write_text(DEPLOYMENT % "{containers: [{name: c, resources: {requests: {cpu: 1e3m}}}]}")
    latin1 = tmp_path / "latin1.yaml"  # README-only attack: a traceback and exit 1
    latin1.write_bytes(b"apiVersion: v1\nkind: Pod\nmetadata: {name: caf\xe9}\n")
    cases = [
        (["fit", "-f", str(latin1)], f"reading {latin1}: not UTF-8 text (byte 0xe9 at offset 45)"),
        (["fit", "-f", str(tmp_path / "none.yaml")], "reading "),
        (["fit", "-f", str(manifest), "-n", "team-b"],
         "the manifest's namespace 'team-a' does not match -n 'team-b'"),
        (["fit", "-f", str(manifest), "--replicas", "-1"], "--replicas must be 0 or more, not -1"),
        (["fit", "-f", str(bad)], f"{bad}: Deployment/w: spec.template.spec.containers[0]."
         "resources.requests.cpu: invalid quantity '1e3m'"),
    ]  # fmt: skip
    for argv, message in cases:
        with pytest.raises(SystemExit) as caught:
            main(argv)
        assert caught.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"dynquota: error: {message}"), err
        assert len(err.splitlines()) == 1


STS = """
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 4
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: c, image: x, resources: {requests: {cpu: 100m}}}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {storageClassName: fast, resources: {requests: {storage: 4Gi}}}
  - metadata: {name: logs}
    spec: {resources: {requests: {storage: 1Gi}}}
"""

STORAGE = [
    quota("storage", {"persistentvolumeclaims": "10", "requests.storage": "12Gi",
                      "fast.storageclass.storage.k8s.io/persistentvolumeclaims": "10"},
          {"persistentvolumeclaims": "2", "requests.storage": "2Gi",
           "fast.storageclass.storage.k8s.io/persistentvolumeclaims": "1"}),
    quota("compute", {"requests.cpu": "8"}, {"requests.cpu": "0"}),
]  # fmt: skip


def test_a_statefulsets_replica_needs_its_claims_and_a_claim_key_blocks() -> None:
    [workload] = read_manifest(STS, "sts.yaml").workloads
    pod = dict(workload.pod, metadata={**workload.pod["metadata"], "namespace": "team-a"})
    report = evaluate("team-a", [Candidate(workload, pod)], STORAGE, None, NOW)
    assert fit_text(report).splitlines() == [
        "namespace: team-a (as of 2026-12-01T09:50:00Z)",
        "QUOTA    KEY                                                      HARD  USED  PER POD  "
        "FITS NOW  SIZED BY",
        "compute  requests.cpu                                             8     0     100m     "
        "80        -",
        "storage  fast.storageclass.storage.k8s.io/persistentvolumeclaims  10    1     1        "
        "9         -",
        "storage  persistentvolumeclaims                                   10    2     2        "
        "4         -",
        "storage  requests.storage                                         12Gi  2Gi   5Gi      "
        "2         -",
        "StatefulSet/db: 4 pods, 2 fit now",
        "  2 never fit under the current policy, held back by:",
        "    quota storage requests.storage (hard 12Gi, used 12Gi, 5Gi a pod): not sized by "
        "dynquota; whoever owns that quota can raise it",
        '  the next pod now: persistentvolumeclaims "data-db-2" is forbidden: exceeded quota: '
        "storage, requested: requests.storage=4Gi, used: requests.storage=12Gi, limited: "
        "requests.storage=12Gi",
    ]
    assert report.exit_code == 1


def test_claims_that_exist_for_an_ordinal_are_not_new_usage() -> None:
    [workload] = read_manifest(STS, "sts.yaml").workloads
    pod = dict(workload.pod, metadata={**workload.pod["metadata"], "namespace": "team-a"})
    existing = frozenset({"data-db-0", "logs-db-0", "data-db-1", "logs-db-1", "logs-db-2"})
    report = evaluate("team-a", [Candidate(workload, pod, existing_claims=existing)], STORAGE,
                      None, NOW)  # fmt: skip
    [db] = report.workloads
    # ordinals 0, 1: the pod only; 2: its data claim (4Gi); 3: both (5Gi): 2Gi + 9Gi <= 12Gi
    assert (db.fits_now, db.never, db.next_refusal) == (4, 0, None)
    assert report.exit_code == 0
    fuller = [quota("storage", {"requests.storage": "10Gi"}, {"requests.storage": "2Gi"})]
    report = evaluate("team-a", [Candidate(workload, pod, existing_claims=existing)], fuller,
                      None, NOW)  # fmt: skip
    [db] = report.workloads
    assert (db.fits_now, db.never) == (3, 1)  # 2Gi + 4Gi fits, + 5Gi does not
    # ordinal 3's data claim is still created (10Gi), its logs claim is refused
    assert db.next_refusal == (
        'persistentvolumeclaims "logs-db-3" is forbidden: exceeded quota: storage, requested: '
        "requests.storage=1Gi, used: requests.storage=10Gi, limited: requests.storage=10Gi"
    )
    assert [(b.quota, b.key, b.reason) for b in db.blocked_by] == [
        ("storage", "requests.storage", "fixed")
    ]


PARALLEL = STS.replace("replicas: 4", "replicas: 3\n  podManagementPolicy: Parallel")


def claims_growing(quotas: list[dict[str, Any]]) -> Any:
    """StatefulSet/db (Parallel, 3 replicas of a data and a logs claim) where dynquota sizes
    ``persistentvolumeclaims`` (5, 4 used; buffer 10 %, next raise at 09:52:24Z)."""
    [workload] = read_manifest(PARALLEL, "sts.yaml").workloads
    pod = dict(workload.pod, metadata={**workload.pod["metadata"], "namespace": "team-a"})
    profile = {"minimum": "1", "maximum": "100", "bufferPercent": 10, "upscaleCooldown": "5m",
               "downscaleCooldown": "1h", "nextRaiseAfter": "2026-12-01T09:52:24Z"}  # fmt: skip
    status = {"status": {"state": "Enforced", "policy": {
        "name": "p", "resources": {"persistentvolumeclaims": profile}}}}  # fmt: skip
    dynquota = quota("dynquota", {"persistentvolumeclaims": "5"},
                     {"persistentvolumeclaims": "4"}, MANAGED)  # fmt: skip
    return evaluate("team-a", [Candidate(workload, pod)], [dynquota, *quotas], status, NOW)


def test_a_claim_key_short_of_a_replicas_claims_grows_with_the_claim_that_fits() -> None:
    # room for 1 claim of the 2 a replica needs: data-db-0 is admitted (used 5), the policy's
    # target of 5 is 6, so the key grows: not "never grows" (T(4) = 5 is no raise)
    report = claims_growing([])
    [db] = report.workloads
    assert (db.fits_now, db.never) == (0, 0)
    assert [(x.at, x.pods) for x in db.later] == [
        ("2026-12-01T09:52:24Z", 1), ("2026-12-01T10:02:24Z", 1), ("2026-12-01T10:12:24Z", 1),
    ]  # fmt: skip
    assert db.blocked_by == ()
    assert db.next_refusal == (
        'persistentvolumeclaims "logs-db-0" is forbidden: exceeded quota: dynquota, requested: '
        "persistentvolumeclaims=1, used: persistentvolumeclaims=5, limited: "
        "persistentvolumeclaims=5"
    )


def test_the_blocker_of_a_replicas_claims_is_the_key_that_refuses_once_one_is_in() -> None:
    # requests.storage (not sized): 4Gi of room for data (4Gi) + logs (1Gi). data is admitted,
    # then logs is refused by both keys; persistentvolumeclaims grows, requests.storage never
    report = claims_growing([quota("storage", {"requests.storage": "10Gi"},
                                   {"requests.storage": "6Gi"})])  # fmt: skip
    [db] = report.workloads
    assert (db.fits_now, db.later, db.never) == (0, (), 3)
    assert [b.message for b in db.blocked_by] == [
        "quota storage requests.storage (hard 10Gi, used 10Gi, 5Gi a pod): not sized by "
        "dynquota; whoever owns that quota can raise it"
    ]


BIG_CLAIM = """
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 1
  template:
    spec:
      containers: [{name: c, image: x}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {resources: {requests: {storage: 200Gi}}}
"""


def test_a_claim_above_the_policy_maximum_asks_the_platform_team_not_for_the_override() -> None:
    # dynquota sizes requests.storage up to 100Gi: the override raises only to it, so a 200Gi
    # claim never fits; the answer is the maximum, never "request the override"
    [workload] = read_manifest(BIG_CLAIM, "sts.yaml").workloads
    pod = dict(workload.pod, metadata={**workload.pod["metadata"], "namespace": "team-a"})
    profile = {"minimum": "10Gi", "maximum": "100Gi", "bufferPercent": 40,
               "upscaleCooldown": "5m", "downscaleCooldown": "1h",
               "nextRaiseAfter": "2026-12-01T09:40:00Z"}  # fmt: skip
    status = {"status": {"state": "Enforced", "policy": {
        "name": "p", "resources": {"requests.storage": profile}}}}  # fmt: skip
    dynquota = quota("dynquota", {"requests.storage": "20Gi"}, {"requests.storage": "5Gi"},
                     MANAGED)  # fmt: skip
    report = evaluate("team-a", [Candidate(workload, pod)], [dynquota], status, NOW)
    [db] = report.workloads
    assert (db.fits_now, db.later, db.never) == (0, (), 1)
    assert [(b.reason, b.message) for b in db.blocked_by] == [(
        "maximum",
        "quota dynquota requests.storage (hard 20Gi, used 5Gi, 200Gi a pod): one pod or claim "
        "needs more than the policy maximum (100Gi) leaves, so it never fits, not even with the "
        "override; ask the platform team for a higher maximum",
    )]  # fmt: skip
    assert "request the override" not in fit_text(report)
    assert fit_document(report)["workloads"][0]["blockedBy"][0]["reason"] == "maximum"
