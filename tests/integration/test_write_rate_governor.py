"""The write-rate governor (issue 32) on the real apiserver: a namespace churning ConfigMaps over
its policy's ``writeRate`` is listed in the chart's tarpit FlowSchema and taken out after its
quiet period; the kill switch, dry run, a namespace deleted while held, an operator restarted
while one is held and a reset of the rules mid-incident.

The operator runs as the chart's ServiceAccount under the chart's RBAC and
``<fullname>-operator-writes`` policy rendered with ``writeRate.enabled=true`` (it may change
only the namespace lists of ``dynquota-tarpit``). The churn is written as cluster admin
(``system:masters``, exempt from APF), so the churner's pace does not depend on the tarpit and
the times below are the governor's own.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import pytest

from dynquota.policy.churn import tarpitted
from dynquota.testing.chart import helm_template, render_rbac
from dynquota.testing.operator import OPERATOR_NS, OperatorCluster, OperatorThread
from dynquota.testing.wait import wait_until

pytestmark = pytest.mark.integration

StartOperator = Callable[..., OperatorThread]
SCHEMA = "dynquota-tarpit"  # release `dynquota`: <fullname>-tarpit
TEMPLATES = (
    "templates/serviceaccount.yaml",
    "templates/clusterrole.yaml",
    "templates/operator-policy.yaml",
    "templates/write-rate-tarpit.yaml",
)
LIMIT, WINDOW, QUIET = 20, 10, 10  # writes, seconds, seconds
GOVERNED = {"tarpit_flow_schema": SCHEMA, "resync_seconds": 5}
TIMEOUT = 10  # seconds, every API call


@pytest.fixture(scope="module")
def tarpit(op_cluster: OperatorCluster) -> Iterator[Any]:
    """The chart's tarpit objects and the operator's rights on them on ``op_cluster``; after
    the module the objects go and the RBAC is the other tests' again. Yields the admin's
    FlowcontrolApiserverV1Api."""
    cp = op_cluster.cp
    sets = ["leaderElection.enabled=true", "writeRate.enabled=true"]
    cp.kubectl("apply", "-f", "-", input=helm_template(cp, OPERATOR_NS, TEMPLATES, sets))
    flow: Any = kubernetes.client.FlowcontrolApiserverV1Api(op_cluster.api)
    try:
        yield flow
    finally:
        for name in (SCHEMA, f"{SCHEMA}-bypass"):
            flow.delete_flow_schema(name, _request_timeout=TIMEOUT)
        flow.delete_priority_level_configuration(SCHEMA, _request_timeout=TIMEOUT)
        cp.kubectl("apply", "-f", "-", input=render_rbac(cp, OPERATOR_NS))


@pytest.fixture(autouse=True)
def no_rules(tarpit: Any) -> None:
    """Each test starts with the FlowSchema at rest (an earlier test's operator may have been
    stopped while it held a namespace)."""
    tarpit.patch_flow_schema(SCHEMA, {"spec": {"rules": None}}, _request_timeout=TIMEOUT)


def patches(op: OperatorThread) -> float:
    """The FlowSchema patches ``op`` sent (any answer)."""
    assert op.runtime is not None
    return sum(
        sample.value
        for family in op.runtime.metrics.registry.collect()
        if family.name == "dynquota_api_requests"
        for sample in family.samples
        if sample.name.endswith("_total")
        and sample.labels.get("verb") == "patch"
        and sample.labels.get("resource") == "flowschemas"
    )


def rules(flow: Any) -> list[dict[str, Any]]:
    """The tarpit FlowSchema's ``spec.rules`` as stored (JSON)."""
    obj = flow.api_client.sanitize_for_serialization(
        flow.read_flow_schema(SCHEMA, _request_timeout=TIMEOUT)
    )
    return list(obj["spec"].get("rules") or [])


