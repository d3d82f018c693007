"""Leader election on a coordination.k8s.io Lease, with kubernetes_asyncio's elector (I/O).

:class:`LeaderGate` runs kubernetes_asyncio's ``LeaderElection`` in a loop (a replica that
loses the lease becomes a candidate again) and exposes :attr:`LeaderGate.is_leader`, which
the operator checks before every write. Semantics are client-go's
(``staging/src/k8s.io/client-go/tools/leaderelection``): a candidate takes an expired lease
``lease_duration`` seconds after it last saw the record change; a leader that cannot renew
within ``renew_deadline`` seconds stops leading. :meth:`LeaderGate.release` (on a clean
shutdown) empties ``holderIdentity`` so a standby takes over at its next retry instead of
waiting for the lease to expire.

Without leader election the operator uses :class:`AlwaysLeader`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from dynquota.kube.errors import KubeError
from dynquota.kube.quotas import call_api

__all__ = ["AlwaysLeader", "LeaderGate"]

log = logging.getLogger(__name__)

Callback = Callable[[bool], Awaitable[None]]
"""``async (is_leader)``: called when leadership is gained (True) or lost (False)."""


class AlwaysLeader:
    """The gate of a single replica: always leading."""

    is_leader = True
    identity = ""

    def can_write(self, seconds: float) -> bool:
        """Always: a single replica needs no fencing."""
        return True

    async def run(self) -> None:
        """Nothing to do: return at once."""

    async def release(self) -> None:
        """Nothing to release."""


class LeaderGate:
    """Campaigns for the Lease ``namespace/name`` as ``identity`` until cancelled.

    Args:
        api_client: kubernetes_asyncio ``ApiClient`` (not closed here).
        lease_duration, renew_deadline, retry_period: seconds, as client-go
            (15/10/2 there); ``lease_duration > renew_deadline > 1.2 * retry_period >= 1.2``.
        on_change: awaited with ``True`` when this replica starts leading and ``False`` when
            it stops.

    Raises ``ValueError`` for inconsistent durations.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15,
        renew_deadline: float = 10,
        retry_period: float = 2,
        on_change: Callback | None = None,
    ) -> None:
        self._api_client = api_client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self._durations = (lease_duration, renew_deadline, retry_period)
        self.on_change = on_change
        """The ``on_change`` callback (may be set after construction)."""
        self.is_leader = False
        """Whether this replica holds the Lease now; check it before every write."""
        self._announced = False
        self._holding = False
        self._lead_task: asyncio.Task[object] | None = None
        # validate once, early
        electionconfig.Config(
            LeaseLock(name, namespace, identity, api_client),
            lease_duration,
            renew_deadline,
            retry_period,
            self._lead,
            self._stopped,
        )

    def can_write(self, seconds: float) -> bool:
        """Whether a write of up to ``seconds`` may start (leading now)."""
        return self.is_leader

    async def run(self) -> None:
        """Campaign, lead, and campaign again after losing the lease; runs until cancelled."""
        lease_duration, renew_deadline, retry_period = self._durations
        try:
            while True:
                config = electionconfig.Config(
                    LeaseLock(self.name, self.namespace, self.identity, self._api_client),
                    lease_duration,
                    renew_deadline,
                    retry_period,
                    self._lead,
                    self._stopped,
                )
                await leaderelection.LeaderElection(config).run()
                await asyncio.sleep(retry_period)
        finally:
            # cancelled (shutdown): the elector does not cancel the task it started
            self.is_leader = False
            if self._lead_task is not None and not self._lead_task.done():
                self._lead_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._lead_task

    async def _lead(self) -> None:
        self._lead_task = asyncio.current_task()
        self._holding = True
        await self._announce(True)
        try:
            await asyncio.Event().wait()
        finally:
            self.is_leader = False

    async def _stopped(self) -> None:
        self._holding = False
        await self._announce(False)

    async def _announce(self, leading: bool) -> None:
        self.is_leader = leading
        if leading == self._announced:
            return
        self._announced = leading
        log.info(
            "%s %s the lease %s/%s",
            self.identity,
            "holds" if leading else "lost",
            self.namespace,
            self.name,
        )
        if self.on_change is not None:
            await self.on_change(leading)

    async def release(self) -> None:
        """Give the Lease up (empty ``holderIdentity``) if this replica held it when
        :meth:`run` was cancelled; never raises. Call after cancelling :meth:`run`."""
        if not self._holding:
            return
        self._holding = False
        self.is_leader = False
        api: Any = client.CoordinationV1Api(self._api_client)
        with contextlib.suppress(KubeError):
            await call_api(
                "patch",
                "leases",
                lambda: api.patch_namespaced_lease(
                    self.name,
                    self.namespace,
                    {"spec": {"holderIdentity": None}},
                    _content_type="application/merge-patch+json",
                ),
            )
