"""What the operator remembers of a namespace's past (:class:`dynquota.operator.decision.Lineage`):
which namespaces it found at its start (adopted) and which were born while it ran, and the hard
a re-created quota is capped at, as the operator's reconcile uses them."""

from __future__ import annotations

from dynquota.operator.decision import Lineage
from dynquota.policy import NamespaceInfo
from dynquota.testing.wait import async_wait_until

from .fakes import T0, World, namespace, policy


def test_only_the_first_list_is_lineage() -> None:
    found = Lineage()
    found.seen("old", listing=True)
    found.synced()
    found.seen("new", listing=False)  # the watch
    found.seen("gap", listing=True)  # a relist after a watch gap: created while it ran
    assert found.names == {"old"}
    assert found.born_at(NamespaceInfo("old", created=T0)) is None
    assert found.born_at(NamespaceInfo("new", created=T0)) == T0
    assert found.born_at(NamespaceInfo("gap", created=T0)) == T0
    assert found.born_at(None) is None


async def test_a_namespace_lineage_is_adopted_one_born_later_is_capped() -> None:
    """Both hold 200 pods against a maximum of 100 (the reconcile test's policy) when their
    quota is created, 3 s after their namespaces were."""
    world = World()
    world.op.on_policy(None, policy())
    created = "2027-01-15T07:59:57Z"  # T0 - 3 s
    listed = namespace("listed")
    listed["metadata"]["creationTimestamp"] = created
    world.op.on_namespace(None, listed)  # the first list
    world.op.lineage.synced()
    born = namespace("born")
    born["metadata"]["creationTimestamp"] = created
    world.op.on_namespace("ADDED", born)
    for ns in ("listed", "born"):
        world.usage.counts[(ns, "pods")] = 200
        await world.reconcile(ns)
    assert world.quotas.objects["listed"]["spec"]["hard"]["pods"] == "200"
    assert world.quotas.objects["born"]["spec"]["hard"]["pods"] == "100"


async def test_a_quota_recreated_after_the_kill_switch_is_capped_an_opted_back_one_adopted() -> (
    None
):
    """Both namespaces (found at start, maximum 100) are sized at 20 pods; the kill switch
    deletes their quotas and both grow to 200 pods meanwhile; team-b is opted out and back in
    before the release. team-a's growth got in while no quota stood: capped at
    max(hard before, maximum); team-b's was let grow by an admin: adopted, like an install."""
    world = World()
    world.op.on_policy(None, policy())
    for ns in ("team-a", "team-b"):
        world.op.on_namespace(None, namespace(ns))
    world.op.lineage.synced()
    for ns in ("team-a", "team-b"):
        world.usage.counts[(ns, "pods")] = 14
        await world.reconcile(ns)
        assert world.quotas.hard(ns)["pods"] == "20"
    kube_system = namespace("kube-system", rv=5, annotations={"dynquota.io/kill-switch": "true"})
    world.op.on_namespace("MODIFIED", kube_system)
    await async_wait_until(lambda: not world.quotas.objects, "managed quotas deleted", timeout=5)
    for ns in ("team-a", "team-b"):
        world.usage.counts[(ns, "pods")] = 200
    world.op.on_namespace("MODIFIED", namespace("team-b", {"dynquota.io/managed": "false"}, rv=2))
    await world.reconcile("team-b")
    world.op.on_namespace("MODIFIED", namespace("team-b", rv=3))
    world.op.on_namespace("MODIFIED", namespace("kube-system", rv=6))
    assert world.op.kill_switch is False
    for ns in ("team-a", "team-b"):
        await world.reconcile(ns)
    assert world.quotas.hard("team-a")["pods"] == "100"
    assert world.quotas.hard("team-b")["pods"] == "200"
    assert world.op.lineage.quotas["team-a"].state().hard["pods"] == 100
    await world.op.stop_background()