def tenant_view(c: OperatorCluster, ns: str) -> dict[str, Any]:
    """``status.writeRate`` of the namespace's AppliedDynamicQuota (``{}``: none yet)."""
    try:
        obj = c.custom.get_namespaced_custom_object(
            "dynquota.io", "v1alpha1", ns, "applieddynamicquotas", "dynquota",
            _request_timeout=TIMEOUT,
        )  # fmt: skip
    except kubernetes.client.exceptions.ApiException as exc:
        if exc.status == 404:
            return {}
        raise
    return dict((obj.get("status") or {}).get("writeRate") or {})


def listed(flow: Any) -> set[str]:
    return tarpitted(rules(flow))


def governed_namespace(
    c: OperatorCluster, scope: dict[str, str], dry_run: bool = False, quiet: str = f"{QUIET}s",
    policy: str = "",
) -> str:  # fmt: skip
    """A namespace under a policy (``policy``, default a random name) with ``writeRate``
    (limit 20 in 10 s, quiet period 10 s)."""
    ns = c.new_namespace(scope)
    write_rate = {"limit": LIMIT, "window": f"{WINDOW}s", "quietPeriod": quiet}
    c.policy(policy or f"p-{uuid.uuid4().hex[:6]}", scope, dry_run=dry_run,
             extra_spec={"writeRate": write_rate})  # fmt: skip
    return ns


def edit_policy(c: OperatorCluster, name: str, spec: dict[str, Any]) -> float:
    """Merge-patch the policy's ``spec``; returns the monotonic time of the patch."""
    c.custom.patch_cluster_custom_object("dynquota.io", "v1alpha1", "dynamicquotapolicies",
                                         name, {"spec": spec})  # fmt: skip
    return time.monotonic()


def churn(c: OperatorCluster, ns: str, objects: int = 20) -> None:
    """Create and delete ``objects`` ConfigMaps in ``ns`` (2 x ``objects`` writes)."""
    names = [f"churn-{uuid.uuid4().hex[:8]}" for _ in range(objects)]
    for name in names:
        c.core.create_namespaced_config_map(ns, {"metadata": {"name": name}},
                                            _request_timeout=TIMEOUT)  # fmt: skip
    for name in names:
        c.core.delete_namespaced_config_map(name, ns, _request_timeout=TIMEOUT)


def engaged(c: OperatorCluster, flow: Any, ns: str) -> float:
    """Churn in ``ns`` and wait until the tarpit lists it; returns seconds from the churn's
    start to the listing."""
    start = time.monotonic()
    churn(c, ns)
    wait_until(lambda: ns in listed(flow), f"{ns} listed in {SCHEMA}", timeout=30)
    return time.monotonic() - start


def test_engage_then_release_after_the_quiet_period(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator,
    tarpit: Any,
) -> None:  # fmt: skip
    c, flow = op_cluster, tarpit
    ns = governed_namespace(c, scope)
    op = start_operator(**GOVERNED)
    seconds = engaged(c, flow, ns)
    print(f"\nmeasured: listed {seconds:.1f} s after the churn started")
    assert rules(flow) == [
        {
            "subjects": [{"kind": "Group", "group": {"name": "system:authenticated"}}],
            "resourceRules": [
                {
                    "verbs": ["create", "update", "patch", "delete", "deletecollection"],
                    "apiGroups": ["*"],
                    "resources": ["pods", "configmaps"],
                    "namespaces": [ns],
                }
            ],
        }
    ]
    event = c.wait_event(ns, "Tarpitted", contains=f"writes in {WINDOW} s (limit {LIMIT})")
    assert event.type == "Warning"
    assert event.involved_object.kind == "ResourceQuota"
    assert event.involved_object.name == "dynquota"
    assert op.sample("dynquota_tarpitted", {"namespace": ns, "enforcement": "enforced"}) == 1
    assert patches(op) == 1
    # the tenant's own view says so (kubectl dynquota status)
    seen = wait_until(lambda: tenant_view(c, ns).get("tarpitted") and tenant_view(c, ns),
                      "the tenant projection shows the tarpit", timeout=15)  # fmt: skip
    assert seen["limit"] == LIMIT
    assert seen["reason"].startswith("tarpit: ")
    assert f"(limit {LIMIT})" in seen["reason"]
    stopped = time.monotonic()
    wait_until(lambda: not listed(flow), f"{ns} released", timeout=WINDOW + QUIET + 20)
    released = time.monotonic() - stopped
    print(f"measured: released {released:.1f} s after the churn stopped")
    assert released >= QUIET
    event = c.wait_event(ns, "Released", contains=f"(quietPeriod {QUIET} s)")
    assert event.type == "Normal"
    assert op.sample("dynquota_tarpitted", {"namespace": ns, "enforcement": "enforced"}) == 0
    assert patches(op) == 2  # in and out: no other write
    wait_until(lambda: tenant_view(c, ns).get("tarpitted") is False, "the projection released")


