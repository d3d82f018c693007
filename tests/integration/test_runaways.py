"""The runaways dynquota exists for, reproduced with real components on a cluster with nodes.

1. A mutating admission that strips pod labels (a MutatingAdmissionPolicy, JSONPatch): the
   ReplicaSet controller never sees its pods and creates more without end.
2. A Spark-like driver asking for thousands of executor pods at once.
3. A Helm-like install of a chart with a hundred ConfigMaps, retried by a CD loop.

Each test asserts the exact throttled sequence of ``hard`` (one step per cooldown, each step
``T(H) = ceil(H * 1.4)``, up to the policy maximum), that the objects created never exceed
``hard``, and that growth stops at the maximum.
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from dynquota.policy import parse_time
from dynquota.testing.audit import AuditLog, AuditRecord
from dynquota.testing.operator import PAUSE, OperatorCluster, OperatorThread
from dynquota.testing.quotaaudit import QuotaLedger, refused_at
from dynquota.testing.wait import WaitTimeoutError, wait_until

StartOperator = Callable[..., OperatorThread]

# a step by the rule (usage, buffer) or, with usage above hard during the cooldown, the repair
# to usage at once (dynquota.policy.decide)
UPSCALE = re.compile(
    r"upscale (pods|configmaps) (\d+)->(\d+): usage (\d+)"
    r"(?:, buffer 40%| above hard \d+, raised to usage at once).*"
)


def profile(minimum: int, maximum: int, up: str) -> dict[str, Any]:
    return {
        "bufferPercent": 40,
        "minimum": minimum,
        "maximum": maximum,
        "upscaleCooldown": up,
        "downscaleCooldown": "1h",
    }


def upscales(c: OperatorCluster, ns: str, resource: str) -> list[tuple[int, int, int]]:
    """(from, to, usage) of every upscale of ``resource`` in ``ns``, in order (Resized Events)."""
    # creationTimestamp has whole seconds; the resourceVersion orders creates within one
    events = sorted(c.events(ns, "Resized"), key=lambda e: int(e.metadata.resource_version))
    steps = []
    for event in events:
        for part in (event.message or "").split("; "):
            match = UPSCALE.fullmatch(part)
            if match and match.group(1) == resource:
                steps.append((int(match.group(2)), int(match.group(3)), int(match.group(4))))
    return steps


class Ledger:
    """The audit log's account of one namespace's quota (:class:`QuotaLedger`), re-read on
    each use."""

    def __init__(self, c: OperatorCluster, ns: str, resource: str) -> None:
        self.ns, self.resource = ns, resource
        self.log = AuditLog(c.cp.audit_log_path)
        self.records: list[AuditRecord] = []

    def read(self) -> QuotaLedger:
        self.records += [r for r in self.log.read_new() if r.namespace == self.ns]
        return QuotaLedger(self.records, self.ns, self.resource)

    def uncounted(self) -> int:
        return self.read().uncounted()

    def erased(self) -> int:
        """Charges stale recounts erased so far, whether a later recount gave them back."""
        return sum(r.erased for r in self.read().stale_recounts())

    def assert_exact(self, count: int, hard: int) -> None:
        """The namespace holds exactly ``hard`` objects, plus those a stale quota-controller
        recount erased from ``status.used`` (kubernetes#123434), and admission never charged
        above ``hard``."""
        ledger = self.read()
        extra = ledger.uncounted()
        detail = f"stale recounts {ledger.stale_recounts()}\n{ledger.describe()}"
        assert ledger.over_hard() == [], detail
        assert count == hard + extra, detail
        assert count == ledger.admitted(), detail


def count_pods(c: OperatorCluster, ns: str) -> int:
    return len(c.core.list_namespaced_pod(ns).items)


def wait_enforced(c: OperatorCluster, ns: str, resource: str, value: int) -> None:
    """Wait until ``resource`` in spec.hard and status.hard (what admission enforces) is
    ``value``, whatever the other keys are. On timeout the message shows the quota, the pod
    count and the Resized Events."""

    def check() -> bool:
        quota = c.quota(ns)
        if quota is None:
            return False
        status = (quota.status and quota.status.hard) or {}
        return bool(
            (quota.spec.hard or {}).get(resource) == str(value)
            and status.get(resource) == str(value)
        )

    try:
        wait_until(check, f"{resource} hard of {ns} == {value}", timeout=40)
    except WaitTimeoutError as exc:
        quota = c.quota(ns)
        state = {
            "spec": quota and quota.spec.hard,
            "status": quota and quota.status and (quota.status.hard, quota.status.used),
            "pods": count_pods(c, ns),
            "resized": [e.message for e in c.events(ns, "Resized")],
        }
        raise WaitTimeoutError(f"{exc}; state: {state}") from exc


def decision_after(op: OperatorThread, instant: float) -> None:
    """Wait until ``instant`` (epoch seconds) has passed, then for one more completed decision
    (the periodic resync guarantees one)."""
    wait_until(lambda: time.time() >= instant, "the cooldown ends", timeout=30)
    decided = op.sample("dynquota_reconciles_total", {"result": "ok"})
    wait_until(
        lambda: op.sample("dynquota_reconciles_total", {"result": "ok"}) > decided,
        "a decision after the cooldown",
        timeout=30,
    )


def enforced(c: OperatorCluster, ns: str, resource: str) -> int | None:
    """``resource`` of spec.hard when status.hard (what admission enforces) agrees, else None."""
    quota = c.quota(ns)
    status = (quota and quota.status and quota.status.hard) or {}
    value = ((quota and quota.spec.hard) or {}).get(resource)
    return int(value) if value is not None and status.get(resource) == value else None


def wait_raised(c: OperatorCluster, ns: str, resource: str, above: int) -> int:
    """Wait until spec.hard and status.hard of ``resource`` agree on a value above ``above``
    (dynquota raised it, the quota controller published it); return that value."""

    def check() -> int | None:
        quota = c.quota(ns)
        status = (quota and quota.status and quota.status.hard) or {}
        spec = (quota and quota.spec.hard) or {}
        value = spec.get(resource)
        if value is None or status.get(resource) != value or int(value) <= above:
            return None
        return int(value)

    return wait_until(check, f"{resource} hard of {ns} above {above}", timeout=40)


def assert_throttled(
    steps: list[tuple[int, int, int]],
    start: int,
    maximum: int,
    rounds: list[tuple[int, int]],
    extra: int,
) -> None:
    """The upscales ``steps`` (from, to, usage) follow the rule from ``start`` to ``maximum``:
    each from the last, each to ``T(usage) = min(maximum, ceil(usage * 1.4))``, or, when a
    stale recount let usage above hard (``extra`` objects in all), a repair to that usage at
    once. ``rounds`` (hard refused at, objects then) were each refused at a hard of that
    chain, and an upscale from a hard a round filled saw exactly that round's objects. (An
    upscale can also come in the middle of a round, when the round outlasts the cooldown on a
    loaded machine: its usage is then at most its from, plus ``extra``.)"""
    chain = [start] + [to for _, to, _ in steps]
    assert [f for f, _, _ in steps] == chain[:-1], steps
    for f, to, usage in steps:
        rule = min(maximum, -(-usage * 14 // 10))
        assert to == rule or (extra and to == usage > f), steps
    assert maximum in chain, steps
    filled = dict(rounds)
    assert list(filled) == [h for h in chain if h in filled], (rounds, steps)
    assert list(filled)[-1] >= maximum, rounds
    for f, _, usage in steps:
        assert usage == filled[f] if f in filled else usage <= f + extra, (steps, rounds)


def unraced(
    steps: list[tuple[int, int, int]], rounds: list[tuple[int, int]], ledger: Ledger
) -> bool:
    """True when no recount raced a charge and every upscale came after a round filled the
    quota: then the steps must be the textbook sequence."""
    filled = {hard for hard, _ in rounds}
    return ledger.erased() == 0 and all(f in filled for f, _, _ in steps)


# -- 1. label-stripping admission ------------------------------------------------------------

STRIPPER = """
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: {name}
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["pods"]
  matchConditions:
  - name: has-labels
    expression: "has(object.metadata.labels) && size(object.metadata.labels) > 0"
  - name: owned-by-a-replicaset
    expression: >-
      has(object.metadata.ownerReferences) &&
      object.metadata.ownerReferences.exists(o, o.kind == 'ReplicaSet')
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{{op: "remove", path: "/metadata/labels"}}]'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: {name}
spec:
  policyName: {name}
  matchResources:
    namespaceSelector:
      matchLabels:
        {selector_key}: {selector_value}
