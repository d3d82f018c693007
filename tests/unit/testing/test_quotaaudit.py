"""QuotaLedger replays a real audit log: the Spark-like runaway's namespace on the local
control plane, where the quota controller's recount overwrote a charge (kubernetes#123434) and
41 pods were admitted against hard 40. Recorded with QUOTA_AUDIT_POLICY, trimmed to the fields
the ledger reads."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from dynquota.testing.audit import AuditLog, AuditRecord
from dynquota.testing.quotaaudit import (
    QuotaLedger,
    UpstreamQuotaRaceError,
    by_quota_controller,
    lowered_used,
    refused_at,
    upstream_race_explains,
)

RECORDED = Path(__file__).parents[1] / "data" / "audit-spark-stale-recount.jsonl"
NS = "t-bbe982ed"


def ledger() -> QuotaLedger:
    return QuotaLedger(AuditLog(RECORDED).read_new(), NS)


def test_the_recount_that_erased_a_charge_is_named() -> None:
    (recount,) = ledger().stale_recounts()
    assert (recount.write.by, recount.write.hard, recount.write.used) == ("controller", 40, 38)
    assert recount.before == 39  # the admission plugin's charge for exec-38, overwritten
    assert recount.existing == 39  # the driver and 38 executors had been created
    assert recount.erased == 1


def test_the_namespace_holds_hard_plus_what_recounts_erased() -> None:
    recorded = ledger()
    assert recorded.admitted() == 41
    assert recorded.uncounted() == 1  # 41 == 40 + 1
    assert recorded.over_hard() == []  # admission itself never charged above hard
    # before the recount, every pod was counted: each round refused at exactly hard
    assert recorded.uncounted(until=recorded.stale_recounts()[0].write.received) == 0
    assert [refused_at(c.message) for c in recorded.refused()] == [
        (10, 10),
        (14, 14),
        (20, 20),
        (28, 28),
        (40, 40),
    ]
    assert [w.by for w in recorded.writes].count("admission") == 41  # one per admitted pod


def test_refusal_messages() -> None:
    text = (
        'pods "x" is forbidden: exceeded quota: dynquota, requested: pods=1, used: pods=56, '
        "limited: pods=56"
    )
    assert refused_at(text) == (56, 56)
    assert refused_at("configmaps ... exceeded quota: dynquota, requested: configmaps=1, "
                      "used: configmaps=20, limited: configmaps=20") == (20, 20)  # fmt: skip
    assert refused_at("forbidden: something else") is None


def status_write(rv: int, by: str, used: dict[str, str], at: str) -> dict[str, Any]:
    """One audit Event of a quota status write (``by``: ``admission`` or ``controller``)."""
    agent = "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/x/resourcequota-controller"
    return {
        "auditID": f"id-{rv}",
        "stage": "ResponseComplete",
        "verb": "update",
        "user": {"username": "system:apiserver" if by == "admission" else "dynquota-admin"},
        "userAgent": agent if by == "controller" else "kube-apiserver",
        "objectRef": {
            "resource": "resourcequotas",
            "subresource": "status",
            "namespace": NS,
            "name": "dynquota",
        },
        "responseStatus": {"code": 200},
        "responseObject": {"metadata": {"resourceVersion": str(rv)}, "status": {"used": used}},
        "requestReceivedTimestamp": at,
        "stageTimestamp": at,
    }


def fail_after_writing(log: Path, events: list[dict[str, Any]]) -> None:
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    raise AssertionError("created [1, 1, 1, 2]")


def test_lowered_used_names_the_stale_recount_of_the_recorded_log() -> None:
    records = AuditLog(RECORDED).read_new()
    (lowered,) = lowered_used(records, NS, ["pods"])
    assert (lowered.key, lowered.before, lowered.written) == ("pods", "39", "38")
    assert lowered_used(records, NS, ["pods"], since=lowered.received + 0.001) == []
    assert lowered_used(records, NS, ["configmaps"]) == []
    assert lowered_used(records, "elsewhere", ["pods"]) == []


def test_lowered_used_compares_quantities() -> None:
    events = [
        status_write(10, "admission", {"limits.cpu": "800m"}, "2026-12-01T10:00:00Z"),
        status_write(11, "admission", {"limits.cpu": "1"}, "2026-12-01T10:00:01Z"),
        status_write(12, "controller", {"limits.cpu": "800m"}, "2026-12-01T10:00:02Z"),
        status_write(13, "admission", {"limits.cpu": "1200m"}, "2026-12-01T10:00:03Z"),
        status_write(14, "controller", {"limits.cpu": "1200m"}, "2026-12-01T10:00:04Z"),
    ]
    records = [AuditRecord.from_json(e) for e in events]
    (lowered,) = lowered_used(records, NS, ["limits.cpu"])
    assert (lowered.resource_version, lowered.before, lowered.written) == (12, "1", "800m")
    # an admission charge never counts as lowering, whatever its value
    assert lowered_used(records[:2], NS, ["limits.cpu"]) == []


def test_an_assertion_becomes_an_upstream_race_only_with_a_lowering_recount(
    tmp_path: Path,
) -> None:
    log = tmp_path / "audit.log"
    log.write_text("")
    with pytest.raises(AssertionError) as plain, upstream_race_explains(log, NS, ["pods"]):
        raise AssertionError("created [1, 1, 1, 2]")
    assert type(plain.value) is AssertionError
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)
    at = later.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lowering = [
        status_write(20, "admission", {"pods": "5"}, at),
        status_write(21, "controller", {"pods": "4"}, at),
    ]
    with (
        pytest.raises(UpstreamQuotaRaceError, match=r"created \[1, 1, 1, 2\]"),
        upstream_race_explains(log, NS, ["pods"]),
    ):
        fail_after_writing(log, lowering)
    with upstream_race_explains(log, NS, ["pods"]):
        pass  # no failure: nothing to explain


def test_the_quota_controller_is_known_with_either_identity() -> None:
    """With its own ServiceAccount (the test bed's default since issue 32) or with the
    controller manager's user (``component_identities=False``), as the audit log names it."""
    own = status_write(7, "controller", {"pods": "1"}, "2026-12-04T13:21:15.000000Z")
    own["user"] = {"username": "system:serviceaccount:kube-system:resourcequota-controller"}
    own["userAgent"] = (
        "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/$Format/"
        "system:serviceaccount:kube-system:resourcequota-controller"
    )
    shared = status_write(8, "controller", {"pods": "1"}, "2026-12-04T13:21:16.000000Z")
    admission = status_write(9, "admission", {"pods": "2"}, "2026-12-04T13:21:17.000000Z")
    records = [AuditRecord.from_json(e) for e in (own, shared, admission)]
    assert [by_quota_controller(r) for r in records] == [True, True, False]