def test_kill_switch_releases_every_namespace(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator,
    tarpit: Any,
) -> None:  # fmt: skip
    c, flow = op_cluster, tarpit
    ns = governed_namespace(c, scope)
    start_operator(**GOVERNED)
    engaged(c, flow, ns)
    c.kill_switch("true")
    wait_until(lambda: not listed(flow), "every namespace released by the kill switch")
    c.wait_event(ns, "Released", contains="the kill switch is engaged")
    churn(c, ns)  # nothing is put in while it is engaged
    version = flow.read_flow_schema(SCHEMA, _request_timeout=TIMEOUT).metadata.resource_version
    assert not listed(flow)
    c.kill_switch(None)
    # released again: the churn (40 writes) is still in the window, so it is caught again
    wait_until(lambda: ns in listed(flow), f"{ns} listed again after the release")
    assert flow.read_flow_schema(SCHEMA).metadata.resource_version != version


def test_dry_run_reports_and_never_writes(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator,
    tarpit: Any,
) -> None:  # fmt: skip
    c, flow = op_cluster, tarpit
    ns = governed_namespace(c, scope, dry_run=True)
    op = start_operator(**GOVERNED)
    churn(c, ns)
    event = c.wait_event(ns, "Tarpitted", contains="dry run, not enforced: tarpit:")
    assert event.type == "Warning"
    assert op.sample("dynquota_tarpitted", {"namespace": ns, "enforcement": "dry-run"}) == 1
    assert rules(flow) == []
    c.wait_event(ns, "Released", contains="dry run, not enforced", timeout=WINDOW + QUIET + 20)
    assert op.sample("dynquota_tarpitted", {"namespace": ns, "enforcement": "dry-run"}) == 0
    assert (patches(op), rules(flow)) == (0, [])


def test_a_namespace_deleted_while_held_is_taken_out(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator,
    tarpit: Any,
) -> None:  # fmt: skip
    c, flow = op_cluster, tarpit
    ns, other = governed_namespace(c, scope), c.new_namespace(scope)
    start_operator(**GOVERNED)
    churn(c, other)
    engaged(c, flow, ns)
    wait_until(lambda: listed(flow) == {ns, other}, "both listed")
    c.delete_namespace(ns)
    wait_until(lambda: listed(flow) == {other}, f"{ns} taken out once deleted", timeout=30)


def test_a_restarted_operator_keeps_it_held_for_a_quiet_period_from_its_start(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator,
    tarpit: Any,
) -> None:  # fmt: skip
    c, flow = op_cluster, tarpit
    ns = governed_namespace(c, scope)
    first = start_operator(**GOVERNED)
    engaged(c, flow, ns)
    first.stop()
    assert listed(flow) == {ns}
    restarted = time.monotonic()
    start_operator(**GOVERNED)
    wait_until(lambda: not listed(flow), f"{ns} released", timeout=QUIET + 30)
    held = time.monotonic() - restarted
    print(f"\nmeasured: released {held:.1f} s after the restart (quiet period {QUIET} s)")
    assert held >= QUIET
    c.wait_event(ns, "Released", contains=f"(quietPeriod {QUIET} s)")


