"""``kubectl dynquota fit`` against what the apiserver then does (issue 31).

``make bench-fit``: a control plane with kube-scheduler and kwok nodes, the operator with the
chart's RBAC and the wake on (issue 26: a raise re-queues the controllers the quota refused),
and ``DYNQUOTA_FIT_BENCH_SCENARIOS`` (50) generated scenarios (``fit_scenarios.py``: mixed
quotas, LimitRange defaults, scopes, budgets, the policy mid-cooldown), ``_PARALLEL`` (6) at a
time, each in namespaces of its own; nothing else creates in a scenario's namespace while it
runs. Per scenario: ``fit`` (the CLI's own code, as a tenant with ``admin`` in the namespace),
then the workload, then the apiserver's audit log says what happened:

- **fits now**: the pods admitted before the managed quota's next ``spec.hard`` change must
  equal ``fit``'s ``fitsNow`` — in every scenario;
- **when**: the time the last admitted pod was created against the time ``fit`` gave for
  the last pods that fit (``later[-1].at``), within one upscale cooldown of the raise that
  admits them — in at least 95 % of the scenarios with pods that fit only later;
- the total admitted against ``fitsNow + fitsLater`` (reported).

A scenario whose quota had less than ``MARGIN`` seconds of its first cooldown left when
``fit`` answered, or whose set-up did not settle within 90 s (a slow set-up), is reported and
left out: its first raise could come while the pods that fit now are still being created.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from figures import report  # same directory
from fit_scenarios import PRIORITY_CLASS, Scenario, generate  # same directory

from dynquota.cli.fit import fit_report
from dynquota.cli.fit_manifest import read_manifest
from dynquota.cli.fit_model import growths
from dynquota.cli.fit_text import fit_document
from dynquota.cli.parser import build_parser
from dynquota.names import APPLIED_PLURAL, BUDGET_LABEL, BUDGET_PLURAL, GROUP, VERSION
from dynquota.policy.state import BUDGET as BUDGET_MARK
from dynquota.policy.state import parse_time
from dynquota.policy.units import unit_for
from dynquota.quantity import parse_quantity
from dynquota.testing.audit import AuditLog, AuditRecord
from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.operator import (
    OperatorCluster,
    OperatorThread,
    install_operator,
    operator_settings,
)
from dynquota.testing.quotaaudit import lowered_used
from dynquota.testing.rbac import bind_cluster_role
from dynquota.testing.wait import WaitTimeoutError, wait_until

pytestmark = [pytest.mark.bench, pytest.mark.timeout(3 * 3600)]

SCENARIOS = int(os.environ.get("DYNQUOTA_FIT_BENCH_SCENARIOS", "50"))
PARALLEL = int(os.environ.get("DYNQUOTA_FIT_BENCH_PARALLEL", "6"))
SEED = int(os.environ.get("DYNQUOTA_FIT_BENCH_SEED", "31"))
ONLY = [int(i) for i in os.environ.get("DYNQUOTA_FIT_BENCH_ONLY", "").split(",") if i]
"""Run only these scenario indices (to look at one again; default: all)."""
MARGIN = 5.0
"""Seconds of the first cooldown that must be left when ``fit`` has answered."""

FIT_AUDIT_POLICY: dict[str, object] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {  # every write of a quota itself (not its status), with the object written
            "level": "RequestResponse",
            "resources": [{"group": "", "resources": ["resourcequotas"]}],
            "verbs": ["create", "update", "patch"],
        },
        {  # every charge of quota admission and every recount of the quota controller
            "level": "RequestResponse",
            "resources": [{"group": "", "resources": ["resourcequotas/status"]}],
            "verbs": ["update", "patch"],
        },
        {
            "level": "Metadata",
            "resources": [{"group": "", "resources": ["pods"]}],
            "verbs": ["create"],
        },
        {"level": "None"},
    ],
}


class AuditIndex:
    """The audit log's records by namespace, read incrementally under a lock."""

    def __init__(self, path: Path) -> None:
        self._log = AuditLog(path)
        self._lock = threading.Lock()
        self._by_ns: dict[str, list[AuditRecord]] = {}

    def records(self, ns: str) -> list[AuditRecord]:
        with self._lock:
            for record in self._log.read_new():
                self._by_ns.setdefault(record.namespace, []).append(record)
            return list(self._by_ns.get(ns, []))


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OperatorCluster, AuditIndex]]:
    with LocalControlPlane(
        resource_quota_sync_period=10, nodes=3, audit=True, audit_policy=FIT_AUDIT_POLICY
    ) as cp:
        kubeconfig = install_operator(cp, tmp_path_factory.mktemp("fit"))
        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(
            config_file=cp.kubeconfig, client_configuration=configuration
        )
        configuration.connection_pool_maxsize = 32
        api = kubernetes.client.ApiClient(configuration)
        c = OperatorCluster(cp, api, kubeconfig)
        kubernetes.client.SchedulingV1Api(api).create_priority_class(
            {"metadata": {"name": PRIORITY_CLASS}, "value": 1000}
        )
        op = OperatorThread(operator_settings(c)).start()
        try:
            yield c, AuditIndex(cp.audit_log_path)
        finally:
            op.stop()
            api.close()


