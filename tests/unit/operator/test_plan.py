"""`dynquota plan`'s decisions from a cluster snapshot (no cluster needed)."""

from __future__ import annotations

from dynquota.cli.plan_text import format_plan, format_table
from dynquota.operator.plan import build_plan, compute_plan
from dynquota.operator.plan_model import BudgetMember
from dynquota.operator.plan_snapshot import ClusterSnapshot
from dynquota.settings import Settings

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def ns(name: str, **labels: str) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": labels}}


def quota(
    namespace: str, hard: dict[str, str], managed: bool = True, **ann: str
) -> dict[str, object]:
    return {
        "metadata": {
            "name": "dynquota",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "dynquota"} if managed else {},
            "annotations": ann,
        },
        "spec": {"hard": hard},
        "status": {"hard": hard, "used": {"pods": "25", "configmaps": "1"}},
    }


POLICY = {
    "metadata": {"name": "p"},
    "spec": {
        "resources": {
            "pods": {
                "bufferPercent": 40,
                "minimum": 10,
                "maximum": 100,
                "upscaleCooldown": "5m",
                "downscaleCooldown": "1h",
            }
        }
    },
}


def snapshot() -> ClusterSnapshot:
    state = {
        "dynquota.io/policy": "p",
        "dynquota.io/hard.pods": "20",
        "dynquota.io/hard.configmaps": "50",
        "dynquota.io/profile.pods": "bufferPercent=40,minimum=10,maximum=100",
        "dynquota.io/profile.configmaps": "bufferPercent=40,minimum=50,maximum=2000",
        "dynquota.io/last-upscale.pods": "2027-01-15T07:58:00Z",
        "dynquota.io/last-change.pods": "2027-01-15T07:58:00Z",
        "dynquota.io/last-upscale.configmaps": "2027-01-15T07:00:00Z",
        "dynquota.io/last-change.configmaps": "2027-01-15T07:00:00Z",
    }
    return ClusterSnapshot(
        kube_system={"metadata": {"name": "kube-system", "annotations": {}}},
        namespaces=[ns("kube-public"), ns("team-a"), ns("team-b"), ns("team-c")],
        policies=[POLICY],
        quotas=[
            quota("team-a", {"pods": "20", "configmaps": "50"}, **state),
            quota("team-c", {"pods": "3"}, managed=False),
        ],
        tally={("team-a", "pods"): 24, ("team-a", "configmaps"): 1, ("team-b", "pods"): 6},
    )


def test_plan_rows_say_what_and_why() -> None:
    rows = compute_plan(snapshot(), now=NOW)
    table = {(r.namespace, r.resource): r for r in rows}
    assert [r.namespace for r in rows] == [
        "team-a",
        "team-a",
        "team-b",
        "team-b",
        "team-c",
        "team-c",
    ]
    a = table[("team-a", "pods")]
    # U = max(tally 24, status.used 25); T(25) = 35 > H 20, but the cooldown runs until 08:03
    # ... and usage is above hard: hard goes to usage at once, the buffer waits for 08:03
    assert (a.tally, a.status_used, a.hard, a.target, a.next) == (24, 25, 20, 35, "patch")
    assert a.why.startswith(
        "upscale pods 20->25: usage 25 above hard 20, raised to usage at once (never below "
        "usage); the buffer waits for the cooldown until 2027-01-15T08:03:00Z"
    )
    b = table[("team-b", "pods")]
    assert (b.tally, b.status_used, b.hard, b.target, b.next) == (6, None, None, 10, "create")
    assert b.why == "create pods 10: usage 6, buffer 40%, at minimum 10"
    c = table[("team-c", "pods")]
    assert (c.hard, c.next) == (3, "nothing")
    assert "without the managed-by label" in c.why