def test_rules_reset_mid_incident_are_written_again(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator,
    tarpit: Any,
) -> None:  # fmt: skip
    """``helm upgrade --force`` replaces the FlowSchema with the chart's (no rules): the
    operator lists the held namespace again within its re-read interval."""
    c, flow = op_cluster, tarpit
    ns = governed_namespace(c, scope, quiet="1h")
    start_operator(**GOVERNED)
    engaged(c, flow, ns)
    chart_schema = helm_template(c.cp, OPERATOR_NS, ["templates/write-rate-tarpit.yaml"],
                                 ["writeRate.enabled=true"])  # fmt: skip
    c.cp.kubectl("replace", "-f", "-", input=chart_schema)
    assert listed(flow) == set()
    reset = time.monotonic()
    wait_until(lambda: listed(flow) == {ns}, f"{ns} listed again", timeout=30)
    print(f"\nmeasured: re-asserted {time.monotonic() - reset:.1f} s after the reset")
    assert len(c.events(ns, "Tarpitted")) == 1


def test_a_larger_limit_releases_at_once_and_the_tenant_view_follows(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator,
    tarpit: Any,
) -> None:  # fmt: skip
    """docs/runbook.md: "give the namespace a policy with a larger writeRate.limit ...; a
    policy change applies within a second" (churn.py rule 6; was: held a full quiet period,
    and the tenant view showed the old limit until the writer's 30 s sweep)."""
    c, flow = op_cluster, tarpit
    name = f"p-{uuid.uuid4().hex[:6]}"
    ns = governed_namespace(c, scope, quiet="1h", policy=name)
    start_operator(**GOVERNED)
    engaged(c, flow, ns)
    wait_until(lambda: tenant_view(c, ns).get("tarpitted"), "the projection shows the tarpit",
               timeout=15)  # fmt: skip
    edited = edit_policy(c, name, {"writeRate": {"limit": 100000}})
    wait_until(lambda: tenant_view(c, ns).get("limit") == 100000, "the new limit shown",
               timeout=5)  # fmt: skip
    shown = time.monotonic() - edited
    # at once, or (operator started less than a window ago: rule 5) a window after its start
    wait_until(lambda: not listed(flow), f"{ns} released", timeout=WINDOW + 5)
    released = time.monotonic() - edited
    print(f"\nmeasured: new limit shown {shown:.1f} s, released {released:.1f} s after the edit")
    c.wait_event(ns, "Released", contains="its writeRate was relaxed (20 writes in 10 s -> "
                 "100000 in 10 s)")  # fmt: skip
    wait_until(lambda: tenant_view(c, ns).get("tarpitted") is False, "the projection released",
               timeout=5)  # fmt: skip


def test_dry_run_switched_off_while_held_is_enforced_at_once(
    op_cluster: OperatorCluster, scope: dict[str, str], start_operator: StartOperator,
    tarpit: Any,
) -> None:  # fmt: skip
    """Was: listed only once the quiet clock changed the namespace's state (~20 s)."""
    c, flow = op_cluster, tarpit
    name = f"p-{uuid.uuid4().hex[:6]}"
    ns = governed_namespace(c, scope, dry_run=True, quiet="1h", policy=name)
    op = start_operator(**GOVERNED)
    churn(c, ns)
    c.wait_event(ns, "Tarpitted", contains="dry run, not enforced: tarpit:")
    edited = edit_policy(c, name, {"dryRun": False})
    wait_until(lambda: listed(flow) == {ns}, f"{ns} listed once enforced", timeout=5)
    print(f"\nmeasured: listed {time.monotonic() - edited:.1f} s after dryRun: false")
    assert op.sample("dynquota_tarpitted", {"namespace": ns, "enforcement": "enforced"}) == 1
