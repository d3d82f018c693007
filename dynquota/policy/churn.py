"""The write-rate governor's decision: put a namespace in the APF tarpit, hold it there, or
let it out (Pure; issue 32, part 2).

A policy's ``writeRate`` (:class:`WriteRate`: ``limit`` writes per ``window`` seconds, released
after ``quietPeriod`` seconds of quiet) is judged per namespace from what the operator already
watches: creates and deletes of the watched kinds (pods, ConfigMaps), as
:class:`ChurnSample` counts, and whether the managed quota is held at its maximum while creates
are still being refused (a runaway hammering a full quota: refused creates never reach a watch,
so the count alone would miss it). :func:`decide_churn` takes those, the namespace's
:class:`TarpitState` and ``now``, and returns a :class:`ChurnDecision`; it reads no clock and
does no I/O. Rules, in order:

1. **Pressure** = more than ``limit`` writes in the last ``window`` seconds, or the quota held
   at its maximum under refusals.
2. Not tarpitted: pressure -> ``engage``; otherwise ``none``.
3. Tarpitted: pressure, or more than ``limit // 2`` writes in the window -> ``hold``, and the
   quiet clock starts again. The release threshold is half the limit because the tarpit
   itself lowers what the watches see: a churner held at, say, 0.4 x its intent (measured:
   0.18-0.41 x with one share, docs/performance.md) must not look quiet the moment it is
   contained. A churner whose contained rate stays between half the limit and the limit stays
   in; one contained below half is let out after the quiet period and caught again within one
   window if it resumes: in the tarpit at least ``quietPeriod / (quietPeriod + window)`` of
   the time.
4. Tarpitted and quiet since ``quiet_since``: ``release`` once ``now - quiet_since >=
   quietPeriod``; until then ``hold`` with ``recheck_at`` = the release time.
5. History lost (the operator restarted): the quiet clock starts no earlier than
   ``started_at`` — losing history must never speed a release up, as it never speeds a
   downscale up. A namespace found tarpitted at start (its name is in the FlowSchema's rules)
   is held, not released, until it has been quiet for a quiet period since the start.
6. **A looser rule** (the policy edited while the namespace is held: ``rule`` is :func:`looser`
   than ``state.rule``, the one it was last judged by: a limit no smaller in a window no
   longer, one of them changed): judged by the new rule at once. Quiet by it (at most
   ``rule.limit // 2`` writes in its window, and at least one window of history since
   ``started_at``): ``release`` now, without waiting a quiet period; the administrator who
   raised the limit said that much churn is fine. Not quiet by it: rules 3-4 under the new
   rule. Half the new limit, not the limit, for rule 3's reason: what the watches see is the
   contained rate, and a churner let out at more than half its new limit is likely over it
   again within a window. A stricter rule, or one that changed only ``quietPeriod``, releases
   no sooner than rules 3-4 (a shorter ``quietPeriod`` shortens the wait by itself); so does a
   longer window, even with a limit larger in proportion: the counts of the longer window were
   not all kept (the governor keeps the current window's), and losing history must never speed
   a release up (rule 5). The rule a namespace found at start was engaged under is not known
   (``state.rule`` ``None``): no rule 6 until it was judged once. Less than a window since
   ``started_at``: held (rule 4) and judged by rule 6 again once there is.

The counts cover writes the watches saw, of the watched kinds only: churn of other kinds
(Secrets, Leases, a CRD's objects), updates and relists are out of the governor's sight, and so
are refused requests. Times are seconds (any one clock: the operator passes monotonic time and
keeps the epoch only to show).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = [
    "TARPIT_VERBS",
    "ChurnAction",
    "ChurnDecision",
    "ChurnSample",
    "TarpitState",
    "WriteRate",
    "decide_churn",
    "looser",
    "tarpit_rules",
    "tarpitted",
    "writes_in_window",
]

TARPIT_VERBS: Final = ("create", "update", "patch", "delete", "deletecollection")
"""The verbs the tarpit catches: churn is writes; a tenant's reads (its informers, ``kubectl
get``) keep their level."""
NEVER_TARPITTED: Final = frozenset({"kube-system", "kube-public", "kube-node-lease"})
"""Namespaces never put in the tarpit (with the release namespace, passed in)."""
NEVER_CAUGHT: Final = frozenset({"leases", "events", "resourcequotas", "limitranges"})
"""Resources the tarpit never names: leader election and node heartbeats, dynquota's and the
controllers' Events, and the quota objects admission and the operator write."""

