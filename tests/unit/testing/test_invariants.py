"""The invariant checker's pure parts: audit-log parsing and the single-writer rule."""

from __future__ import annotations

import json
from pathlib import Path

from dynquota.kube.client import replica_user_agent
from dynquota.policy.models import ResourceProfile
from dynquota.testing.audit import AuditLog, AuditRecord
from dynquota.testing.invariants import OPERATOR_USER, expected_hard, single_writer
from dynquota.testing.replicas import replica_of

JTI = {"jti-a": "replica-a", "jti-b": "replica-b"}


def _event(
    verb: str,
    resource: str,
    name: str,
    received: str,
    completed: str,
    *,
    jti: str = "jti-a",
    code: int = 200,
    namespace: str = "t-1",
    agent: str = "OpenAPI-Generator/33.1.0/python",
) -> dict[str, object]:
    return {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": f"{verb}-{name}-{received}-{jti}",
        "stage": "ResponseComplete",
        "verb": verb,
        "user": {
            "username": OPERATOR_USER,
            "extra": {"authentication.kubernetes.io/credential-id": [f"JTI={jti}"]},
        },
        "userAgent": agent,
        "objectRef": {"resource": resource, "namespace": namespace, "name": name},
        "responseStatus": {"code": code},
        "requestReceivedTimestamp": f"2026-12-01T06:00:{received}Z",
        "stageTimestamp": f"2026-12-01T06:00:{completed}Z",
    }


def _records(*events: dict[str, object]) -> list[AuditRecord]:
    return [AuditRecord.from_json(e) for e in events]


def _lease(received: str, jti: str, code: int = 200) -> dict[str, object]:
    return _event(
        "update", "leases", "dynquota", received, received, jti=jti, namespace="dynquota-system",
        code=code,
    )  # fmt: skip


def identify(record: AuditRecord) -> str | None:
    return replica_of(record, JTI)