def test_plan_after_the_cooldown_and_with_the_kill_switch() -> None:
    rows = compute_plan(snapshot(), now=NOW + 300)
    a = next(r for r in rows if (r.namespace, r.resource) == ("team-a", "pods"))
    assert (a.next, a.why) == ("patch", "upscale pods 20->35: usage 25, buffer 40%")
    engaged = snapshot()
    engaged.kube_system = {
        "metadata": {"name": "kube-system", "annotations": {"dynquota.io/kill-switch": "true"}}
    }
    rows = compute_plan(engaged, now=NOW)
    assert {(r.namespace, r.next) for r in rows} == {
        ("team-a", "delete"),
        ("team-b", "nothing"),
        ("team-c", "nothing"),
    }


def test_table_format() -> None:
    text = format_table(compute_plan(snapshot(), now=NOW))
    lines = text.splitlines()
    assert lines[0].split() == [
        "NAMESPACE", "RESOURCE", "TALLY", "STATUS.USED", "HARD", "TARGET", "NEXT", "WHY"
    ]  # fmt: skip
    assert lines[3].split()[:7] == ["team-b", "pods", "6", "-", "-", "10", "create"]


def test_build_plan_says_why_a_namespace_is_not_managed() -> None:
    from dynquota.operator.plan import build_plan
    from dynquota.operator.plan_model import NotManaged, OtherQuota
    from dynquota.settings import Settings

    snap = snapshot()
    selector = {"matchLabels": {"x": "y"}}
    spec = {**POLICY["spec"], "namespaceSelector": selector}  # type: ignore[dict-item]
    snap.policies = [{**POLICY, "spec": spec}]
    snap.namespaces = [
        ns("kube-system"),
        ns("dq-system", x="y"),
        ns("team-a", x="y"),
        ns("team-b", x="y"),
        ns("team-d", x="y", **{"dynquota.io/managed": "FALSE"}),
        ns("team-e"),
        ns("team-f", x="y"),
        ns("team-c", x="y"),
        {"metadata": {"name": "team-g", "deletionTimestamp": "2027-01-15T07:00:00Z"}},
    ]
    snap.quotas = [
        *snap.quotas,
        {
            "metadata": {"name": "team", "namespace": "team-f"},
            "spec": {"hard": {"count/pods": "4", "configmaps": "900"}},
        },
    ]
    settings, _ = Settings.from_environment(
        {
            "DYNQUOTA_NAMESPACE": "dq-system",
            "DYNQUOTA_EXCLUDE_NAMESPACES": "team-b",
            "DYNQUOTA_INCLUDE_NAMESPACES": "team-a,team-b,team-d,team-e,team-f,team-g,team-x",
        }
    )
    plan = build_plan(snap, settings, now=NOW)
    assert plan.not_managed == [
        NotManaged("dq-system", "excluded: the release's own namespace"),
        NotManaged("kube-system", "excluded: system namespace (always excluded)"),
        NotManaged("team-b", "excluded: listed in excludeNamespaces"),
        NotManaged("team-c", "excluded: not in includeNamespaces"),
        NotManaged("team-d", "opted out: labelled dynquota.io/managed=FALSE"),
        NotManaged("team-e", "no policy matches this namespace"),
        NotManaged(
            "team-g", "excluded: being deleted (its quota is left to the namespace controller)"
        ),
    ]
    assert plan.other_quotas == [
        OtherQuota("team-c", "dynquota", {"pods": "3"}),
        OtherQuota("team-f", "team", {"configmaps": "900", "count/pods": "4"}),
    ]
    # team-c: its unlabelled quota named dynquota is reported (and left alone), as the operator does
    assert {r.namespace for r in plan.rows} == {"team-a", "team-c", "team-f"}
    (f_pods,) = [r for r in plan.rows if (r.namespace, r.resource) == ("team-f", "pods")]
    assert f_pods.why == (
        "create pods 10: usage 0, buffer 40%, at minimum 10; lower limit in quota team: "
        "count/pods=4 (the lowest limit wins)"
    )
    dry, _ = Settings.from_environment({"DYNQUOTA_DRY_RUN": "true"})
    plan = build_plan(snap, dry, now=NOW)
    assert (
        NotManaged("team-f", "dry run: operator.dryRun=true (decisions reported, no quota written)")
        in plan.not_managed
    )
    (f_pods,) = [r for r in plan.rows if (r.namespace, r.resource) == ("team-f", "pods")]
    assert (f_pods.next, f_pods.why.split(":")[0]) == ("create", "dry run, not written")
    text = format_table(plan.rows)
    assert text.splitlines()[0].startswith("NAMESPACE")