ChurnAction = Literal["none", "engage", "hold", "release"]


@dataclass(frozen=True)
class WriteRate:
    """A policy's ``spec.writeRate``: more than ``limit`` writes (creates + deletes of the
    watched kinds) in ``window`` seconds engages the tarpit; ``quiet_period`` seconds with at
    most ``limit // 2`` in the window releases it. All integers (seconds, writes)."""

    limit: int
    window: int
    quiet_period: int

    def __post_init__(self) -> None:
        if self.limit < 1 or self.window < 1 or self.quiet_period < 0:
            raise ValueError(f"writeRate needs limit >= 1, window >= 1 s, quietPeriod >= 0: {self}")


@dataclass(frozen=True)
class ChurnSample:
    """Writes one namespace saw at time ``at`` (s): ``creates`` and ``deletes`` of the watched
    kinds since the previous sample (counts, >= 0)."""

    at: float
    creates: int
    deletes: int


def looser(rule: WriteRate, than: WriteRate) -> bool:
    """Whether ``rule`` lets through every run of writes ``than`` does, and more (rule 6): a
    ``limit`` no smaller in a ``window`` no longer, one of them different (every window of
    ``rule`` lies in one of ``than``). ``quietPeriod`` does not count."""
    return (
        rule.limit >= than.limit
        and rule.window <= than.window
        and (rule.limit, rule.window) != (than.limit, than.window)
    )


@dataclass(frozen=True)
class TarpitState:
    """A namespace's place in the tarpit: tarpitted or not, since when its writes have been
    quiet (s; None: not quiet, or not tarpitted) and the rule it was last judged by while
    tarpitted (``None``: not tarpitted, or not judged since the start: rule 6)."""

    tarpitted: bool = False
    quiet_since: float | None = None
    rule: WriteRate | None = None


@dataclass(frozen=True)
class ChurnDecision:
    """What to do (``action``), the namespace's state after it, the writes counted in the
    window (``writes``), when to decide again at the latest (``recheck_at``, s; None: at the
    next sample) and why (``reason``, one line for an Event and the log)."""

    action: ChurnAction
    state: TarpitState
    writes: int
    recheck_at: float | None
    reason: str


def writes_in_window(samples: Iterable[ChurnSample], now: float, window: int) -> int:
    """Creates + deletes of the samples taken in ``(now - window, now]``."""
    return sum(s.creates + s.deletes for s in samples if now - window < s.at <= now)


