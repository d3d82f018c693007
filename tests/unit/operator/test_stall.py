"""StallWatch: quota events and decisions in, the gauge, one log line and on_change out."""

from __future__ import annotations

import logging

import pytest

from dynquota.cli.plan_text import stall_lines
from dynquota.kube.quotas import QuotaSnapshot
from dynquota.metrics import Metrics
from dynquota.operator.stall import StallWatch

T0 = 1795996800.0


def _quota(spec: dict[str, str], status: dict[str, str], used: dict[str, str]) -> QuotaSnapshot:
    return QuotaSnapshot.from_object(
        {
            "metadata": {"name": "dynquota", "namespace": "a", "resourceVersion": "1"},
            "spec": {"hard": spec},
            "status": {"hard": status, "used": used},
        }
    )


def test_transitions_set_the_gauge_log_once_and_call_on_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    changes: list[bool] = []
    watch = StallWatch(10, metrics, changes.append)

    def gauge(signal: str) -> float | None:
        return metrics.registry.get_sample_value(
            "dynquota_quota_controller_stalled", {"signal": signal}
        )

    assert (gauge("copy"), gauge("recount")) == (0, 0)
    raised = _quota({"pods": "20"}, {"pods": "14"}, {"pods": "14"})
    assert raised.copy_pending()
    watch.observe_quota("a", raised, T0)
    assert not watch.check(T0 + 29)
    assert changes == []
    with caplog.at_level(logging.WARNING, "dynquota.operator"):
        assert watch.check(T0 + 30)
    assert watch.stalled
    assert changes == [True]
    assert (gauge("copy"), gauge("recount")) == (1, 0)
    assert "QuotaControllerStalled (SpecNotCopied): spec.hard of 1 managed quota(s)" in caplog.text
    assert not watch.check(T0 + 35)  # no change, no second line
    # deletions not replenished: the recount signal joins after sync period + 30 s
    watch.observe_usage("a", raised, {"pods": 10}, {"pods": 14}, T0 + 35)
    assert watch.check(T0 + 75)
    assert (gauge("copy"), gauge("recount")) == (1, 1)
    # the copy and a recount: running again
    copied = _quota({"pods": "20"}, {"pods": "20"}, {"pods": "10"})
    assert not copied.copy_pending()
    watch.observe_quota("a", copied, T0 + 80)
    watch.observe_usage("a", copied, {"pods": 10}, {"pods": 10}, T0 + 80)
    assert watch.check(T0 + 81)
    assert not watch.stalled
    assert changes == [True, True, False]
    assert (gauge("copy"), gauge("recount")) == (0, 0)


def test_keys_compare_in_their_units_and_a_deleted_quota_is_forgotten() -> None:
    assert not _quota({"requests.cpu": "1"}, {"requests.cpu": "1000m"}, {}).copy_pending()
    assert _quota({"pods": "1", "secrets": "2"}, {"pods": "1"}, {}).copy_pending()
    watch = StallWatch(10, Metrics(), lambda _: None)
    watch.observe_quota("a", _quota({"pods": "2"}, {}, {}), T0)
    watch.observe_quota("a", None, T0 + 1)
    assert not watch.check(T0 + 100)
    assert not watch.stalled


def test_plan_says_the_quota_controller_is_stalled_from_the_policies_condition() -> None:
    stalled = {
        "type": "QuotaControllerStalled",
        "status": "True",
        "reason": "SpecNotCopied",
        "lastTransitionTime": "2026-12-03T23:00:00Z",
        "message": "spec.hard of 2 managed quota(s) not copied",
    }
    running = {**stalled, "status": "False", "reason": "Running"}
    assert stall_lines([{"status": {"conditions": [running]}}]) == []
    assert stall_lines([{}, {"status": {"conditions": [stalled]}}]) == [
        "quota controller: STALLED (SpecNotCopied, since 2026-12-03T23:00:00Z): spec.hard of 2 "
        "managed quota(s) not copied"
    ]