def _compute_profile(minimum: str, maximum: str) -> dict[str, object]:
    return {
        "bufferPercent": 20,
        "minimum": minimum,
        "maximum": maximum,
        "upscaleCooldown": "5m",
        "downscaleCooldown": "1h",
    }


def _policy(name: str, label: str, dry_run: bool = False, **spec: object) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {"matchLabels": {"x": label}},
            "dryRun": dry_run,
            "resources": {
                "requests.cpu": _compute_profile("500m", "2"),
                "requests.memory": _compute_profile("1Gi", "4Gi"),
            },
            **spec,
        },
    }


def _limit_range(
    namespace: str, name: str, owned: bool = False, **defaults: dict[str, str]
) -> dict[str, object]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "dynquota"} if owned else {},
        },
        "spec": {"limits": [{"type": "Container", **defaults}]},
    }


HELD_CPU = (
    "NeedsDefaultRequests: requests.cpu not added to the quota: with a quota on it the "
    "apiserver refuses every pod whose containers do not all declare a cpu request, and this "
    "namespace has no LimitRange (type Container) with defaultRequest.cpu; add one and dynquota "
    "adds the key"
)
HELD_MEMORY = HELD_CPU.replace("cpu", "memory")


def test_plan_holds_compute_keys_without_a_limit_range_default_as_the_operator_does() -> None:
    """The LimitRanges of the snapshot decide, as in the reconcile: a compute key no
    LimitRange (type Container) gives a default is ``held`` (NeedsDefaultRequests), the
    companion LimitRange counts once in place or about to be written, and its state is
    listed."""
    from dynquota.operator.plan import build_plan
    from dynquota.operator.plan_model import Companion
    from dynquota.settings import Settings

    memory = {"defaultRequests": {"memory": "64Mi"}}
    snap = ClusterSnapshot(
        kube_system={"metadata": {"name": "kube-system", "annotations": {}}},
        namespaces=[
            ns("none", x="plain"),
            ns("other-lr", x="plain"),
            ns("left", x="plain"),
            ns("new", x="companion"),
            ns("ok", x="companion"),
            ns("stale", x="companion"),
            ns("foreign", x="companion"),
            ns("audit", x="audit"),
            ns("frozen", x="broken"),
        ],
        policies=[
            _policy("plain", "plain"),
            _policy("companion", "companion", **memory),
            _policy("audit", "audit", dry_run=True, **memory),
            {  # invalid (a key nothing counts): its namespaces are frozen, nothing is written
                "metadata": {"name": "broken"},
                "spec": {
                    "namespaceSelector": {"matchLabels": {"x": "broken"}},
                    "resources": {"nvidia.com/gpu": {"maximum": 1}},
                },
            },
        ],
        quotas=[],
        limit_ranges=[
            _limit_range("other-lr", "defaults", defaultRequest={"cpu": "100m"}),
            _limit_range("left", "dynquota", owned=True, defaultRequest={"cpu": "50m"}),
            _limit_range("ok", "dynquota", owned=True, defaultRequest={"memory": "64Mi"}),
            _limit_range("stale", "dynquota", owned=True, defaultRequest={"memory": "32Mi"}),
            _limit_range("foreign", "dynquota", defaultRequest={"cpu": "100m"}),
            _limit_range("frozen", "dynquota", owned=True, defaultRequest={"cpu": "50m"}),
        ],
    )
    plan = build_plan(snap, Settings(), now=NOW)
    rows = {(r.namespace, r.resource): r for r in plan.rows}
    shown = {
        (r.namespace, r.resource): (r.next, r.target)
        for r in plan.rows
        if r.resource.startswith("requests.")
    }
    # a status-driven key has no usage before its quota exists: no target (created at minimum)
    assert shown == {
        ("none", "requests.cpu"): ("held", None),
        ("none", "requests.memory"): ("held", None),
        ("other-lr", "requests.cpu"): ("create", None),  # another LimitRange's default counts
        ("other-lr", "requests.memory"): ("held", None),
        ("left", "requests.cpu"): ("create", None),  # a left-over companion's default counts
        ("left", "requests.memory"): ("held", None),
        ("new", "requests.cpu"): ("held", None),
        ("new", "requests.memory"): ("create", None),  # the companion is created first
        ("ok", "requests.cpu"): ("held", None),
        ("ok", "requests.memory"): ("create", None),
        ("stale", "requests.cpu"): ("held", None),
        ("stale", "requests.memory"): ("create", None),  # patched first
        ("foreign", "requests.cpu"): ("create", None),  # its own default counts
        ("foreign", "requests.memory"): ("held", None),  # never written: held
        ("audit", "requests.cpu"): ("held", None),
        ("audit", "requests.memory"): ("held", None),  # dry run writes no LimitRange
    }
    held = rows[("none", "requests.cpu")]
    assert (held.tally, held.status_used, held.hard, held.target, held.why) == (
        None,
        None,
        None,
        None,
        HELD_CPU,
    )
    assert rows[("none", "requests.memory")].why == HELD_MEMORY
    # the held keys' notes stay on their own rows
    assert rows[("none", "pods")].why == "create pods 10: usage 0, buffer 40%, at minimum 10"
    assert rows[("new", "requests.memory")].why == (
        "create requests.memory 1Gi: usage unknown yet, buffer 20%"
    )
    audit_why = "dry run: would create it; compute keys held"
    assert plan.companions == [
        Companion("audit", "not written", "defaultRequest memory=64Mi", audit_why),
        Companion(
            "foreign",
            "foreign",
            "defaultRequest memory=64Mi",
            "a LimitRange dynquota without the label app.kubernetes.io/managed-by=dynquota "
            "exists: never written (Warning ForeignLimitRange); the compute keys its own "
            "defaults do not cover stay held",
        ),
        Companion(
            "left",
            "left over",
            "defaultRequest cpu=50m",
            "dynquota's, but no policy asks for defaults here; dynquota never deletes it "
            "(dynquota cleanup --limit-ranges removes it)",
        ),
        Companion(
            "new",
            "create",
            "defaultRequest memory=64Mi",
            "the operator writes it, then adds the compute keys it covers",
        ),
        Companion("ok", "in place", "defaultRequest memory=64Mi", "holds the policy's defaults"),
        Companion(
            "stale",
            "patch",
            "defaultRequest memory=64Mi",
            "its defaults differ from the policy's: patched in place",
        ),
    ]
    text = format_plan(plan.only(["new"]))
    assert text.splitlines()[-3:] == [
        "companion LimitRanges (dynquota; they give the compute keys their default requests):",
        "NAMESPACE  STATE   DEFAULTS                    WHY",
        "new        create  defaultRequest memory=64Mi  the operator writes it, then adds the "
        "compute keys it covers",
    ]
    engaged = ClusterSnapshot(
        {"metadata": {"name": "kube-system", "annotations": {"dynquota.io/kill-switch": "true"}}},
        snap.namespaces,
        snap.policies,
        [],
        limit_ranges=snap.limit_ranges,
    )
    (new,) = build_plan(engaged, Settings(), now=NOW).only(["new"]).companions
    assert (new.state, new.why) == (
        "not written",
        "kill switch engaged: would create it once released",
    )


