"""The API Priority and Fairness benchmark's second part (``test_apf_bench.py``): what a
tarpit does to kube-controller-manager, by where it sits.

While the churner (retrying 429s at once) keeps a 1-share ``Reject`` tarpit busy, a Deployment
of ``DYNQUOTA_APF_BENCH_REPLICAS`` (20) replicas is created in the churn namespace and one in
another tenant's. Per namespace: seconds until its ReplicaSet exists and until all its pods are
created, at most ``DYNQUOTA_APF_BENCH_KCM_DEADLINE`` (30) s; then the churner stops, the tarpit
is removed, and the seconds until every pod exists (``recovery``, at most 120 s) say how long
the controllers stay held back by the ``Retry-After`` they were given (client-go sleeps it, up to
10 times; APF doubles a level's ``Retry-After`` up to 32 s while it keeps rejecting).
"""

from __future__ import annotations

import functools
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
from apf_bed import (  # same directory
    AUTHENTICATED,
    CHURN_NS,
    OTHER_NS,
    PRECEDENCE,
    TARPIT,
    TIMEOUT,
    Bed,
    describe,
    load_average,
    tarpit_counts,
)

from dynquota.testing.apf import FlowCounts, tarpit_level, tarpit_schema
from dynquota.testing.apfload import run_churn
from dynquota.testing.growth import deployment
from dynquota.testing.wait import wait_until

REPLICAS = int(os.environ.get("DYNQUOTA_APF_BENCH_REPLICAS", "20"))
KCM_DEADLINE = float(os.environ.get("DYNQUOTA_APF_BENCH_KCM_DEADLINE", "30"))
RECOVERY_DEADLINE = 120.0
KCM_SUBJECTS = [
    {"kind": "User", "user": {"name": "system:kube-controller-manager"}},
    {"kind": "Group", "group": {"name": "system:serviceaccounts:kube-system"}},
]
KCM_SCHEMA = f"{TARPIT}-kcm"


@dataclass
class Progress:
    """One namespace's Deployment: seconds (since its create) until its ReplicaSet existed and
    until all its pods were created (None: not yet), and the pods created so far."""

    replica_set: float | None = None
    pods_done: float | None = None
    pods: int = 0

    def cell(self, value: float | None, pods: int | None = None) -> str:
        """``value`` in seconds, or the deadline passed (with ``pods`` created by then)."""
        if value is not None:
            return f"{value:.1f} s"
        return f"> {KCM_DEADLINE:.0f} s" + ("" if pods is None else f" ({pods} pods)")


def follow(bed: Bed, name: str, progress: dict[str, Progress], start: float, until: float) -> None:
    """Poll the Deployments ``name`` until all pods exist in every namespace of ``progress``
    or the monotonic ``until`` (a wait on a condition with a deadline)."""
    apps: Any = kubernetes.client.AppsV1Api(bed.api)
    core: Any = kubernetes.client.CoreV1Api(bed.api)
    selector = f"app={name}"
    while any(p.pods_done is None for p in progress.values()) and time.monotonic() < until:
        for ns, p in progress.items():
            elapsed = time.monotonic() - start
            if (
                p.replica_set is None
                and apps.list_namespaced_replica_set(
                    ns, label_selector=selector, _request_timeout=TIMEOUT
                ).items
            ):
                p.replica_set = elapsed
            pods = core.list_namespaced_pod(ns, label_selector=selector, _request_timeout=TIMEOUT)
            p.pods = len(pods.items)
            if p.pods_done is None and p.pods >= REPLICAS:
                p.pods_done = elapsed
        time.sleep(0.2)  # the sampling interval of a measurement, not a synchronisation


def writes_matched(
    bed: Bed, before: dict[tuple[str, str], FlowCounts], schema: str, count: int
) -> bool:
    """Whether ``schema`` has dispatched ``count`` requests since the reading ``before``."""
    return tarpit_counts(before, bed.flow_counts()).get(schema, FlowCounts()).dispatched >= count


