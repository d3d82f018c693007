"""What of a workload exists, as ``dynquota fit`` reads it: its own pods by the owner chain
(not other usage), a rollout's surge (a changed template under RollingUpdate), a StatefulSet's
replicas cut by the claims they still need; and the answer with them (issue 31's fixes)."""

from __future__ import annotations

from typing import Any

import yaml

from dynquota.cli.fit_manifest import read_manifest
from dynquota.cli.fit_model import Candidate, evaluate
from dynquota.cli.fit_text import fit_document, fit_text
from dynquota.cli.fit_workload import claim_runs, owned_pods, rollout_surge
from dynquota.policy.state import parse_time
from dynquota.testing.growth import deployment

NOW = parse_time("2026-12-01T09:50:00Z")


def _web() -> str:
    """Deployment web: 30 pods of 250m (the test bed's deployment, as YAML)."""
    body = {"apiVersion": "apps/v1", "kind": "Deployment", **deployment("web", 30)}
    body["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "250m"}}
    return str(yaml.safe_dump(body))


WEB = _web()


def meta(uid: str, owner: str | None = None, **more: Any) -> dict[str, Any]:
    refs = [{"uid": owner, "controller": True}] if owner else []
    return {"metadata": {"uid": uid, "ownerReferences": refs}, **more}


def running(owner: str, n: int, cpu: str = "250m") -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Pod", **meta(f"{owner}-p{i}", owner),
         "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
         "status": {"phase": "Running"}}
        for i in range(n)
    ]  # fmt: skip


def test_a_deployments_pods_are_found_through_its_replica_sets() -> None:
    live = {"kind": "Deployment", **meta("d1")}
    sets = [meta("rs-old", "d1"), meta("rs-new", "d1"), meta("rs-other", "d2")]
    pods = running("rs-old", 2) + running("rs-new", 1) + running("rs-other", 3) + running("d1", 1)
    assert [p["metadata"]["uid"] for p in owned_pods(live, pods, sets)] == [
        "rs-old-p0", "rs-old-p1", "rs-new-p0",
    ]  # fmt: skip
    job = {"kind": "Job", **meta("j1")}
    finished = running("j1", 3)
    finished[2]["status"]["phase"] = "Succeeded"  # stays: not replaced, still in count/pods
    assert len(owned_pods(job, finished + running("rs-new", 1))) == 2


def test_the_surge_is_asked_for_a_rollout_only() -> None:
    [web] = read_manifest(WEB, "web.yaml").workloads
    template = {**web.template, "spec": {**web.template["spec"], "dnsPolicy": "ClusterFirst"}}
    same = {"kind": "Deployment", "spec": {"template": template}}  # defaults added only
    assert rollout_surge(web, same, 30) == 0  # a scale: no new ReplicaSet
    changed = {"kind": "Deployment", "spec": {"template": {"spec": {"containers": []}}}}
    assert rollout_surge(web, changed, 30) == 8  # 25 % of 30, rounded up
    assert rollout_surge(web, None, 30) == 0  # a new Deployment rolls nothing
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 2}}
    assert (
        rollout_surge(web, {**changed, "spec": {**changed["spec"], "strategy": strategy}}, 30) == 2
    )
    recreate = {**changed, "spec": {**changed["spec"], "strategy": {"type": "Recreate"}}}
    assert rollout_surge(web, recreate, 30) == 0
    [job] = read_manifest(WEB.replace("Deployment", "Job"), "j.yaml").workloads
    assert rollout_surge(job, changed, 30) == 0


def test_a_statefulsets_replicas_are_cut_by_the_claims_they_still_need() -> None:
    text = WEB.replace("Deployment", "StatefulSet").replace("replicas: 30", "replicas: 5") + (
        "  volumeClaimTemplates:\n"
        "  - metadata: {name: data}\n    spec: {resources: {requests: {storage: 1Gi}}}\n"
        "  - metadata: {name: logs}\n    spec: {resources: {requests: {storage: 1Gi}}}\n"
    )
    [sts] = read_manifest(text, "s.yaml").workloads
    existing = {"data-web-0", "logs-web-0", "data-web-1", "logs-web-1", "logs-web-2", "x"}
    assert claim_runs(sts, existing) == [(0, 2, ()), (2, 1, (0,)), (3, 2, (0, 1))]
    [huge] = read_manifest(text, "s.yaml", replicas=10**8).workloads  # not one loop an ordinal
    existing |= {"data-web-9", "data-web-x", "data-web-", "data-web-100000000"}
    assert claim_runs(huge, existing) == [
        (0, 2, ()), (2, 1, (0,)), (3, 6, (0, 1)), (9, 1, (1,)), (10, 10**8 - 10, (0, 1)),
    ]  # fmt: skip
    [web] = read_manifest(WEB, "web.yaml").workloads
    assert claim_runs(web, existing) == [(0, 30, ())]


def quota(hard: dict[str, str], used: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "compute"}, "status": {"hard": hard, "used": used}}


def test_an_existing_deployments_own_pods_are_not_other_usage() -> None:
    """25 of its 30 pods run: all 30 fit (was: 0 fit now, 19 never), and a changed template
    asks for the surge too."""
    [web] = read_manifest(WEB, "web.yaml").workloads
    own = running("rs", 25)
    used = {"requests.cpu": "7250m"}  # its 25 x 250m and 4 other pods' 250m
    quotas = [quota({"requests.cpu": "9"}, used)]
    report = evaluate("team-a", [Candidate(web, web.pod, own=tuple(own))], quotas, None, NOW)
    [fit] = report.workloads
    assert (fit.fits_now, fit.never, fit.surge) == (30, 0, 0)  # 9 - 1 = 8 cores for 30 x 250m
    assert report.rows[0].used == "1"  # the others' 4 pods
    assert report.exit_code == 0
    rolling = Candidate(web, web.pod, own=tuple(own), surge=8)
    report = evaluate("team-a", [rolling], quotas, None, NOW)
    [fit] = report.workloads
    assert (fit.replicas, fit.surge, fit.fits_now, fit.never) == (30, 8, 32, 6)
    assert fit_text(report).splitlines()[3] == (
        "Deployment/web: 30 pods and 8 more while it rolls out (maxSurge), 32 fit now"
    )
    summary = fit_document(report)["summary"]
    assert summary == {"replicas": 30, "surge": 8, "fitsNow": 32, "fitsLater": 0, "never": 6,
                       "allFitAt": None}  # fmt: skip
    assert report.exit_code == 1