# -- budgets (issue #13) ---------------------------------------------------------------------


def budgeted_quota(namespace: str, hard: int, used: int) -> dict[str, object]:
    """A managed quota whose pods slice a budget wrote (its record says so), enforced."""
    return {
        "metadata": {
            "name": "dynquota",
            "namespace": namespace,
            "resourceVersion": "7",
            "labels": {"app.kubernetes.io/managed-by": "dynquota"},
            "annotations": {
                "dynquota.io/policy": "p",
                "dynquota.io/hard.pods": str(hard),
                "dynquota.io/profile.pods": "bufferPercent=40,minimum=10,maximum=100",
                "dynquota.io/last-upscale.pods": "2027-01-15T07:00:00Z",
                "dynquota.io/last-change.pods": "2027-01-15T07:00:00Z",
            },
        },
        "spec": {"hard": {"pods": str(hard)}},
        "status": {"hard": {"pods": str(hard)}, "used": {"pods": str(used)}},
    }


def budget(name: str, pods: int) -> dict[str, object]:
    return {
        "metadata": {"name": name, "uid": name, "generation": 1},
        "spec": {"hard": {"pods": pods}},
    }


def budget_snapshot() -> ClusterSnapshot:
    marked = budgeted_quota("team-c", 12, 12)
    marked["metadata"]["annotations"]["dynquota.io/budget"] = "tenant"  # type: ignore[index]
    return ClusterSnapshot(
        kube_system={"metadata": {"name": "kube-system", "annotations": {}}},
        namespaces=[
            ns("team-a", **{"dynquota.io/budget": "tenant"}),
            ns("team-b", **{"dynquota.io/budget": "tenant"}),
            ns("team-c", **{"dynquota.io/budget": "extra"}),  # relabelled tenant -> extra
        ],
        policies=[POLICY],
        quotas=[
            budgeted_quota("team-a", 20, 18),
            budgeted_quota("team-b", 10, 4),
            marked,
        ],
        tally={("team-a", "pods"): 18, ("team-b", "pods"): 4, ("team-c", "pods"): 12},
        budgets=[budget("tenant", 42), budget("extra", 50)],
    )


