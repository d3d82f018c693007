"""Which namespaces an operator found at its start (adopted) and which were born while it ran
(:class:`dynquota.operator.decision.FoundAtStart`), as the operator's reconcile uses them."""

from __future__ import annotations

from dynquota.operator.decision import FoundAtStart
from dynquota.policy import NamespaceInfo

from .test_reconcile import T0, World, namespace, policy


def test_only_the_first_list_is_found_at_start() -> None:
    found = FoundAtStart()
    found.seen("old", listing=True)
    found.synced()
    found.seen("new", listing=False)  # the watch
    found.seen("gap", listing=True)  # a relist after a watch gap: created while it ran
    assert found.names == {"old"}
    assert found.born_at(NamespaceInfo("old", created=T0)) is None
    assert found.born_at(NamespaceInfo("new", created=T0)) == T0
    assert found.born_at(NamespaceInfo("gap", created=T0)) == T0
    assert found.born_at(None) is None


async def test_a_namespace_found_at_start_is_adopted_one_born_later_is_capped() -> None:
    """Both hold 200 pods against a maximum of 100 (the reconcile test's policy) when their
    quota is created, 3 s after their namespaces were."""
    world = World()
    world.op.on_policy(None, policy())
    created = "2027-01-15T07:59:57Z"  # T0 - 3 s
    listed = namespace("listed")
    listed["metadata"]["creationTimestamp"] = created
    world.op.on_namespace(None, listed)  # the first list
    world.op.found_at_start.synced()
    born = namespace("born")
    born["metadata"]["creationTimestamp"] = created
    world.op.on_namespace("ADDED", born)
    for ns in ("listed", "born"):
        world.usage.counts[(ns, "pods")] = 200
        await world.reconcile(ns)
    assert world.quotas.objects["listed"]["spec"]["hard"]["pods"] == "200"
    assert world.quotas.objects["born"]["spec"]["hard"]["pods"] == "100"