def decide_churn(
    *,
    rule: WriteRate,
    samples: Sequence[ChurnSample],
    state: TarpitState,
    held_at_maximum: bool,
    now: float,
    started_at: float,
) -> ChurnDecision:
    """One namespace's decision (the rules in the module docs).

    Args:
        rule: the governing policy's ``writeRate`` now.
        samples: the namespace's write counts, any order; only the last ``rule.window``
            seconds count (older ones may be passed and are ignored).
        state: the namespace's tarpit state before this decision (tarpitted: its name is in
            the tarpit FlowSchema's rules; ``rule``: the rule it was last judged by, rule 6).
        held_at_maximum: the managed quota is at the policy's maximum for a watched key and
            creates are still being refused.
        now: the time of the decision (s, the samples' clock).
        started_at: when the operator's watches started (s): no quiet clock starts earlier.
    """
    writes = writes_in_window(samples, now, rule.window)
    seen = f"{writes} writes in {rule.window} s (limit {rule.limit})"
    pressure = writes > rule.limit or held_at_maximum
    why = seen + (
        ", quota held at its maximum while creates are refused" if held_at_maximum else ""
    )
    if not state.tarpitted:
        if pressure:
            return ChurnDecision(
                "engage", TarpitState(True, rule=rule), writes, None, f"tarpit: {why}"
            )
        return ChurnDecision("none", state, writes, None, f"not tarpitted: {seen}")
    if pressure or writes > rule.limit // 2:
        return ChurnDecision(
            "hold", TarpitState(True, rule=rule), writes, None, f"held in the tarpit: {why} "
            f"(quiet at {rule.limit // 2} or fewer)",
        )  # fmt: skip
    before = state.rule
    relaxed = before is not None and looser(rule, before)
    if before is not None and relaxed and now - started_at >= rule.window:
        return ChurnDecision(
            "release", TarpitState(False), writes, None,
            f"released from the tarpit: its writeRate was relaxed ({before.limit} writes in "
            f"{before.window} s -> {rule.limit} in {rule.window} s): {seen}, quiet at "
            f"{rule.limit // 2} or fewer",
        )  # fmt: skip
    quiet_since = max(state.quiet_since if state.quiet_since is not None else now, started_at)
    release_at = quiet_since + rule.quiet_period
    if now >= release_at:
        return ChurnDecision(
            "release", TarpitState(False), writes, None,
            f"released from the tarpit: {seen}, quiet for {now - quiet_since:.0f} s "
            f"(quietPeriod {rule.quiet_period} s)",
        )  # fmt: skip
    judged_by = before if relaxed else rule  # rule 6 waits for a window of history
    recheck_at = min(release_at, started_at + rule.window) if relaxed else release_at
    return ChurnDecision(
        "hold", TarpitState(True, quiet_since, judged_by), writes, recheck_at,
        f"held in the tarpit: {seen}, quiet for {now - quiet_since:.0f} s of "
        f"{rule.quiet_period} s",
    )  # fmt: skip


def tarpit_rules(
    namespaces: Iterable[str],
    resources: Sequence[str],
    release_namespace: str,
    subjects: Sequence[dict[str, Any]] = (
        {"kind": "Group", "group": {"name": "system:authenticated"}},
    ),
) -> list[dict[str, Any]]:
    """The tarpit FlowSchema's ``spec.rules`` for the tarpitted ``namespaces``: one rule
    catching ``TARPIT_VERBS`` on ``resources`` (every API group) by ``subjects`` in those
    namespaces, sorted; ``[]`` when none is tarpitted (a rule must name namespaces: an empty
    list is invalid, so at rest the FlowSchema has no rules).

    System namespaces, ``release_namespace`` and the resources of :data:`NEVER_CAUGHT` are
    left out whatever is asked (the chart's admission policy refuses them too).

    Raises:
        ValueError: ``resources`` names only resources that are never caught, or ``*``.
    """
    named = [r for r in resources if r not in NEVER_CAUGHT]
    if not named or "*" in named:
        raise ValueError(f"the tarpit names its resources, never *: {list(resources)}")
    excluded = NEVER_TARPITTED | {release_namespace}
    listed = sorted({ns for ns in namespaces if ns and ns not in excluded})
    if not listed:
        return []
    return [
        {
            "subjects": list(subjects),
            "resourceRules": [
                {
                    "verbs": list(TARPIT_VERBS),
                    "apiGroups": ["*"],
                    "resources": named,
                    "namespaces": listed,
                    "clusterScope": False,
                }
            ],
        }
    ]


def tarpitted(rules: Collection[Mapping[str, Any]]) -> set[str]:
    """The namespaces a tarpit FlowSchema's ``spec.rules`` name (what the operator reads back
    at start to know which namespaces it had put in the tarpit)."""
    return {
        ns
        for rule in rules
        for resource_rule in rule.get("resourceRules") or ()
        for ns in resource_rule.get("namespaces") or ()
    }
