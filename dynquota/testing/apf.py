"""API Priority and Fairness on the test bed: tarpit objects, and which FlowSchema the
apiserver matched, read from its metrics and its request log (pure).

- :func:`tarpit_level` / :func:`tarpit_schema`: a ``Limited`` PriorityLevelConfiguration that
  neither lends nor borrows seats (``lendablePercent: 0``, ``borrowingLimitPercent: 0``) with
  ``limitResponse`` ``Reject`` or a short queue, and a FlowSchema routing requests to it. Seats
  per apiserver = ceil(server concurrency x shares / sum of all levels' shares): at the
  defaults (600 seats, built-in shares summing to 245) 1, 2 and 3 shares give 3, 5 and 8.
- :func:`flow_counts`: ``apiserver_flowcontrol_dispatched_requests_total`` and
  ``apiserver_flowcontrol_rejected_requests_total`` per (flow_schema, priority_level) from a
  ``/metrics`` page (labels only say which schema, not whose request).
- :func:`request_flows`: per client, which schema each request matched, from kube-apiserver's
  request log (``httplog`` lines, written at ``--v=3``: ``userAgent=... apf_fs=...``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "FLOWCONTROL",
    "TARPIT_QUEUE",
    "WRITE_VERBS",
    "FlowCounts",
    "flow_counts",
    "request_flows",
    "tarpit_level",
    "tarpit_schema",
]

FLOWCONTROL = "flowcontrol.apiserver.k8s.io/v1"
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
"""The verbs a tarpit catches: churn is writes; reads (a tenant's informers, ``kubectl get``)
are left to the level they use."""
TARPIT_QUEUE = {"queues": 1, "queueLengthLimit": 5, "handSize": 1}
"""The short queue of the benchmark's queuing tarpit: one queue of 5, every flow in it."""


def tarpit_level(name: str, shares: int, queuing: dict[str, int] | None) -> dict[str, Any]:
    """A PriorityLevelConfiguration ``name``: ``Limited``, ``shares`` nominal concurrency
    shares, nothing lent or borrowed; ``queuing`` (e.g. :data:`TARPIT_QUEUE`) queues what
    finds no seat, None rejects it at once (429)."""
    limit_response: dict[str, Any] = (
        {"type": "Reject"} if queuing is None else {"type": "Queue", "queuing": queuing}
    )
    return {
        "apiVersion": FLOWCONTROL,
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": name},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": shares,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": limit_response,
            },
        },
    }


def tarpit_schema(
    name: str,
    level: str,
    precedence: int,
    subjects: Sequence[dict[str, Any]],
    namespaces: Sequence[str],
    resources: Sequence[str] = ("*",),
    verbs: Sequence[str] = WRITE_VERBS,
    cluster_scope: bool = False,
) -> dict[str, Any]:
    """A FlowSchema ``name`` sending ``verbs`` on ``resources`` (core and every group) in
    ``namespaces`` (``["*"]``: all; plus cluster-scoped ones with ``cluster_scope``) by
    ``subjects`` to ``level`` at ``precedence``, one flow per namespace (``ByNamespace``)."""
    return {
        "apiVersion": FLOWCONTROL,
        "kind": "FlowSchema",
        "metadata": {"name": name},
        "spec": {
            "priorityLevelConfiguration": {"name": level},
            "matchingPrecedence": precedence,
            "distinguisherMethod": {"type": "ByNamespace"},
            "rules": [
                {
                    "subjects": list(subjects),
                    "resourceRules": [
                        {
                            "verbs": list(verbs),
                            "apiGroups": ["*"],
                            "resources": list(resources),
                            "namespaces": list(namespaces),
                            "clusterScope": cluster_scope,
                        }
                    ],
                }
            ],
        },
    }


@dataclass(frozen=True)
class FlowCounts:
    """Requests of one (flow_schema, priority_level): dispatched (run) and rejected (429),
    the latter by reason (``queue-full``, ``concurrency-limit``, ``time-out``, ...)."""

    dispatched: float = 0.0
    rejected: float = 0.0
    rejected_by_reason: tuple[tuple[str, float], ...] = ()

    def __sub__(self, other: FlowCounts) -> FlowCounts:
        reasons = dict(self.rejected_by_reason)
        for reason, count in other.rejected_by_reason:
            reasons[reason] = reasons.get(reason, 0.0) - count
        return FlowCounts(
            self.dispatched - other.dispatched,
            self.rejected - other.rejected,
            tuple(sorted((r, c) for r, c in reasons.items() if c)),
        )


def flow_counts(metrics_text: str) -> dict[tuple[str, str], FlowCounts]:
    """Dispatched and rejected requests per (flow_schema, priority_level) from the text of
    kube-apiserver's ``/metrics`` (counters since the apiserver started)."""
    dispatched: dict[tuple[str, str], float] = {}
    rejected: dict[tuple[str, str], dict[str, float]] = {}
    # the page is megabytes: parse only the two families' lines (HELP, TYPE, samples)
    wanted = "\n".join(
        line
        for line in metrics_text.splitlines()
        if "apiserver_flowcontrol_dispatched_requests_total" in line
        or "apiserver_flowcontrol_rejected_requests_total" in line
    )
    for family in text_string_to_metric_families(wanted + "\n"):
        if family.name == "apiserver_flowcontrol_dispatched_requests":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    key = (sample.labels["flow_schema"], sample.labels["priority_level"])
                    dispatched[key] = sample.value
        elif family.name == "apiserver_flowcontrol_rejected_requests":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    key = (sample.labels["flow_schema"], sample.labels["priority_level"])
                    reasons = rejected.setdefault(key, {})
                    reasons[sample.labels.get("reason", "")] = sample.value
    return {
        key: FlowCounts(
            dispatched.get(key, 0.0),
            sum(rejected.get(key, {}).values()),
            tuple(sorted(rejected.get(key, {}).items())),
        )
        for key in dispatched.keys() | rejected.keys()
    }


_HTTPLOG = re.compile(r'"HTTP" .*?userAgent="(?P<agent>[^"]*)".*? apf_fs="(?P<fs>[^"]*)"')


def request_flows(log_lines: Iterable[str]) -> Counter[tuple[str, str]]:
    """Requests per (client, flow_schema) in kube-apiserver's request log (``--v=3``).

    The client is the user agent's program (``kube-scheduler``, ``kwok``, ...) and, for
    kube-controller-manager, the identity or controller its client names last
    (``kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/$Format/system:serviceaccount:
    kube-system:replicaset-controller`` -> ``kube-controller-manager:
    system:serviceaccount:kube-system:replicaset-controller``). Requests rejected before
    classification carry no ``apf_fs`` and are not counted."""
    flows: Counter[tuple[str, str]] = Counter()
    for line in log_lines:
        match = _HTTPLOG.search(line)
        if match is None:
            continue
        agent = match["agent"]
        program = agent.split("/", 1)[0]
        if program == "kube-controller-manager":
            program += ":" + agent.rsplit("/", 1)[-1]
        flows[(program, match["fs"])] += 1
    return flows
