"""``spec.writeRate`` of a policy (issue 32): defaults, durations like every other duration
field of a policy, and the messages a bad value gets."""

from __future__ import annotations

from typing import Any

import pytest

from dynquota.policy.churn import WriteRate
from dynquota.policy.models import WriteRateSettings, validate_policy


def _policy(write_rate: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"writeRate": write_rate}}


def test_off_unless_set() -> None:
    spec = validate_policy({"metadata": {"name": "p"}, "spec": {}}).spec
    assert spec is not None
    assert spec.write_rate is None
    spec = validate_policy(_policy(None)).spec
    assert spec is not None
    assert spec.write_rate is None


def test_defaults_and_rule() -> None:
    spec = validate_policy(_policy({"limit": 300})).spec
    assert spec is not None
    assert spec.write_rate is not None
    assert spec.write_rate.rule == WriteRate(limit=300, window=60, quiet_period=300)
    assert spec.write_rate.to_crd() == {"limit": 300, "window": "1m", "quietPeriod": "5m"}


def test_durations() -> None:
    rate = WriteRateSettings.model_validate({"limit": 5, "window": "90s", "quietPeriod": "0s"})
    assert (rate.window, rate.quiet_period) == (90, 0)
    rate = WriteRateSettings.model_validate({"limit": 5, "window": "1h", "quietPeriod": "1h30m"})
    assert (rate.window, rate.quiet_period) == (3600, 5400)


@pytest.mark.parametrize(
    ("write_rate", "reason"),
    [
        ({}, "spec.writeRate.limit: required field is missing"),
        ({"limit": 0}, "spec.writeRate.limit: must be between 1 and 1000000 writes, not 0"),
        ({"limit": "10"}, "spec.writeRate.limit: must be an integer"),
        ({"limit": 10, "window": 60},
         "spec.writeRate.window: must be a duration string like 90s, 5m or 1h30m, not 60"),
        ({"limit": 10, "window": "0s"}, "spec.writeRate.window: must be between 1s and 1h, not 0s"),
        ({"limit": 10, "window": "2h"}, "spec.writeRate.window: must be between 1s and 1h, not 2h"),
        ({"limit": 10, "quietPeriod": "1d"},
         "spec.writeRate.quietPeriod: invalid duration '1d': expected whole hours, minutes and "
         "seconds in that order, like 90s, 5m or 1h30m (write 24h)"),
        ({"limit": 10, "burst": 3}, "spec.writeRate.burst: unknown field"),
        ("fast", "spec.writeRate: must be an object"),
    ],
)  # fmt: skip
def test_invalid(write_rate: Any, reason: str) -> None:
    info = validate_policy(_policy(write_rate))
    assert info.spec is None
    assert info.reason == reason