def placements() -> list[tuple[str, list[dict[str, Any]]]]:
    """The rows: a label and the FlowSchemas sending requests to the tarpit."""
    churn = functools.partial(
        tarpit_schema, TARPIT, TARPIT, subjects=AUTHENTICATED, namespaces=[CHURN_NS]
    )
    return [
        ("no tarpit", []),
        (f"tarpit at {PRECEDENCE}, churn namespace (the design)", [churn(PRECEDENCE)]),
        ("tarpit at 850, churn namespace (under kube-system-service-accounts, 900)",
         [churn(850)]),
        (f"tarpit at {PRECEDENCE} + all of kube-controller-manager at 700",
         [churn(PRECEDENCE),
          tarpit_schema(KCM_SCHEMA, TARPIT, 700, KCM_SUBJECTS, ["*"], verbs=["*"],
                        cluster_scope=True)]),
    ]  # fmt: skip


def kcm_rows(bed: Bed, pool: ProcessPoolExecutor, workers: int) -> list[str]:
    """Per placement, Deployments created while ``workers`` churn into a 1-share ``Reject``
    tarpit; the table (markdown)."""
    lines = [
        f"| placement | ReplicaSet, churn ns | {REPLICAS} pods, churn ns | ReplicaSet, other ns "
        f"| {REPLICAS} pods, other ns | all pods after the tarpit is removed | churner writes/s "
        "| APF dispatched/rejected | load 1/5/15 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    kcm_token = bed.component_token("kube-controller-manager")
    for index, (label, schemas) in enumerate(placements()):
        if schemas:
            bed.apply([tarpit_level(TARPIT, 1, None), *schemas])
            bed.await_schema(CHURN_NS, TARPIT)
            if any(s["metadata"]["name"] == KCM_SCHEMA for s in schemas):
                bed.await_schema(OTHER_NS, KCM_SCHEMA, token=kcm_token)
        stop_file = Path(tempfile.mkdtemp()) / "stop"
        before = bed.flow_counts()
        churn = pool.submit(
            run_churn, bed.tenant, CHURN_NS, workers, KCM_DEADLINE + 60, False, time.time(),
            str(stop_file),
        )  # fmt: skip
        # the Deployments come once the churner writes (into the tarpit, if there is one)
        churn_schema = TARPIT if schemas else "service-accounts"
        wait_until(
            functools.partial(writes_matched, bed, before, churn_schema, 50),
            f"the churner's writes matched by {churn_schema}",
            timeout=60,
            interval=0.5,
        )
        name = f"web-{index}"
        apps: Any = kubernetes.client.AppsV1Api(bed.api)
        start = time.monotonic()
        progress = {ns: Progress() for ns in (CHURN_NS, OTHER_NS)}
        for ns in progress:
            apps.create_namespaced_deployment(
                ns, deployment(name, REPLICAS), _request_timeout=TIMEOUT
            )
        follow(bed, name, progress, start, start + KCM_DEADLINE)
        pods_then = {ns: p.pods for ns, p in progress.items()}
        stop_file.touch()
        result = churn.result(timeout=KCM_DEADLINE + 120)
        flows = tarpit_counts(before, bed.flow_counts())
        bed.delete("flowschema", TARPIT, KCM_SCHEMA)
        bed.delete("prioritylevelconfiguration", TARPIT)
        bed.await_schema(CHURN_NS, "service-accounts")
        released = time.monotonic()
        follow(bed, name, progress, start, released + RECOVERY_DEADLINE)
        done = [p.pods_done for p in progress.values()]
        recovery = (
            f"{max(0.0, start + max(d for d in done if d is not None) - released):.1f} s"
            if all(d is not None for d in done)
            else f"> {RECOVERY_DEADLINE:.0f} s"
        )
        shown = [TARPIT, KCM_SCHEMA, "kube-system-service-accounts", "kube-controller-manager"]
        in_churn, in_other = progress[CHURN_NS], progress[OTHER_NS]
        in_time = {ns: p.pods_done if p.pods_done and p.pods_done <= KCM_DEADLINE else None
                   for ns, p in progress.items()}  # fmt: skip
        lines.append(
            f"| {label} | {in_churn.cell(in_churn.replica_set)} | "
            f"{in_churn.cell(in_time[CHURN_NS], pods_then[CHURN_NS])} | "
            f"{in_other.cell(in_other.replica_set)} | "
            f"{in_other.cell(in_time[OTHER_NS], pods_then[OTHER_NS])} | {recovery} | "
            f"{result.write_rate:.0f} | "
            f"{describe(flows, [s for s in shown if s in flows])} | {load_average()} |"
        )
        for ns in progress:
            apps.delete_namespaced_deployment(name, ns, _request_timeout=TIMEOUT)
    return lines