def test_audit_log_is_read_incrementally_and_partial_lines_wait(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    log = AuditLog(path)
    assert log.read_new() == []
    first = json.dumps(_event("patch", "resourcequotas", "dynquota", "01.000000", "01.250000"))
    second = json.dumps(_event("delete", "resourcequotas", "dynquota", "02.000000", "02.5"))
    path.write_text(first + "\n" + second[:40])
    (record,) = log.read_new()
    assert (record.verb, record.namespace, record.code) == ("patch", "t-1", 200)
    assert record.completed - record.received == 0.25
    assert identify(record) == "replica-a"
    with path.open("a") as out:
        out.write(second[40:] + "\nnot json\n")
    (record,) = log.read_new()
    assert record.verb == "delete"
    assert log.read_new() == []


def test_user_agent_names_the_replica_before_the_token() -> None:
    agent = replica_user_agent("pod-7")  # what each replica sends
    (record,) = _records(_event("patch", "resourcequotas", "dynquota", "01", "01", agent=agent))
    assert identify(record) == "pod-7"


def test_single_writer_accepts_a_clean_handover() -> None:
    records = _records(
        _lease("00", "jti-a"),
        _event("patch", "resourcequotas", "dynquota", "01", "02"),
        _lease("03", "jti-a"),
        # a stops renewing; b acquires once the 15 s lease has run out
        _lease("19", "jti-b"),
        _event("patch", "resourcequotas", "dynquota", "20", "20", jti="jti-b"),
    )
    assert single_writer(records, 15.0, identify) == []


def test_single_writer_finds_a_write_while_another_replica_holds_the_lease() -> None:
    records = _records(
        _lease("00", "jti-a"),
        _lease("16", "jti-b"),
        # a deposed leader's late write: its own last renew is 0 s, b acquired at 16 s
        _event("patch", "resourcequotas", "dynquota", "10", "17"),
        _event("patch", "resourcequotas", "dynquota", "17", "17", jti="jti-b"),
    )
    found = single_writer(records, 15.0, identify)
    assert len(found) == 1
    assert found[0].invariant == "single-writer"
    assert "by replica-a" in found[0].what
    assert "completed 17.0 s after its last Lease write" in found[0].what


def test_single_writer_finds_overlap_within_the_lease_period() -> None:
    records = _records(
        _lease("00", "jti-a"),
        _lease("05", "jti-b"),  # b wrote the Lease while a's lease was valid
        _event("patch", "resourcequotas", "dynquota", "06", "06"),
    )
    (found,) = single_writer(records, 15.0, identify)
    assert "while replica-b wrote the Lease" in found.what


def test_single_writer_ignores_failed_writes_and_flags_unknown_writers() -> None:
    records = _records(
        _lease("00", "jti-a"),
        _lease("01", "jti-b", code=409),  # a failed acquisition is no tenure
        _event("patch", "resourcequotas", "dynquota", "02", "02"),
        _event("patch", "resourcequotas", "dynquota", "03", "03", jti="other", code=200),
    )
    (found,) = single_writer(records, 15.0, identify)
    assert "unidentified replica" in found.what


def test_expected_hard_is_the_design_target() -> None:
    profile = ResourceProfile.of(40, 10, 60, 3, 3600)
    assert [expected_hard(profile, u) for u in (0, 7, 8, 14, 43, 44, 100)] == [
        10, 10, 12, 20, 60, 60, 60
    ]  # fmt: skip


def test_cooldown_allows_a_raise_to_usage_that_stamps_nothing() -> None:
    from dynquota.testing.invariant_rules import ClusterSample, QuotaSample, _too_early

    profile = ResourceProfile.of(40, 10, 60, 3, 12)
    stamp = {"dynquota.io/last-upscale.pods": "2026-12-01T19:05:34Z"}
    before = QuotaSample("u", {"pods": 40}, {"pods": 40}, dict(stamp))
    t = 1796151936.1  # 2 s after the stamp, inside the 3 s upscale cooldown
    cur = ClusterSample(t, False, {}, frozenset(), [], {})
    # admission admitted a 41st pod: raised to the usage at once, no new stamp
    at_usage = QuotaSample("u", {"pods": 41}, {"pods": 41}, dict(stamp))
    assert _too_early(cur, "ns", "pods", 40, 41, profile, before, at_usage) is None
    # a raise above the usage inside the cooldown is still a violation
    above = QuotaSample("u", {"pods": 56}, {"pods": 41}, dict(stamp))
    found = _too_early(cur, "ns", "pods", 40, 56, profile, before, above)
    assert found is not None
    assert found.invariant == "cooldown"


def test_cooldown_judges_a_change_by_when_the_sample_was_read() -> None:
    """A write made while the checker's LISTs ran is not early: the sample's start time is
    before it, the time the quota LIST answered after it (a soak false positive at load 30)."""
    from dynquota.testing.invariant_rules import ClusterSample, QuotaSample, _too_early

    profile = ResourceProfile.of(40, 10, 60, 3, 12)
    stamp = {"dynquota.io/last-upscale.pods": "2026-12-01T19:05:34Z"}
    before = QuotaSample("u", {"pods": 20}, {"pods": 20}, dict(stamp))
    # the raise stamped the end of the cooldown, as the operator does
    raised = QuotaSample(
        "u", {"pods": 28}, {"pods": 20}, {"dynquota.io/last-upscale.pods": "2026-12-01T19:05:37Z"}
    )
    began = 1796151934.0 + 1.5  # the sample began 1.5 s after the stamp (cooldown 3 s)
    early = ClusterSample(began, False, {}, frozenset(), [], {})
    found = _too_early(early, "ns", "pods", 20, 28, profile, before, raised)
    assert found is not None
    assert found.invariant == "cooldown"
    read = ClusterSample(began, False, {}, frozenset(), [], {}, read_until=began + 2.0)
    assert _too_early(read, "ns", "pods", 20, 28, profile, before, raised) is None