@dataclass
class Outcome:
    """One scenario: what ``fit`` said and what the apiserver did (times: seconds after
    ``fit`` answered)."""

    scenario: Scenario
    skipped: str = ""
    fits_now: int = 0
    later: int = 0
    never: int = 0
    predicted_end: float | None = None
    cooldown: int = 0
    before_change: int = 0
    admitted: int = 0
    observed_end: float | None = None
    blocked_by: list[str] = field(default_factory=list)
    race: list[str] = field(default_factory=list)
    timeline: str = ""

    @property
    def now_ok(self) -> bool:
        return self.before_change == self.fits_now

    @property
    def explained(self) -> bool:
        """A count that differs where the quota controller lowered ``status.used`` while the
        pods were created (kubernetes#123434: admission then admits past ``hard``)."""
        return not self.now_ok and bool(self.race)

    @property
    def time_ok(self) -> bool | None:
        """Within one cooldown (``None``: no pod fits only later)."""
        if not self.later:
            return None
        if self.observed_end is None or self.predicted_end is None:
            return False
        return abs(self.observed_end - self.predicted_end) <= self.cooldown


def _projection(c: OperatorCluster, ns: str, keys: list[str], budget: str | None) -> Any:
    """The AppliedDynamicQuota once it shows every key's next raise (and, in a budget, a
    slice and the budget's current free room), else ``None``."""
    try:
        obj = c.custom.get_namespaced_custom_object(GROUP, VERSION, ns, APPLIED_PLURAL, "dynquota")
    except kubernetes.client.exceptions.ApiException:
        return None
    status = obj.get("status") or {}
    resources = (status.get("policy") or {}).get("resources") or {}
    raises = [resources.get(k, {}).get("nextRaiseAfter") for k in keys]
    if status.get("state") != "Enforced" or not all(raises):
        return None
    if any(parse_time(r) <= time.time() for r in raises):
        return None  # a key sized from unknown usage: its cooldown counted as run out
    if budget is not None:
        stored = c.custom.get_cluster_custom_object(GROUP, VERSION, BUDGET_PLURAL, budget)
        shown = status.get("budget") or {}
        free = (stored.get("status") or {}).get("free")
        if not shown.get("slice") or not free or shown.get("free") != free:
            return None
    return obj


def _settled(
    c: OperatorCluster, ns: str, s: Scenario, applied: dict[str, Any], budget: str | None
) -> bool:
    """Every quota of the namespace is counted, the managed quota enforces its ``spec.hard``
    (``status.hard`` equal) and carries its budget's mark (the budget guard refuses creates
    until both hold), and no key of it is due a raise (the policy target of its usage is
    within its hard)."""
    quotas = c.core.list_namespaced_resource_quota(ns).items
    if len(quotas) != len(s.quotas) + 1:
        return False
    for q in quotas:
        status = q.status
        if status is None or not set(q.spec.hard or {}) <= set(status.used or {}):
            return False
        if q.metadata.name != "dynquota":
            continue
        if not _same(dict(status.hard or {}), dict(q.spec.hard or {})):
            return False
        marks = q.metadata.annotations or {}
        if budget is not None and marks.get(BUDGET_MARK) != budget:
            return False
        for key, growth in growths(applied["status"], []).items():
            unit = unit_for(key)
            used = unit.parse(status.used.get(key, "0"))
            if growth.want(used) > unit.parse(status.hard[key]):
                return False
    return True


def _create(c: OperatorCluster, ns: str, body: dict[str, Any]) -> None:
    if body["kind"] == "Job":
        c.batch.create_namespaced_job(ns, body)
    elif body["kind"] == "StatefulSet":
        c.apps.create_namespaced_stateful_set(ns, body)
    else:
        c.apps.create_namespaced_deployment(ns, body)


def _same(hard: dict[str, str], other: dict[str, str]) -> bool:
    return set(hard) == set(other) and all(
        parse_quantity(hard[k]) == parse_quantity(other[k]) for k in hard
    )


