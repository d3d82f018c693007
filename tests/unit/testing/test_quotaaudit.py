"""QuotaLedger replays a real audit log: the Spark-like runaway's namespace on the local
control plane, where the quota controller's recount overwrote a charge (kubernetes#123434) and
41 pods were admitted against hard 40. Recorded with QUOTA_AUDIT_POLICY, trimmed to the fields
the ledger reads."""

from __future__ import annotations

from pathlib import Path

from dynquota.testing.audit import AuditLog
from dynquota.testing.quotaaudit import QuotaLedger, refused_at

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
