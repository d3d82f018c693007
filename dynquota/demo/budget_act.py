"""The demo's tenant-budget act (issue #13, ``docs/budgets.md``): two teams' namespaces under
one QuotaBudget, one of them a runaway.

``demo-team-a`` holds 20 ConfigMaps (21 with ``kube-root-ca.crt``: its policy asks for
``ceil(21 * 1.4) = 30``); ``demo-team-b`` mints ConfigMaps until quota admission refuses one,
waits for the next grant, and mints again. The budget holds 60 ConfigMaps for both. While the
demands fit, the runaway is granted its policy's steps; once they do not, the room above both
teams' usage is shared max-min fairly: team-a's slice is shrunk towards its usage, never below
it, and the runaway gets only what is free. The act ends when the operator's own allocation
(:func:`dynquota.policy.budget.allocate`, on the quotas as they are) has no room left for the
runaway. Every number printed is read from the cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dynquota.demo.watch import DemoWatch
from dynquota.names import BUDGET_KIND, BUDGET_LABEL, BUDGET_PLURAL, GROUP, VERSION
from dynquota.policy.budget import Slice, allocate
from dynquota.testing.operator import fill
from dynquota.testing.wait import wait_until

__all__ = ["BUDGET", "STEADY", "STEADY_CONFIGMAPS", "TEAM_A", "TEAM_B", "budget_act"]

TEAM_A, TEAM_B = "demo-team-a", "demo-team-b"
BUDGET = 60
"""ConfigMaps the QuotaBudget ``demo-tenant`` holds for both teams."""
STEADY_CONFIGMAPS = 20
"""ConfigMaps team-a creates (it has ``kube-root-ca.crt`` too)."""
STEADY = STEADY_CONFIGMAPS + 1
TENANT = {"demo.dynquota.io/tenant": "demo"}
POLICY = {
    "bufferPercent": 40,
    "minimum": 10,
    "maximum": 500,
    "upscaleCooldown": "0s",  # the budget, not a cooldown, is what holds the runaway here
    "downscaleCooldown": "1h",
}


def _configmaps(quota: Any, part: str) -> int | None:
    """``spec.hard``/``status.hard``/``status.used`` ConfigMaps of ``quota`` (``part``:
    ``spec``, ``hard`` or ``used``), or ``None``."""
    if quota is None:
        return None
    values = quota.spec.hard if part == "spec" else getattr(quota.status, part)
    text = (values or {}).get("configmaps")
    return None if text is None else int(text)


def budget_act(demo: DemoWatch) -> None:
    """Run the act on ``demo``'s cluster and print its lines (``6. ...``). Raises
    ``WaitTimeoutError`` when a step does not happen in time, ``RuntimeError`` if team-a's
    slice ever goes below its usage."""
    c, show = demo.c, demo.show
    for ns in (TEAM_A, TEAM_B):
        c.core.create_namespace({"metadata": {"name": ns}})
    # team-a's ConfigMaps exist before any quota: the team was there before the budget
    wait_until(
        lambda: c.core.list_namespaced_config_map(TEAM_A).items, "kube-root-ca.crt", timeout=30
    )
    for i in range(STEADY_CONFIGMAPS):
        c.core.create_namespaced_config_map(TEAM_A, {"metadata": {"name": f"steady-{i}"}})
    c.policy("demo-teams", TENANT, configmaps=POLICY)
    c.custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        BUDGET_PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": BUDGET_KIND,
            "metadata": {"name": "demo-tenant"},
            "spec": {"hard": {"configmaps": BUDGET}},
        },
    )
    # the policy's label and the budget's (membership is the label dynquota.io/budget)
    for ns in (TEAM_A, TEAM_B):
        labels = {**TENANT, BUDGET_LABEL: "demo-tenant"}
        c.core.patch_namespace(ns, {"metadata": {"labels": labels}})
    show.line(
        "demo",
        f"6. QuotaBudget demo-tenant: {BUDGET} ConfigMaps for {TEAM_A} ({STEADY} ConfigMaps, "
        f"steady) and {TEAM_B}; policy demo-teams: buffer 40%, no upscale cooldown",
    )

    def enforced(ns: str) -> int:
        return _configmaps(c.quota(ns), "hard") or 0

    def marked(ns: str) -> bool:
        quota = c.quota(ns)
        annotations = (quota.metadata.annotations or {}) if quota else {}
        return bool(annotations.get("dynquota.io/budget") == "demo-tenant")

    # both slices enforced: team-a at its demand 30, team-b at the minimum 10, and marked as
    # the budget's (the chart's budget guard refuses creates in a member until its slice is,
    # when it is installed)
    wait_until(
        lambda: enforced(TEAM_A) == 30 and enforced(TEAM_B) == 10
        and marked(TEAM_A) and marked(TEAM_B),
        "both slices enforced and marked",
        timeout=60,
    )  # fmt: skip
    a_hards = [enforced(TEAM_A)]
    b_hards = [enforced(TEAM_B)]
    created = 0
    granted = [_granted(c)]
    while True:
        created += fill(_minter(c, created), 1000)  # until admission refuses (403 exceeded quota)
        team_a = c.quota(TEAM_A)
        a_used = _configmaps(team_a, "used") or 0
        if a_used != STEADY:
            raise RuntimeError(f"{TEAM_A} uses {a_used} ConfigMaps, not {STEADY}")
        held = b_hards[-1]
        # the operator's own allocation on the quotas now: is there room for the runaway?
        slices = [
            Slice(TEAM_A, _configmaps(team_a, "spec"), enforced(TEAM_A), a_used, 30),
            Slice(TEAM_B, held, held, held, 10 * BUDGET),  # a runaway: wants more than any
        ]
        if allocate(BUDGET, slices).targets[TEAM_B] <= held:
            break
        wait_until(_above(enforced, TEAM_B, held), "the runaway's next grant", timeout=60)
        b_hards.append(enforced(TEAM_B))
        a_hards.append(enforced(TEAM_A))
        granted.append(_granted(c))
        if min(a_hards) < STEADY:
            raise RuntimeError(f"{TEAM_A}'s slice went below its usage: {a_hards}")
    a_final, b_final = enforced(TEAM_A), enforced(TEAM_B)
    show.line(
        "demo",
        f"6. {TEAM_B}: {created} ConfigMaps, then 403 exceeded quota at its slice: "
        + " -> ".join(map(str, b_hards))
        + " (only the free budget)",
    )
    show.line(
        "demo",
        f"6. {TEAM_A}: slice " + " -> ".join(map(str, _steps(a_hards))) + f", usage {STEADY} "
        "throughout: shrunk towards its usage as the room was shared, never below it",
    )
    show.line(
        "demo",
        f"6. budget {BUDGET}: {TEAM_A} {a_final} + {TEAM_B} {b_final} = {a_final + b_final} "
        f"enforced; the runaway gets no more (granted at each step, max(spec.hard, status.hard) "
        f"from one LIST: at most {max(granted)})",
    )


def _granted(c: Any) -> int:
    """Both teams' ``max(spec.hard, status.hard)`` ConfigMaps summed, from one LIST of the
    managed quotas (a snapshot: two GETs are not)."""
    listed = c.core.list_resource_quota_for_all_namespaces(field_selector="metadata.name=dynquota")
    return sum(
        max(_configmaps(q, "spec") or 0, _configmaps(q, "hard") or 0)
        for q in listed.items
        if q.metadata.namespace in (TEAM_A, TEAM_B)
    )


def _above(read: Callable[[str], int], ns: str, value: int) -> Callable[[], bool]:
    """Whether ``read(ns)`` is above ``value`` now (a condition for ``wait_until``)."""
    return lambda: read(ns) > value


def _steps(values: list[int]) -> list[int]:
    """``values`` without repeats in a row."""
    return [v for i, v in enumerate(values) if i == 0 or v != values[i - 1]]


def _minter(c: Any, first: int) -> Any:
    """A create of ConfigMap ``run-<n>`` in team-b, ``n`` from ``first``, moving on only once
    a create succeeded (a create :func:`fill` retries keeps its name)."""
    number = [first]

    def one() -> None:
        c.core.create_namespaced_config_map(
            TEAM_B, {"metadata": {"name": f"run-{number[0]}"}, "data": {"i": str(number[0])}}
        )
        number[0] += 1

    return one