def _admitted(records: list[AuditRecord], after: float) -> list[float]:
    """When each pod create after ``after`` was admitted (a dry run is not), in order."""
    return sorted(
        r.completed
        for r in records
        if r.resource == "pods" and r.verb == "create" and r.code == 201
        and "dryRun" not in r.uri and r.completed > after
    )  # fmt: skip


def _next_change(records: list[AuditRecord], hard: dict[str, str], after: float) -> float:
    """When the managed quota's ``spec.hard`` was first written other than ``hard`` after
    ``after`` (infinity: never)."""
    return min(
        (
            r.completed
            for r in records
            if r.resource == "resourcequotas" and r.name == "dynquota"
            and r.code in (200, 201) and r.completed > after
            and not r.subresource and not _same(_hard(r), hard)
        ),
        default=float("inf"),
    )  # fmt: skip


def _hard(r: AuditRecord) -> dict[str, str]:
    """``spec.hard`` of the quota a write answered."""
    return dict(((r.response or {}).get("spec") or {}).get("hard") or {})


def _timeline(records: list[AuditRecord], document: dict[str, Any], fit_at: float) -> str:
    """The raises fit gave and the ``spec.hard`` writes that came (seconds after ``fit``)."""
    said = [
        f"{parse_time(x['at']) - fit_at:.0f}:"
        + ",".join(f"{r['key']}={r['hard']}" for r in x["raises"])
        + f"(+{sum(x['pods'].values())})"
        for x in document["schedule"]
    ]
    came = [
        f"{r.completed - fit_at:.1f}:" + ",".join(f"{k}={v}" for k, v in sorted(_hard(r).items()))
        for r in records
        if r.resource == "resourcequotas" and r.name == "dynquota" and not r.subresource
        and r.code in (200, 201) and r.completed > fit_at
    ]  # fmt: skip
    return f"fit: {' '.join(said)} | spec.hard: {' '.join(came)}"


def run_scenario(c: OperatorCluster, audit: AuditIndex, s: Scenario) -> Outcome:
    tag = f"fb{s.index}-{uuid.uuid4().hex[:5]}"
    label = {"dq-fit-bench": tag}
    ns = c.new_namespace(label)
    budget = None
    tenant = f"tenant-{tag}"
    bind_cluster_role(c.api, ns, tenant, "admin")
    try:
        if (limit_range := s.limit_range()) is not None:
            c.core.create_namespaced_limit_range(ns, limit_range)
        for pod in s.other_pods():
            c.core.create_namespaced_pod(ns, pod)
        for body in s.quotas:
            c.core.create_namespaced_resource_quota(ns, body)
        if s.budget is not None:  # its only member: its free room is the rest of the budget
            budget = c.budget(f"b-{tag}", {"pods": s.budget})
            c.core.patch_namespace(ns, {"metadata": {"labels": {BUDGET_LABEL: budget}}})
        c.policy(f"p-{tag}", label, **s.policy_resources())
        keys = list(s.policy_resources())
        try:
            applied = wait_until(lambda: _projection(c, ns, keys, budget), "the projection", 90)
            wait_until(lambda: _settled(c, ns, s, applied, budget), "the namespace settled", 90)
            applied = wait_until(lambda: _projection(c, ns, keys, budget), "the projection", 90)
        except WaitTimeoutError as exc:
            return Outcome(s, skipped=f"set-up: {exc}")
        resources = applied["status"]["policy"]["resources"]
        first = min(parse_time(resources[k]["nextRaiseAfter"]) for k in keys)
        args = build_parser().parse_args(
            ["fit", "-f", "-", "-n", ns, "--kubeconfig", c.cp.kubeconfig, "--as", tenant]
        )
        manifest = read_manifest(yaml.safe_dump(s.workload()), "bench")
        hard0 = dict(c.quota(ns).spec.hard)
        document = fit_document(asyncio.run(fit_report(args, ns, manifest)))
        fit_at = time.time()
        if first - fit_at < MARGIN:
            return Outcome(s, skipped=f"{first - fit_at:.1f} s of the cooldown left")
        _create(c, ns, s.workload())
        [w] = document["workloads"]
        blocked = [f"{b['quota']}/{b['key']}:{b['reason']}" for b in w["blockedBy"]]
        out = Outcome(s, fits_now=w["fitsNow"], never=w["never"], blocked_by=blocked)
        out.later = sum(x["pods"] for x in w["later"])
        out.cooldown = s.cooldown
        if w["later"]:
            end = w["later"][-1]["at"]
            out.predicted_end = parse_time(end) - fit_at
            [step] = [x for x in document["schedule"] if x["at"] == end]
            cooldowns = {"pods": s.cooldown}
            if s.cpu is not None:
                cooldowns["requests.cpu"] = int(s.cpu["upscaleCooldown"].rstrip("s"))
            out.cooldown = max(cooldowns.get(r["key"], s.cooldown) for r in step["raises"])
        expected = out.fits_now + out.later
        window = max(out.predicted_end or 0.0, 0.0) + out.cooldown + 20
        while time.time() - fit_at < window:  # a measurement window, sampled
            ours = c.core.list_namespaced_pod(ns, label_selector="app=web").items  # not others
            if expected == s.replicas and len(ours) >= expected:
                break
            time.sleep(0.5)
        records = audit.records(ns)
        creates = _admitted(records, fit_at)
        change = _next_change(records, hard0, fit_at)
        charged = ["pods", "count/pods", "requests.cpu", "cpu"]
        for name in ["dynquota", *(q["metadata"]["name"] for q in s.quotas)]:
            out.race += [f"{name}:{x.key} {x.before}->{x.written} at {x.received - fit_at:.1f}"
                         for x in lowered_used(records, ns, charged, name, fit_at)]  # fmt: skip
        out.timeline = _timeline(records, document, fit_at)
        out.before_change = sum(1 for t in creates if t < change)
        out.admitted = len(creates)
        out.observed_end = creates[-1] - fit_at if creates else None
        return out
    finally:
        c.delete_policy(f"p-{tag}")
        c.delete_namespace(ns)
        if budget is not None:
            c.delete_budget(budget)


