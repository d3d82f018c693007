"""DaemonSet pods for new nodes (issue 26): the room node growth asks for, and decide() raising
to it at once within the maximum, the cooldown left running; nothing for a DaemonSet newer
than the nodes, nor beyond the nodes just created."""

from __future__ import annotations

from dynquota.policy import DEFAULT_PROFILES, PODS, Decision, Governance, decide
from dynquota.policy.daemons import NODE_GROWTH_WINDOW, DaemonShortfall, new_grants, node_growth
from dynquota.policy.models import ResourceProfile

from .test_decide import STARTED, T0, settled

AGENT = DaemonShortfall("agent", created=T0 - 86400, missing=20,
                        pod_charge={"pods": 1, "requests.cpu": 100})  # fmt: skip


def test_the_demand_is_the_pods_of_nodes_newer_than_the_daemonset() -> None:
    nodes = [T0 - 86400 * 2] * 10 + [T0 - 30] * 20  # 10 old nodes, 20 new ones
    assert node_growth([AGENT], nodes, T0) == {"pods": 20, "requests.cpu": 2000}
    # short by fewer than the new nodes: what it is short
    short = DaemonShortfall("agent", T0 - 86400, 5, {"pods": 1})
    assert node_growth([short], nodes, T0) == {"pods": 5}


def test_a_daemonset_newer_than_the_nodes_gets_nothing() -> None:
    """A new workload (a DaemonSet created after the nodes) is sized by the usual steps."""
    fresh = DaemonShortfall("fresh", created=T0 - 10, missing=30, pod_charge={"pods": 1})
    nodes = [T0 - 30] * 20
    assert node_growth([fresh], nodes, T0) == {}


def test_only_nodes_within_the_window_count() -> None:
    """Re-targeting a DaemonSet at more existing nodes gains nothing beyond nodes just made."""
    old = [T0 - NODE_GROWTH_WINDOW - 1] * 50
    assert node_growth([AGENT], old, T0) == {}
    assert node_growth([AGENT], old + [T0 - 5] * 3, T0) == {"pods": 3, "requests.cpu": 300}
    assert node_growth([], [T0 - 5] * 3, T0) == {}


PROFILE = ResourceProfile.model_validate(
    {
        "bufferPercent": 40,
        "minimum": 10,
        "maximum": 100,
        "upscaleCooldown": "1h",
        "downscaleCooldown": "1h",
    }
)
GOV = Governance.managed("default", {**DEFAULT_PROFILES, PODS: PROFILE})


def _decide(quota_pods: int, used: int, floor: int, now: float) -> Decision:
    return decide(
        governance=GOV,
        usage={PODS: used, "configmaps": 0},
        peak={PODS: used},
        quota=settled(quota_pods, at=0, pods_profile=PROFILE),
        kill_switch=False,
        now=now,
        started_at=STARTED,
        daemon_floor={PODS: floor},
    )


def test_node_growth_raises_at_once_in_the_cooldown_without_restarting_it() -> None:
    d = _decide(14, 10, 30, T0 + 60)  # the 1 h cooldown runs until T0 + 3600
    assert d.hard[PODS] == 30
    assert d.reasons == (
        "upscale pods 14->30: room for the DaemonSet pods of new nodes (30 with usage 10), "
        "raised at once (node growth; the upscale cooldown keeps running)",
    )
    assert "dynquota.io/last-upscale.pods" not in d.set_annotations
    assert d.set_annotations["dynquota.io/hard.pods"] == "30"


def test_node_growth_stops_at_the_maximum_and_leaves_room_alone() -> None:
    d = _decide(60, 60, 130, T0 + 60)
    assert d.hard[PODS] == 100
    assert d.reasons[0].endswith(", at maximum 100")
    # the buffer already leaves room for the new nodes' pods: nothing changes
    d = _decide(40, 10, 30, T0 + 60)
    assert [c for c in d.changes if c.resource == PODS] == []
    # no demand: the cooldown holds the raise; a floor usage grew into adds nothing
    d = _decide(14, 14, 0, T0 + 60)
    assert [c for c in d.changes if c.resource == PODS] == []
    d = _decide(14, 14, 14, T0 + 60)
    assert [c for c in d.changes if c.resource == PODS] == []


def test_new_grants_are_the_new_nodes_not_granted_before() -> None:
    nodes = {"old": T0 - 86400 * 2, "n1": T0 - 30, "n2": T0 - 20, "n3": T0 - 10}
    daemon = DaemonShortfall("agent", created=T0 - 86400, missing=20)
    assert new_grants(daemon, nodes, set(), T0) == ["n1", "n2", "n3"]
    assert new_grants(daemon, nodes, {"n1", "n2"}, T0) == ["n3"]
    assert new_grants(daemon, nodes, {"n1", "n2", "n3"}, T0) == []
    # at most what it is short; nothing for a DaemonSet newer than the nodes
    assert new_grants(DaemonShortfall("a", T0 - 86400, 1), nodes, set(), T0) == ["n1"]
    assert new_grants(DaemonShortfall("late", T0 - 15, 9), nodes, set(), T0) == ["n3"]
    # creationTimestamps have whole seconds: nodes made in the DaemonSet's second count
    same = {"n1": T0 - 10, "n2": T0 - 10, "n3": T0 - 9}
    assert new_grants(DaemonShortfall("a", T0 - 10, 9), same, set(), T0) == ["n1", "n2", "n3"]
    assert node_growth([DaemonShortfall("a", T0 - 10, 9, {"pods": 1})], same.values(), T0) == {
        "pods": 3
    }


def test_a_downscale_is_held_at_the_floor_not_turned_into_an_upscale() -> None:
    d = decide(
        governance=GOV,
        usage={PODS: 5, "configmaps": 0},
        peak={PODS: 5},
        quota=settled(40, at=-7200, pods_profile=PROFILE),
        kill_switch=False,
        now=T0 + 60,
        started_at=STARTED,
        daemon_floor={PODS: 30},
    )
    pods = [c for c in d.changes if c.resource == PODS]
    assert d.hard[PODS] == 30
    assert [c.kind for c in pods] == ["downscale"]
    assert pods[0].reason.endswith(", held at 30 for the DaemonSet pods of new nodes")
