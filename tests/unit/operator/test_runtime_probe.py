"""The kopf wiring: activities only (no event or changing handlers, timers or daemons: every
watched kind is dynquota's own informer), and the liveness probe fails exactly when the
informers are unhealthy."""

from __future__ import annotations

from typing import Any

import kopf
import pytest
from kopf._core.intents import causes

from dynquota.operator.runtime import build_registry, kopf_settings
from dynquota.settings import Settings


class FakeWatcher:
    def __init__(self) -> None:
        self.cycles = 3

    def stats(self) -> dict[str, dict[str, Any]]:
        return {"pods": {"watch_cycles": self.cycles}, "configmaps": {"watch_cycles": 1}}


class FakeObjects:
    def stats(self) -> dict[str, dict[str, Any]]:
        return {"namespaces": {"watch_cycles": 2}}


class FakeRuntime:
    def __init__(self) -> None:
        self.ok = True
        self.watcher = FakeWatcher()
        self.objects = FakeObjects()

    def healthy(self) -> bool:
        return self.ok


def test_registry_has_activities_only() -> None:
    registry = build_registry(lambda memo: memo)
    # namespaces, quotas, LimitRanges, policies and budgets: dynquota.kube.objects
    assert list(registry._watching.get_all_handlers()) == []
    assert list(registry._changing.get_all_handlers()) == []
    assert list(registry._spawning.get_all_handlers()) == []  # no timers, no daemons
    activities = {h.activity for h in registry._activities.get_all_handlers()}
    assert activities == {
        causes.Activity.AUTHENTICATION,
        causes.Activity.STARTUP,
        causes.Activity.CLEANUP,
        causes.Activity.PROBE,
    }


async def test_probe_fails_when_informers_are_unhealthy() -> None:
    registry = build_registry(lambda memo: memo)
    (probe,) = registry._activities.get_handlers(activity=causes.Activity.PROBE)
    runtime = FakeRuntime()
    assert await probe.fn(memo=runtime) == {"pods": 3, "configmaps": 1, "namespaces": 2}
    runtime.ok = False
    with pytest.raises(kopf.PermanentError, match="an informer or the elector is stuck"):
        await probe.fn(memo=runtime)


def test_kopf_settings_post_no_events_and_stand_alone() -> None:
    ks = kopf_settings(Settings(watch_timeout_seconds=120))
    assert ks.posting.enabled is False
    assert ks.peering.standalone is True
    assert ks.networking.request_timeout == 10
    assert dict(ks.watching.field_selectors) == {}