def test_fit_agrees_with_the_apiserver(bench: tuple[OperatorCluster, AuditIndex]) -> None:
    c, audit = bench
    scenarios = [generate(i, SEED) for i in (ONLY or range(SCENARIOS))]
    started = time.monotonic()

    def run(s: Scenario) -> Outcome:
        try:
            return run_scenario(c, audit, s)
        except Exception as exc:  # reported, counted against the 90 % that must run
            return Outcome(s, skipped=f"error: {type(exc).__name__}: {str(exc)[:300]}")

    with ThreadPoolExecutor(PARALLEL) as pool:
        outcomes = list(pool.map(run, scenarios))
    lines = []
    for o in outcomes:
        s = o.scenario
        if o.skipped:
            lines.append(f"#{s.index:<3} skipped: {o.skipped}")
            continue
        end = "-" if o.predicted_end is None else f"{o.predicted_end:.0f}"
        seen = "-" if o.observed_end is None else f"{o.observed_end:.0f}"
        lines.append(
            f"#{s.index:<3} {s.replicas:>3} pods  now {o.fits_now:>3}/{o.before_change:<3} "
            f"{'ok' if o.now_ok else 'DIFF'}  total {o.fits_now + o.later:>3}/{o.admitted:<3} "
            f"end {end:>4}/{seen:<4} s {'' if o.time_ok is None else 'ok' if o.time_ok else 'LATE'}"
            f"  [{' '.join(s.features)}] {' '.join(o.blocked_by)}"
        )
        if o.race:
            lines.append(f"      quota controller lowered status.used: {'; '.join(o.race)}")
        if not o.now_ok or o.time_ok is False:
            lines.append(f"      {o.timeline}")
    ran = [o for o in outcomes if not o.skipped]
    timed = [o for o in ran if o.time_ok is not None]
    now_ok = sum(o.now_ok for o in ran)
    explained = sum(o.explained for o in ran)
    time_ok = sum(bool(o.time_ok) for o in timed)
    total_ok = sum(o.fits_now + o.later == o.admitted for o in ran)
    lines.append(
        f"seed {SEED}: {len(ran)} of {len(outcomes)} scenarios ran in "
        f"{time.monotonic() - started:.0f} s; fits now agreed in {now_ok}/{len(ran)} (of the "
        f"others, {explained} where the quota controller lowered status.used meanwhile); the "
        f"rest within one cooldown in {time_ok}/{len(timed)} "
        f"({100 * time_ok / max(1, len(timed)):.0f} %); totals agreed in {total_ok}/{len(ran)}"
    )
    late = sorted(
        o.observed_end - o.predicted_end
        for o in timed
        if o.observed_end is not None and o.predicted_end is not None
    )
    if late:
        lines.append(
            f"the last pod admitted minus the time fit gave: min {late[0]:.1f} s, median "
            f"{late[len(late) // 2]:.1f} s, max {late[-1]:.1f} s"
        )
    report("fit against the apiserver (predicted/observed)", lines)
    assert len(ran) >= 0.9 * len(outcomes)  # a set-up too slow for the cooldown is rare
    assert now_ok + explained == len(ran)  # kubernetes#123434 admits past hard: not fit's
    assert time_ok >= 0.95 * len(timed)