"""


def deployment(name: str, replicas: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": PAUSE}]},
            },
        },
    }


def nudge_replicasets(c: OperatorCluster, ns: str) -> None:
    """Wake the ReplicaSet controller: after quota denials it retries with exponential backoff
    (up to ~16 min) and a quota change does not wake it; an update of the ReplicaSet does."""
    for rs in c.apps.list_namespaced_replica_set(ns).items:
        c.apps.patch_namespaced_replica_set(
            rs.metadata.name, ns, {"metadata": {"annotations": {"test/nudge": uuid.uuid4().hex}}}
        )


def wait_filled(c: OperatorCluster, ns: str, ledger: Ledger) -> tuple[int, int]:
    """Wait until the quota of ``ns`` is full: ``status.used == status.hard`` and the pods are
    that hard plus any a stale recount let in (see :class:`Ledger`); return (hard, pods).
    Nudges its ReplicaSets at most once a second meanwhile (quota admission may still have
    refused the first retry after a raise: its quota cache lags ``status.hard`` a little)."""
    nudged = [0.0]
    state: dict[str, int] = {}

    def check() -> bool:
        quota = c.quota(ns)
        status = quota and quota.status
        hard = int(((status and status.hard) or {}).get("pods", "-1"))
        used = int(((status and status.used) or {}).get("pods", "-1"))
        count = count_pods(c, ns)
        target = hard + ledger.uncounted()
        state.update(hard=hard, used=used, pods=count, target=target)
        if count < target and time.monotonic() - nudged[0] >= 1:
            nudge_replicasets(c, ns)
            nudged[0] = time.monotonic()
        return used == hard and count == target

    try:
        wait_until(check, f"the pods quota of {ns} full", timeout=90)  # a loaded 2-core machine
    except WaitTimeoutError as exc:
        raise WaitTimeoutError(f"{exc}; {state}\n{ledger.read().describe()}") from exc
    ledger.assert_exact(state["pods"], state["hard"])
    return state["hard"], state["pods"]


def wait_stripping(c: OperatorCluster, ns: str) -> None:
    """Wait until the apiserver applies the label-stripping policy in ``ns`` (its admission
    policies load from an informer): a dry-run create of a labelled pod owned by a ReplicaSet
    comes back without labels."""
    probe = {
        "metadata": {
            "name": "probe",
            "labels": {"app": "probe"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "probe",
                 "uid": str(uuid.uuid4()), "controller": True}
            ],
        },
        "spec": {"containers": [{"name": "c", "image": PAUSE}]},
    }  # fmt: skip
    wait_until(
        lambda: not c.core.create_namespaced_pod(ns, probe, dry_run="All").metadata.labels,
        f"the label-stripping policy in effect in {ns}",
    )


def test_label_stripping_admission_runaway_is_throttled_while_a_healthy_namespace_scales(
    node_cluster: OperatorCluster, node_scope: dict[str, str], start_node_operator: StartOperator
) -> None:
    c = node_cluster
    strip_label = ("dq-strip", uuid.uuid4().hex[:8])
    runaway = c.new_namespace({**node_scope, strip_label[0]: strip_label[1]})
    healthy = c.new_namespace(node_scope)
    name = f"strip-{strip_label[1]}"
    c.cp.kubectl(
        "apply",
        "-f",
        "-",
        input=STRIPPER.format(
            name=name, selector_key=strip_label[0], selector_value=strip_label[1]
        ),
    )
    try:
        c.policy(
            "p-strip",
            node_scope,
            pods=profile(10, 40, "6s"),
            configmaps=profile(20, 200, "6s"),
        )
        op = start_node_operator()
        ledger = Ledger(c, runaway, "pods")
        for ns in (runaway, healthy):
            wait_enforced(c, ns, "pods", 10)
        wait_stripping(c, runaway)
        c.apps.create_namespaced_deployment(runaway, deployment("web", 10))
        c.apps.create_namespaced_deployment(healthy, deployment("web", 10))

        # the runaway: every pod it makes loses its labels, so the ReplicaSet sees none of them
        rounds = []
        while True:
            hard, count = wait_filled(c, runaway, ledger)
            rounds.append((hard, count))
            if hard >= 40:
                break
            wait_raised(c, runaway, "pods", above=hard)
        pods = c.core.list_namespaced_pod(runaway).items
        assert all(not p.metadata.labels for p in pods)
        rs = c.apps.list_namespaced_replica_set(runaway).items[0]
        assert (rs.status.replicas or 0) == 0  # it never sees its own pods
        steps = upscales(c, runaway, "pods")
        assert_throttled(steps, 10, 40, rounds, ledger.erased())
        if unraced(steps, rounds, ledger):
            assert steps == [(10, 14, 10), (14, 20, 14), (20, 28, 20), (28, 40, 28)]
        # at the maximum: the ReplicaSet still tries, the quota refuses, hard stays
        last_upscale = parse_time(c.annotations(runaway)["dynquota.io/last-upscale.pods"])
        decision_after(op, last_upscale + 6)
        nudge_replicasets(c, runaway)
        wait_until(
            lambda: any(
                cond.type == "ReplicaFailure" and "exceeded quota" in (cond.message or "")
                for rs in c.apps.list_namespaced_replica_set(runaway).items
                for cond in rs.status.conditions or []
            ),
            "the ReplicaSet's create refused by the quota",
        )
        # (above 40 only if a recount race let more in: then hard is held at usage)
        final = rounds[-1][1]
        assert c.hard(runaway)["pods"] == str(max(40, final))  # type: ignore[index]
        # the quota is full at the hard it holds now
        ledger.assert_exact(count_pods(c, runaway), int(c.quota(runaway).status.hard["pods"]))

        # beside it, a healthy Deployment scales 10 -> 14 within the buffer, then hard follows
        c.apps.patch_namespaced_deployment_scale("web", healthy, {"spec": {"replicas": 14}})
        wait_until(
            lambda: (
                c.apps.read_namespaced_deployment("web", healthy).status.available_replicas == 14
            ),
            "14 available in the healthy namespace",
        )
        wait_enforced(c, healthy, "pods", 20)
        assert count_pods(c, healthy) == 14
        # never denied; hard followed the usage: 10 -> 14 (usage 10), then up in steps to
        # T(14) = 20 (the number of steps depends on how the scale-up's pods arrive)
        denied = [e.message for e in c.events(healthy) if "exceeded quota" in (e.message or "")]
        assert denied == []
        healthy_steps = upscales(c, healthy, "pods")
        assert healthy_steps[0] == (10, 14, 10)
        assert [a for a, _, _ in healthy_steps[1:]] == [b for _, b, _ in healthy_steps[:-1]]
        assert healthy_steps[-1][1:] == (20, 14)
    finally:
        c.cp.kubectl("delete", "mutatingadmissionpolicybinding,mutatingadmissionpolicy", name)


# -- 2. Spark-like executors ---------------------------------------------------------------


def test_spark_like_driver_asking_for_thousands_of_executors_is_throttled(
    node_cluster: OperatorCluster, node_scope: dict[str, str], start_node_operator: StartOperator
) -> None:
    """Each allocation round creates executors until the quota refuses one: the quota holds
    exactly ``hard`` pods then, plus any charge the quota controller's recount erased
    (kubernetes#123434, named from the audit log); dynquota steps ``hard`` by the rule, one
    step per cooldown, up to the maximum 60, and no further."""
    c = node_cluster
    ns = c.new_namespace(node_scope)
    c.policy("p-spark", node_scope, pods=profile(10, 60, "4s"), configmaps=profile(20, 200, "4s"))
    start_node_operator()
    ledger = Ledger(c, ns, "pods")
    app = f"spark-{uuid.uuid4().hex[:6]}"
    labels = {"spark-app-selector": app}
    wait_enforced(c, ns, "pods", 10)
    driver = c.core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": f"{app}-driver", "labels": {**labels, "spark-role": "driver"}},
            "spec": {"containers": [{"name": "spark-kubernetes-driver", "image": PAUSE}]},
        },
    )
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": driver.metadata.name,
        "uid": driver.metadata.uid,
        "controller": True,
    }
    requested, executors, rounds = 2000, 0, []
    wait_enforced(c, ns, "pods", 10)
    while True:
        # one allocation round: the driver creates executors until the quota refuses one
        refusal = ""
        while executors < requested:
            try:
                c.core.create_namespaced_pod(
                    ns,
                    {
                        "metadata": {
                            "name": f"{app}-exec-{executors + 1}",
                            "labels": {**labels, "spark-role": "executor"},
                            "ownerReferences": [owner],
                        },
                        "spec": {"containers": [{"name": "executor", "image": PAUSE}]},
                    },
                )
            except ApiException as exc:
                refusal = f"{exc.status} {exc.body}"
                break
            executors += 1
        # refused with the quota full at a hard dynquota set
        assert refusal.startswith("403 ")
        used, limited = refused_at(refusal) or (-1, -1)
        assert used == limited, refusal
        pods = executors + 1  # the driver counts too
        ledger.assert_exact(pods, limited)
        rounds.append((limited, pods))
        if limited >= 60:
            break
        wait_raised(c, ns, "pods", above=limited)
    steps = upscales(c, ns, "pods")
    assert_throttled(steps, 10, 60, rounds, ledger.erased())
    if unraced(steps, rounds, ledger):
        assert steps == [(10, 14, 10), (14, 20, 14), (20, 28, 20), (28, 40, 28), (40, 56, 40),
                         (56, 60, 56)]  # fmt: skip
    # the executors run on the simulated nodes; the rest of the 2,000 were never created
    wait_until(
        lambda: (
            sum(1 for p in c.core.list_namespaced_pod(ns).items if p.status.phase == "Running")
            == executors + 1
        ),
        f"{executors + 1} pods Running",
    )
    assert requested - executors == 2000 - 59 - (rounds[-1][1] - rounds[-1][0])


# -- 3. Helm-like ConfigMap flood ------------------------------------------------------------


def make_chart(root: Path, configmaps: int) -> Path:
    chart = root / "flood"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: flood\nversion: 0.1.0\n")
    (chart / "templates" / "configmaps.yaml").write_text(
        "{{- range $i := until " + str(configmaps) + " }}\n"
        "---\n"
        "apiVersion: v1\n"
        "kind: ConfigMap\n"
        "metadata:\n"
        "  name: {{ $.Release.Name }}-{{ $i }}\n"
        "data:\n"
        "  index: {{ $i | quote }}\n"
        "{{- end }}\n"
    )
    return chart


def test_helm_like_install_of_a_hundred_configmaps_is_throttled(
    node_cluster: OperatorCluster,
    node_scope: dict[str, str],
    start_node_operator: StartOperator,
    tmp_path: Path,
) -> None:
    c = node_cluster
    cp = c.cp
    assert cp.bin_dir is not None
    ns = c.new_namespace(node_scope)
    c.policy("p-helm", node_scope, pods=profile(10, 60, "5s"), configmaps=profile(20, 60, "5s"))
    start_node_operator()
    wait_enforced(c, ns, "configmaps", 20)
    wait_until(lambda: c.core.list_namespaced_config_map(ns).items, "kube-root-ca.crt")
    chart = make_chart(tmp_path, 100)

    def configmaps() -> int:
        return len(c.core.list_namespaced_config_map(ns).items)

    attempts, rounds = [], []
    ledger = Ledger(c, ns, "configmaps")
    wait_enforced(c, ns, "configmaps", 20)
    while True:
        # a CD loop retrying the release: each attempt creates what the quota admits
        done = subprocess.run(
            [str(cp.bin_dir / "helm"), "upgrade", "--install", "flood", str(chart),
             "--namespace", ns, "--kubeconfig", cp.kubeconfig],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        attempts.append(done.returncode)
        used, limited = refused_at(done.stderr) or (-1, -1)  # helm reports the first refusal
        assert used == limited, done.stderr
        count = configmaps()  # kube-root-ca.crt + the release's
        after = wait_until(lambda: enforced(c, ns, "configmaps"), "spec.hard == status.hard")
        if after == limited:
            # the attempt ended at the hard it was refused at: exactly hard (+ any recount race)
            ledger.assert_exact(count, limited)
            rounds.append((limited, count))
            if limited >= 60:
                break
            wait_raised(c, ns, "configmaps", above=limited)
        else:
            # helm creates a kind's objects in parallel: on a loaded machine the attempt
            # outlasted the cooldown and dynquota raised hard in the middle of it
            assert limited < after, (limited, after)
            assert count <= after + ledger.uncounted()
            assert ledger.read().over_hard() == []
    assert attempts == [1] * len(attempts)
    steps = upscales(c, ns, "configmaps")
    assert_throttled(steps, 20, 60, rounds, ledger.erased())
    if unraced(steps, rounds, ledger):
        assert steps == [(20, 28, 20), (28, 40, 28), (40, 56, 40), (56, 60, 56)]
    final = max(60, rounds[-1][1])  # held at usage if a recount race let more in
    wait_until(lambda: c.hard(ns) == {"pods": "10", "configmaps": str(final)}, f"hard {final}")