def test_plan_groups_namespaces_by_budget_with_the_operators_allocation() -> None:
    plan = build_plan(budget_snapshot(), Settings(), now=NOW)
    extra, tenant = plan.budgets
    assert (extra.name, extra.leaving) == ("extra", ())
    (extra_pods,) = extra.keys
    # team-c, relabelled into extra, still carries tenant's mark: tenant holds its 12
    assert [(m.namespace, m.grant, m.next) for m in extra_pods.members] == [("team-c", 12, 17)]
    (pods,) = tenant.keys
    assert tenant.leaving == ("team-c",)
    # team-a: 18 used, its policy wants ceil(18 * 1.4) = 26; team-b: 4 used, keeps its minimum
    # 10. Granted 20 + 10 + 12 held = 42 = the budget: max-min fair targets above the usage
    # (8 room: 4 each) are 22 and 8, so team-b is shrunk to 8 (never below its 4 used) and
    # team-a waits until the controller shows the shrink (shrink, observe, grow)
    assert (pods.key, pods.hard, pods.granted, pods.granted_after, pods.used, pods.free) == (
        "pods", 42, 42, 42, 22, 0,
    )  # fmt: skip
    assert pods.state == "Rebalancing"
    assert pods.members == (
        BudgetMember("team-a", 20, 20, 18, 26, None, "waiting for 6"),
        BudgetMember("team-b", 10, 10, 4, 10, 8, "waiting for 2"),
    )
    rows = {(r.namespace, r.resource): r for r in plan.rows}
    assert rows[("team-a", "pods")].target == 26
    # the reconcile's patch adds configmaps only: the budget's task writes the pods slice
    assert rows[("team-a", "configmaps")].next == "patch"
    assert rows[("team-a", "pods")].why.startswith("sliced by budget tenant: ")
    assert rows[("team-c", "pods")].why.startswith("sliced by budget extra: ")
    text = format_plan(plan)
    budgets = text[text.index("budgets (") :].splitlines()
    assert budgets[1:] == [
        "budget extra pods: hard 50, granted 12, used 12, free 38; Rebalancing",
        "  NAMESPACE  GRANT  ENFORCED  USED  DEMAND  NEXT  NOTE",
        "  team-c     12     12        12    17      17",
        "budget tenant pods: hard 42, granted 42, used 22, free 0; Rebalancing",
        "  NAMESPACE  GRANT  ENFORCED  USED  DEMAND  NEXT  NOTE",
        "  team-a     20     20        18    26      -     waiting for 6",
        "  team-b     10     10        4     10      8     waiting for 2",
        "budget tenant: holding the slices of team-c (their quota still carries its mark; "
        "released when the mark changes)",
    ]
    only = plan.only(["team-b"])
    assert [b.name for b in only.budgets] == ["tenant"]
    assert [m.namespace for m in only.budgets[0].keys[0].members] == ["team-b"]


