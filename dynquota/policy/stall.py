"""Signals of a stalled quota controller (Pure; issue 27, part 2).

kube-controller-manager's resource-quota controller copies each quota's ``spec.hard`` into
``status.hard`` (event-driven: seconds) and recounts ``status.used`` (on deletions through its
monitors' replenishment, and at every ``--resource-quota-sync-period``). When it is down, or
its monitors never start (kubernetes#96066), neither happens and quotas freeze at their last
enforced values, silently. Two signals see it, each with its own bound:

- ``copy``: a managed quota's ``spec.hard`` differs from its ``status.hard`` for longer than
  ``copy_after`` seconds (a raise or a new quota not taken into force);
- ``recount``: a tally-driven key's ``status.used`` stays above the objects that exist
  (deletions not replenished) for longer than ``recount_after`` seconds *without decreasing*
  (any decrease is a recount; a healthy controller under churn lowers it within seconds).

Neither sees a stalled controller at rest: with no quota changed and nothing deleted, a stopped
controller leaves no trace in quota objects. Objects admitted uncharged (``status.used`` below
the tally) are not a signal: quota admission raises ``status.used`` on creates too, so a
recount cannot be told from a charge. Times are seconds since the epoch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["COPY_AFTER", "RECOUNT_GRACE", "Stall", "StallSignal", "StallSignals"]

COPY_AFTER: Final = 30.0
"""Seconds a ``spec.hard`` may wait for its copy into ``status.hard`` (measured: 0.2-1.2 s
with 50 namespaces created at once)."""
RECOUNT_GRACE: Final = 30.0
"""Seconds past the quota sync period before a recount counts as missed."""
EXAMPLES: Final = 3
"""Namespaces named in a stall's message."""

StallSignal = Literal["copy", "recount"]


@dataclass(frozen=True)
class Stall:
    """One signal past its bound: ``since`` (when its oldest evidence began), the affected
    ``namespaces`` (sorted) and a one-line ``message``."""

    signal: StallSignal
    since: float
    namespaces: tuple[str, ...]
    message: str

    @property
    def reason(self) -> str:
        """The condition reason: ``SpecNotCopied`` or ``UsageNotRecounted``."""
        return "SpecNotCopied" if self.signal == "copy" else "UsageNotRecounted"


class StallSignals:
    """The evidence per namespace, in memory (a restart starts it afresh; the first lists
    show what is still pending). ``copy_after``/``recount_after``: the bounds, seconds."""

    def __init__(self, copy_after: float, recount_after: float) -> None:
        self.copy_after = copy_after
        self.recount_after = recount_after
        self._copy: dict[str, float] = {}
        self._excess: dict[tuple[str, str], tuple[float, int]] = {}
        """(namespace, key) -> (since, the last status.used seen)."""

    def observe_copy(self, namespace: str, pending: bool, now: float) -> None:
        """``pending``: the managed quota's ``spec.hard`` differs from its ``status.hard``."""
        if pending:
            self._copy.setdefault(namespace, now)
        else:
            self._copy.pop(namespace, None)

    def observe_usage(
        self, namespace: str, tally: Mapping[str, int], status_used: Mapping[str, int], now: float
    ) -> None:
        """``tally`` (objects that exist) and ``status.used`` per tally-driven key (counts) of
        the namespace's enforced managed quota; a key missing from ``status_used`` is skipped."""
        for key, count in tally.items():
            used = status_used.get(key)
            entry = self._excess.get((namespace, key))
            if used is None or used <= count:
                self._excess.pop((namespace, key), None)
            elif entry is None or used < entry[1]:
                self._excess[(namespace, key)] = (now, used)  # new, or recounted since
            else:
                self._excess[(namespace, key)] = (entry[0], used)

    def forget(self, namespace: str) -> None:
        """The namespace or its managed quota is gone."""
        self._copy.pop(namespace, None)
        for key in [k for k in self._excess if k[0] == namespace]:
            del self._excess[key]

    def stalls(self, now: float) -> list[Stall]:
        """The signals past their bound at ``now``, ``copy`` first (empty: none)."""
        found: list[Stall] = []
        late = {ns: t for ns, t in self._copy.items() if now - t >= self.copy_after}
        if late:
            names = tuple(sorted(late))
            since = min(late.values())
            found.append(
                Stall(
                    "copy",
                    since,
                    names,
                    f"spec.hard of {len(names)} managed quota(s) not copied into status.hard "
                    f"for {now - since:.0f} s or more (e.g. {_some(names)}): the quota "
                    "controller of kube-controller-manager is not running or not syncing",
                )
            )
        stale: dict[str, float] = {}
        for (ns, _), (t, _) in self._excess.items():
            if now - t >= self.recount_after:
                stale[ns] = min(t, stale.get(ns, t))
        if stale:
            names = tuple(sorted(stale))
            since = min(stale.values())
            found.append(
                Stall(
                    "recount",
                    since,
                    names,
                    f"status.used above the objects that exist, not recounted for "
                    f"{now - since:.0f} s or more in {len(names)} namespace(s) (e.g. "
                    f"{_some(names)}): deletions are not replenished",
                )
            )
        return found


def _some(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:EXAMPLES])
    return shown + (", ..." if len(names) > EXAMPLES else "")
