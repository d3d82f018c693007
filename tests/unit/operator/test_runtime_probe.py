"""The kopf wiring: only event handlers (never changing handlers, timers or daemons), and the
liveness probe fails exactly when the informers are unhealthy."""

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


class FakeRuntime:
    def __init__(self) -> None:
        self.ok = True
        self.watcher = FakeWatcher()

    def healthy(self) -> bool:
        return self.ok


def test_registry_has_event_handlers_only_for_resources() -> None:
    registry = build_registry(lambda memo: memo)
    resources = registry._watching.get_all_handlers()  # event handlers
    assert {h.selector.any_name for h in resources} == {  # type: ignore[union-attr]
        "namespaces",
        "resourcequotas",
        "limitranges",
        "dynamicquotapolicies",
        "quotabudgets",
    }
    assert list(registry._changing.get_all_handlers()) == []
    assert list(registry._spawning.get_all_handlers()) == []  # no timers, no daemons


async def test_probe_fails_when_informers_are_unhealthy() -> None:
    registry = build_registry(lambda memo: memo)
    (probe,) = registry._activities.get_handlers(activity=causes.Activity.PROBE)
    runtime = FakeRuntime()
    assert await probe.fn(memo=runtime) == {"pods": 3, "configmaps": 1}
    runtime.ok = False
    with pytest.raises(kopf.PermanentError, match="an informer or the elector is stuck"):
        await probe.fn(memo=runtime)


def test_kopf_settings_post_no_events_and_select_the_managed_quota() -> None:
    ks = kopf_settings(Settings(watch_timeout_seconds=120))
    assert ks.posting.enabled is False
    assert ks.peering.standalone is True
    assert ks.watching.server_timeout == 120
    assert {s.any_name: v for s, v in ks.watching.field_selectors.items()} == {
        "resourcequotas": "metadata.name=dynquota",
        "limitranges": "metadata.name=dynquota",
    }