def test_a_hard_not_yet_enforced_is_named_with_what_admission_enforces() -> None:
    """kube-controller-manager down or slow: spec.hard 35 written, status.hard still 20 (what
    admission checks); the row says so, and a key absent from status.hard is 'not enforced'."""
    lagging = snapshot()
    state = dict(lagging.quotas[0]["metadata"]["annotations"])  # type: ignore[index]
    state["dynquota.io/hard.pods"] = "35"
    written = quota("team-a", {"pods": "35", "configmaps": "50"}, **state)
    written["status"] = {"hard": {"pods": "20"}, "used": {"pods": "25", "configmaps": "1"}}
    lagging.quotas[0] = written
    rows = {(r.namespace, r.resource): r for r in compute_plan(lagging, now=NOW + 300)}
    pods, configmaps = rows[("team-a", "pods")], rows[("team-a", "configmaps")]
    assert pods.hard == 35
    assert pods.why.endswith(
        "; enforced 20: status.hard, the quota controller has not copied spec.hard yet"
    )
    assert configmaps.why.endswith(
        "; not enforced yet: status.hard lacks it (the quota controller has not copied it)"
    )
    settled = {(r.namespace, r.resource): r for r in compute_plan(snapshot(), now=NOW + 300)}
    assert "enforced" not in settled[("team-a", "pods")].why


def test_plan_says_which_unmanaging_deletes_the_brake_would_hold() -> None:
    """Four managed quotas and no policy left (the CRD deleted): an operator starting now
    lets two deletes pass (share 0.5) and holds the other two; the plan says so."""
    teams = [f"team-{i}" for i in range(4)]
    snap = ClusterSnapshot(
        kube_system={"metadata": {"name": "kube-system", "annotations": {}}},
        namespaces=[ns(t) for t in teams],
        policies=[],
        quotas=[quota(t, {"pods": "20"}, **{"dynquota.io/policy": "p"}) for t in teams],
        tally={},
    )
    settings, _ = Settings.from_environment({"DYNQUOTA_UNMANAGE_BRAKE_SHARE": "0.5"})
    rows = build_plan(snap, settings, now=NOW).rows
    nexts = {r.namespace: r.next for r in rows if r.resource == "pods"}
    assert nexts == {"team-0": "delete", "team-1": "delete", "team-2": "held", "team-3": "held"}
    (held,) = [r for r in rows if (r.namespace, r.resource) == ("team-2", "pods")]
    assert held.why.startswith("held by the brake on mass un-management (")
    assert "more than 50% of the managed namespaces would lose their quota; confirm with " in (
        held.why
    )
    off, _ = Settings.from_environment({"DYNQUOTA_UNMANAGE_BRAKE_SHARE": "1"})
    rows = build_plan(snap, off, now=NOW).rows
    assert {r.next for r in rows if r.resource == "pods"} == {"delete"}


