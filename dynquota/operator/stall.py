"""A stalled quota controller, watched (issue 27, part 2; docs/operator.md).

:class:`StallWatch` feeds :class:`~dynquota.policy.stall.StallSignals` from the managed
quotas' events (``spec.hard`` vs ``status.hard``) and from each decision's usage (the tally
vs ``status.used``), checks the bounds every few seconds, and on a change sets
``dynquota_quota_controller_stalled``, logs one line and calls ``on_change`` (the operator
then rewrites the policies' ``QuotaControllerStalled`` condition and, once it clears, decides
every namespace again). While :attr:`StallWatch.stalled`, raises that rest on ``status.used``
are held (:func:`dynquota.policy.decide`'s ``stalled``). No I/O of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from dynquota.kube.quotas import QuotaSnapshot
from dynquota.metrics import Metrics
from dynquota.policy.stall import COPY_AFTER, RECOUNT_GRACE, Stall, StallSignals

__all__ = ["CHECK_INTERVAL", "StallWatch"]

log = logging.getLogger("dynquota.operator")

CHECK_INTERVAL = 5.0
"""Seconds between checks of the bounds (a stall is reported at most this late)."""


class StallWatch:
    """The quota controller's signals for one replica. ``quota_sync_period``: seconds (the
    operator's setting of kube-controller-manager's ``--resource-quota-sync-period``);
    ``on_change(stalled)``: called after each transition."""

    def __init__(
        self, quota_sync_period: int, metrics: Metrics, on_change: Callable[[bool], None]
    ) -> None:
        self.signals = StallSignals(COPY_AFTER, quota_sync_period + RECOUNT_GRACE)
        self.metrics = metrics
        self.on_change = on_change
        self.current: list[Stall] = []
        """The signals past their bound at the last check."""

    @property
    def stalled(self) -> bool:
        """Whether a signal showed a stalled quota controller at the last check."""
        return bool(self.current)

    def observe_quota(self, namespace: str, quota: QuotaSnapshot | None, now: float) -> None:
        """A managed quota's event (``None``: deleted or no longer managed)."""
        if quota is None:
            self.signals.forget(namespace)
        else:
            self.signals.observe_copy(namespace, quota.copy_pending(), now)

    def observe_usage(
        self,
        namespace: str,
        quota: QuotaSnapshot | None,
        tally: Mapping[str, int],
        status_used: Mapping[str, int],
        now: float,
    ) -> None:
        """One decision's tally and ``status.used`` (counts) of the keys ``quota`` enforces."""
        if quota is not None:
            enforced = {k: n for k, n in tally.items() if k in quota.status_hard}
            self.signals.observe_usage(namespace, enforced, status_used, now)

    def check(self, now: float) -> bool:
        """Compare the evidence with the bounds at ``now`` (seconds since the epoch); returns
        whether the answer changed."""
        found = self.signals.stalls(now)
        before = {s.signal for s in self.current}
        after = {s.signal for s in found}
        for signal in ("copy", "recount"):
            self.metrics.quota_controller_stalled.labels(signal).set(int(signal in after))
        changed = before != after
        self.current = found
        if changed:
            if found:
                for stall in found:
                    log.warning(
                        "QuotaControllerStalled (%s): %s; raises that rest on status.used are "
                        "held until it recovers",
                        stall.reason,
                        stall.message,
                    )
            else:
                log.info("the quota controller is running again (copies and recounts seen)")
            self.on_change(bool(found))
        return changed

    async def run(self, clock: Callable[[], float], interval: float = CHECK_INTERVAL) -> None:
        """Check every ``interval`` seconds until cancelled; an error is logged, never ends
        the loop."""
        while True:
            await asyncio.sleep(interval)
            try:
                self.check(clock())
            except Exception:  # a bug here must not stop the checks
                log.exception("quota controller check failed")
