"""The APF helpers of the test bed: tarpit objects, counters from /metrics, flows from the
apiserver's request log (lines as kube-apiserver v1.37.2 writes them at --v=3)."""

from __future__ import annotations

from dynquota.testing.apf import (
    TARPIT_QUEUE,
    FlowCounts,
    flow_counts,
    request_flows,
    tarpit_level,
    tarpit_schema,
)
from dynquota.testing.components import COMPONENT_USERS
from dynquota.testing.credentials import token_auth_file

METRICS = """\
# HELP apiserver_flowcontrol_dispatched_requests_total [BETA] Number of requests executed
# TYPE apiserver_flowcontrol_dispatched_requests_total counter
apiserver_flowcontrol_dispatched_requests_total{flow_schema="exempt",priority_level="exempt"} 605
apiserver_flowcontrol_dispatched_requests_total{flow_schema="t",priority_level="t"} 913
# HELP apiserver_flowcontrol_rejected_requests_total [BETA] Number of requests rejected
# TYPE apiserver_flowcontrol_rejected_requests_total counter
REJECTED{flow_schema="t",priority_level="t",reason="concurrency-limit"} 5600
REJECTED{flow_schema="t",priority_level="t",reason="queue-full"} 29
# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",verb="GET"} 12
""".replace("REJECTED", "apiserver_flowcontrol_rejected_requests_total")

LOG = [
    'I1204 13:21:15.885113   19981 httplog.go:135] "HTTP" verb="POST" '
    'URI="/api/v1/namespaces/default/pods" latency="4ms" userAgent="kube-controller-manager/'
    "v1.37.2 (linux/amd64) kubernetes/$Format/system:serviceaccount:kube-system:"
    'replicaset-controller" audit-ID="c2" srcIP="127.0.0.1:52606" apf_pl="workload-high" '
    'apf_fs="kube-system-service-accounts" apf_iseats=1 apf_fseats=0 resp=201',
    'I1204 13:21:15.894339   19981 httplog.go:135] "HTTP" verb="GET" URI="/api/v1/nodes" '
    'latency="10ms" userAgent="kwok/v0.8.0 (linux/amd64)" audit-ID="dc" srcIP="127.0.0.1:1" '
    'apf_pl="system" apf_fs="system-nodes" apf_iseats=1 resp=200',
    'I1204 13:21:15.9 19981 httplog.go:135] "HTTP" verb="GET" URI="/readyz" latency="1ms" '
    'userAgent="Python-urllib/3.11" audit-ID="x" srcIP="127.0.0.1:2" resp=500',
    "I1204 13:21:16.0 19981 controller.go:1] unrelated line",
]


def test_flow_counts_reads_both_families() -> None:
    counts = flow_counts(METRICS)
    assert counts[("exempt", "exempt")] == FlowCounts(605, 0, ())
    tarpit = counts[("t", "t")]
    assert (tarpit.dispatched, tarpit.rejected) == (913, 5629)
    assert dict(tarpit.rejected_by_reason) == {"concurrency-limit": 5600, "queue-full": 29}


def test_flow_counts_subtract() -> None:
    later = FlowCounts(20, 7, (("queue-full", 7.0),))
    earlier = FlowCounts(5, 2, (("queue-full", 2.0),))
    assert later - earlier == FlowCounts(15, 5, (("queue-full", 5.0),))


def test_request_flows_names_controllers_and_skips_unclassified() -> None:
    flows = request_flows(LOG)
    assert flows == {
        (
            "kube-controller-manager:system:serviceaccount:kube-system:replicaset-controller",
            "kube-system-service-accounts",
        ): 1,
        ("kwok", "system-nodes"): 1,
    }


def test_tarpit_level_never_lends_nor_borrows() -> None:
    limited = tarpit_level("t", 2, None)["spec"]["limited"]
    assert limited["nominalConcurrencyShares"] == 2
    assert (limited["lendablePercent"], limited["borrowingLimitPercent"]) == (0, 0)
    assert limited["limitResponse"] == {"type": "Reject"}
    queued = tarpit_level("t", 1, TARPIT_QUEUE)["spec"]["limited"]["limitResponse"]
    assert queued == {"type": "Queue", "queuing": TARPIT_QUEUE}


def test_tarpit_schema_names_namespaces_and_write_verbs() -> None:
    subjects = [{"kind": "Group", "group": {"name": "system:authenticated"}}]
    spec = tarpit_schema("t", "lvl", 1000, subjects, ["team-a"], ["configmaps"])["spec"]
    assert spec["matchingPrecedence"] == 1000
    assert spec["distinguisherMethod"] == {"type": "ByNamespace"}
    (rule,) = spec["rules"][0]["resourceRules"]
    assert rule["namespaces"] == ["team-a"]
    assert rule["clusterScope"] is False
    assert "get" not in rule["verbs"]
    assert "create" in rule["verbs"]


def test_token_auth_file_lines() -> None:
    text = token_auth_file(
        [("a" * 8, "admin", ("system:masters",)), ("b" * 8, *COMPONENT_USERS["kube-scheduler"])]
    )
    assert text == 'aaaaaaaa,admin,0,"system:masters"\nbbbbbbbb,system:kube-scheduler,1\n'
