"""The Lease lock of leader election: its requests and its record (I/O).

Follows client-go's ``tools/leaderelection/resourcelock/leaselock.go``: the
:class:`LeaseRecord` a ``coordination.k8s.io/v1`` Lease's ``spec`` holds, the three requests
the elector makes behind the small :class:`LeaseApi` protocol (plain dicts, so the elector is
unit-tested with a fake at that boundary), :class:`KubeLeaseApi` the real one, and
:func:`lease_body`, the body of an update. The elector itself is :mod:`dynquota.kube.leader`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from kubernetes_asyncio import client

from dynquota._k8s import timeouts
from dynquota._k8s.errors import NotFoundError
from dynquota._k8s.request import ApiCallObserver, call_api

__all__ = ["KubeLeaseApi", "LeaseApi", "LeaseRecord", "lease_body", "micro_time"]


class LeaseApi(Protocol):
    """The Lease requests the elector makes (the adapter boundary; Leases as decoded JSON).

    Each method raises :class:`~dynquota._k8s.errors.KubeError` subclasses
    (``ConflictError`` on 409, ``TransportError`` on a timeout); the elector catches any
    ``Exception``.
    """

    async def get(
        self, namespace: str, name: str, timeout: float | None = None
    ) -> dict[str, Any] | None:
        """The Lease, or ``None`` if it does not exist (404). ``timeout``: seconds for this
        request instead of the adapter's request timeout (a standby's reads)."""
        ...

    async def create(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create ``body``; return the stored Lease. ``ConflictError`` if it exists."""
        ...

    async def replace(self, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Update (PUT) the Lease with ``body``, whose ``metadata.resourceVersion`` is a
        precondition; return the stored Lease. ``ConflictError`` if it changed."""
        ...


class KubeLeaseApi:
    """:class:`LeaseApi` over a kubernetes_asyncio ``ApiClient`` (``coordination.k8s.io/v1``).

    Every request has ``request_timeout`` seconds in total (3 s connect at most).
    ``observer`` hears ``(verb, "leases", status)`` after every call.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        request_timeout: float = timeouts.LEASE_REQUEST_TIMEOUT,
        observer: ApiCallObserver | None = None,
    ) -> None:
        self._api: Any = client.CoordinationV1Api(api_client)
        self._sanitize = api_client.sanitize_for_serialization
        self.request_timeout = request_timeout
        self._observer = observer

    async def _call(
        self,
        verb: str,
        request: Callable[[aiohttp.ClientTimeout], Awaitable[Any]],
        seconds: float | None = None,
    ) -> dict[str, Any]:
        model = await call_api(
            verb,
            "leases",
            request,
            self._observer,
            timeout=timeouts.lease_timeout(seconds or self.request_timeout),
        )
        result: dict[str, Any] = self._sanitize(model)
        return result

    async def get(
        self, namespace: str, name: str, timeout: float | None = None
    ) -> dict[str, Any] | None:
        """The Lease ``namespace/name`` or ``None``; see :class:`LeaseApi`."""
        try:
            return await self._call(
                "get",
                lambda t: self._api.read_namespaced_lease(name, namespace, _request_timeout=t),
                timeout,
            )
        except NotFoundError:
            return None

    async def create(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create the Lease ``body``; see :class:`LeaseApi`."""
        return await self._call(
            "create",
            lambda t: self._api.create_namespaced_lease(namespace, dict(body), _request_timeout=t),
        )

    async def replace(self, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Update the Lease with ``body`` (resourceVersion precondition); see :class:`LeaseApi`."""
        return await self._call(
            "update",
            lambda t: self._api.replace_namespaced_lease(
                name, namespace, dict(body), _request_timeout=t
            ),
        )


@dataclass(frozen=True)
class LeaseRecord:
    """The leader-election record in a Lease's ``spec`` (client-go's ``LeaderElectionRecord``).

    Times are the RFC 3339 strings as stored (informational only: the elector measures time on
    its own monotonic clock); ``lease_duration_seconds`` is 0 when unset.
    """

    holder: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int = 0

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        """The record of a Lease as decoded JSON (camelCase keys)."""
        spec = lease.get("spec") or {}

        def number(key: str) -> int:
            value = spec.get(key)
            return int(value) if isinstance(value, int | float) else 0

        def text(key: str) -> str | None:
            value = spec.get(key)
            if value is None:
                return None
            # MicroTime needs exactly 6 fractional digits; a decoded datetime's isoformat()
            # drops them when they are 0, and the apiserver would refuse the write
            try:
                parsed = dt.datetime.fromisoformat(str(value))
            except ValueError:
                return str(value)
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=dt.UTC)
            return micro_time(parsed)

        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=number("leaseDurationSeconds"),
            acquire_time=text("acquireTime"),
            renew_time=text("renewTime"),
            lease_transitions=number("leaseTransitions"),
        )

    def spec(self) -> dict[str, Any]:
        """The Lease ``spec`` holding this record."""
        return {
            "holderIdentity": self.holder or None,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.lease_transitions,
        }


def micro_time(now: dt.datetime) -> str:
    """A ``metav1.MicroTime`` string (RFC 3339, microseconds, UTC)."""
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_body(lease: Mapping[str, Any], record: LeaseRecord) -> dict[str, Any]:
    """The body that updates ``lease`` (as last read or written, decoded JSON) to hold
    ``record``: its metadata (with its ``resourceVersion``, the update's precondition) without
    ``managedFields``, which the apiserver keeps on update."""
    body = dict(lease)
    metadata = dict(body.get("metadata") or {})
    metadata.pop("managedFields", None)
    body["metadata"] = metadata
    body["spec"] = record.spec()
    body.setdefault("apiVersion", "coordination.k8s.io/v1")
    body.setdefault("kind", "Lease")
    return body
