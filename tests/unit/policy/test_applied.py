"""The content of a tenant projection (issue 28, part 3; pure): what it shows per state, and
when a change must be written."""

from __future__ import annotations

from dynquota.policy import Governance, OverrideSettings, ResourceProfile
from dynquota.policy.applied import (
    FIGURES_REFRESH,
    BudgetFacts,
    Projection,
    QuotaFacts,
    project,
    should_write,
)

PODS = ResourceProfile.of(40, 10, 100, 60, 300)
CPU = ResourceProfile.of(20, 500, 8000, 300, 3600)
GOV = Governance.managed(
    "team-policy",
    {"pods": PODS, "requests.cpu": CPU},
    override=OverrideSettings.model_validate({"allowed": True, "ttl": "3h", "minInterval": "1h"}),
)
QUOTA = QuotaFacts(
    {
        "dynquota.io/last-upscale.pods": "2027-01-15T08:00:00Z",
        "dynquota.io/override-ended-at": "2027-01-15T07:00:00Z",
    },
    {"pods": "20", "requests.cpu": "1500m"},
)
BUDGET = BudgetFacts(
    "team",
    {"pods": "60"},
    {"used": {"pods": "31"}, "granted": {"pods": "45"}, "free": {"pods": "15"}, "namespaces": {}},
)


def run(**kw: object) -> Projection:
    args: dict[str, object] = dict(
        namespace="team-a", governance=GOV, kill_switch=False, dry_run=False, quota=QUOTA,
        budget=BUDGET, default_ttl=168 * 3600,
    )  # fmt: skip
    args.update(kw)
    return project(**args)  # type: ignore[arg-type]


def test_an_enforced_namespace_shows_bounds_next_raises_rules_budget_and_slice() -> None:
    status = run().status(1_800_000_100, 1_800_000_000)
    assert status == {
        "asOf": "2027-01-15T08:01:40Z",
        "state": "Enforced",
        "message": "sized by policy team-policy: kubectl -n team-a get resourcequota dynquota "
        "shows the hard limits and usage",
        "policy": {
            "name": "team-policy",
            "dryRun": False,
            "resources": {
                "pods": {"minimum": "10", "maximum": "100", "bufferPercent": 40,
                         "upscaleCooldown": "1m", "downscaleCooldown": "5m",
                         "nextRaiseAfter": "2027-01-15T08:01:00Z"},
                "requests.cpu": {"minimum": "500m", "maximum": "8", "bufferPercent": 20,
                                 "upscaleCooldown": "5m", "downscaleCooldown": "1h"},
            },
            "override": {"allowed": True, "ttl": "3h", "minInterval": "1h",
                         "nextGrantAfter": "2027-01-15T08:00:00Z"},
        },
        "budget": {"name": "team", "hard": {"pods": "60"}, "slice": {"pods": "20"},
                   "used": {"pods": "31"}, "granted": {"pods": "45"}, "free": {"pods": "15"},
                   "figuresAsOf": "2027-01-15T08:00:00Z"},
    }  # fmt: skip


def test_nothing_of_other_namespaces_is_copied_from_the_budget_status() -> None:
    other = BudgetFacts("team", {"pods": "60"}, {"namespaces": {"team-b": {"used": {"pods": "9"}}}})
    assert "team-b" not in repr(run(budget=other).status(0, 0))


def test_kill_switch_dry_run_and_frozen_say_so_without_next_raises() -> None:
    killed = run(kill_switch=True, quota=None).stable
    assert killed["state"] == "KillSwitchEngaged"
    assert "nextRaiseAfter" not in killed["policy"]["resources"]["pods"]
    assert "slice" not in killed["budget"]
    assert run(dry_run=True).stable["state"] == "DryRun"
    frozen = run(governance=Governance("frozen", "invalid", "bad-policy")).stable
    assert frozen["state"] == "Frozen"
    assert frozen["policy"] == {"name": "bad-policy"}


def test_stable_changes_are_written_at_once_figures_alone_after_the_refresh() -> None:
    old = run()
    assert should_write(None, old, None, 0)
    assert not should_write(old, run(), 100, 100 + 10 * FIGURES_REFRESH)  # the clock alone
    moved = run(budget=BudgetFacts("team", {"pods": "60"}, {"used": {"pods": "32"}}))
    assert not should_write(old, moved, 100, 100 + FIGURES_REFRESH - 1)
    assert should_write(old, moved, 100, 100 + FIGURES_REFRESH)
    raised = run(quota=QuotaFacts({"dynquota.io/last-upscale.pods": "2027-01-15T09:00:00Z"}))
    assert should_write(old, raised, 100, 101)


def test_a_stored_status_reads_back_as_the_same_projection() -> None:
    new = run()
    assert Projection.from_status(new.status(5, 6)) == new


def test_the_write_rate_budget_and_the_tarpit() -> None:
    from dynquota.policy.applied import WriteRateFacts

    crd = {"limit": 300, "window": "1m", "quietPeriod": "5m"}
    assert "writeRate" not in run().stable
    quiet = run(write_rate=WriteRateFacts(crd)).stable["writeRate"]
    assert quiet == {**crd, "tarpitted": False}
    held = run(write_rate=WriteRateFacts(crd, "tarpit: 480 writes in 60 s (limit 300)"))
    assert held.stable["writeRate"] == {
        **crd,
        "tarpitted": True,
        "reason": "tarpit: 480 writes in 60 s (limit 300)",
    }
    assert should_write(run(write_rate=WriteRateFacts(crd)), held, written_at=0, now=1)