def test_plan_shows_the_releases_of_a_policy_switched_to_dry_run() -> None:
    """README-only attack: the policy switched to dryRun, plan said `nothing` while the
    operator then deleted half of the quotas and held the rest. Now: the releases are deletes,
    braked like any un-management (the operator-wide dry run is not)."""
    teams = [f"team-{i}" for i in range(4)]
    dry_policy = {**POLICY, "spec": {**POLICY["spec"], "dryRun": True}}  # type: ignore[dict-item]
    snap = ClusterSnapshot(
        kube_system={"metadata": {"name": "kube-system", "annotations": {}}},
        namespaces=[ns(t) for t in teams],
        policies=[dry_policy],
        quotas=[quota(t, {"pods": "20"}, **{"dynquota.io/policy": "p"}) for t in teams],
        tally={},
    )
    settings, _ = Settings.from_environment({})
    rows = [r for r in build_plan(snap, settings, now=NOW).rows if r.resource == "pods"]
    assert [r.next for r in rows] == ["delete", "delete", "held", "held"]
    assert rows[0].why.startswith("released (policy p is in dry run: dynquota enforces nothing")
    operator_dry, _ = Settings.from_environment({"DYNQUOTA_DRY_RUN": "true"})
    rows = [r for r in build_plan(snap, operator_dry, now=NOW).rows if r.resource == "pods"]
    assert [r.next for r in rows] == ["delete"] * 4
    assert rows[0].why.startswith("released (operator.dryRun is in dry run")


def test_a_namespace_warning_is_said_once_and_no_stray_full_stop() -> None:
    """team-b's managed label has no effect: said on its first row only, not on every key's;
    a reason ending in a full stop takes the enforcement note without '.;'."""
    labelled = snapshot()
    labelled.namespaces[2] = ns("team-b", **{"dynquota.io/managed": "no"})
    rows = [r for r in compute_plan(labelled, now=NOW) if r.namespace == "team-b"]
    assert len(rows) == 2
    assert [r.why.count('warning: label dynquota.io/managed="no"') for r in rows] == [1, 0]
    team_a = [r for r in compute_plan(labelled, now=NOW) if r.namespace == "team-a"]
    assert [r.why.count("warning: pods at its limit") for r in team_a] == [1, 0]
    assert all(".;" not in r.why for r in compute_plan(labelled, now=NOW))


def test_plan_shows_the_namespaces_in_the_apf_tarpit() -> None:
    """The tarpit FlowSchema's rules (read by ``dynquota plan`` when the release runs the
    governor) name the namespaces held, each with the writeRate governing it now."""
    from dynquota.operator.plan_model import Tarpitted
    from dynquota.policy.churn import tarpit_rules

    snap = snapshot()
    snap.policies = [
        {**POLICY, "spec": {**POLICY["spec"], "writeRate": {"limit": 300, "window": "1m"}}}
    ]
    snap.tarpit_rules = tarpit_rules(["team-a", "team-b"], ["pods", "configmaps"], "dq")
    snap.tarpit_rules[0]["resourceRules"][0]["namespaces"].append("kube-public")  # by hand
    plan = build_plan(snap, Settings(namespace="dq"), now=NOW)
    assert plan.tarpitted == [
        Tarpitted("kube-public", "no writeRate governs it now: the operator takes it out"),
        Tarpitted(
            "team-a",
            "writeRate 300 writes in 60 s, released after 300 s at or below 150 (Event "
            "Tarpitted: why)",
        ),
        Tarpitted(
            "team-b",
            "writeRate 300 writes in 60 s, released after 300 s at or below 150 (Event "
            "Tarpitted: why)",
        ),
    ]
    text = format_plan(plan)
    assert "in the APF tarpit (3 namespaces;" in text
    assert plan.only(["team-a"]).tarpitted == plan.tarpitted[1:2]
    assert build_plan(snapshot(), Settings(), now=NOW).tarpitted == []
