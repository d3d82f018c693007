"""Posting Kubernetes Events (core/v1) about the objects dynquota acts on (I/O).

Events are best effort: a failure to post one is logged and reported to the observer, never
raised, so it cannot block a reconcile. Events about cluster-scoped objects (the
``kube-system`` Namespace, policies) go to the ``default`` namespace, where ``kubectl
describe`` looks for them, like client-go's event recorder.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes_asyncio import client

from dynquota._k8s.errors import KubeError
from dynquota._k8s.request import ApiCallObserver, call_json
from dynquota.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE

__all__ = ["COMPONENT", "EventRecorder", "ObjectRef"]

log = logging.getLogger(__name__)

COMPONENT = "dynquota"
"""``source.component`` / ``reportingComponent`` of every Event."""

EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True)
class ObjectRef:
    """The ``involvedObject`` of an Event: ``namespace`` is ``""`` for cluster-scoped kinds."""

    api_version: str
    kind: str
    name: str
    namespace: str = ""
    uid: str = ""

    @classmethod
    def quota(cls, namespace: str, name: str, uid: str = "") -> ObjectRef:
        """Reference to a ResourceQuota."""
        return cls("v1", "ResourceQuota", name, namespace, uid)

    @classmethod
    def namespace_object(cls, name: str, uid: str = "") -> ObjectRef:
        """Reference to a Namespace (cluster-scoped)."""
        return cls("v1", "Namespace", name, "", uid)


class EventRecorder:
    """Creates core/v1 Events.

    Args:
        api_client: a configured kubernetes_asyncio ``ApiClient`` (not closed here).
        instance: ``reportingInstance`` (e.g. the pod name).
        observer: hears ``(verb, "events", status)`` after every call.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        instance: str = "",
        observer: ApiCallObserver | None = None,
    ) -> None:
        self._api: Any = client.CoreV1Api(api_client)
        self._instance = instance
        self._observer = observer
        self.posted = 0
        """Events created so far (a count)."""

    async def emit(self, ref: ObjectRef, type_: EventType, reason: str, message: str) -> bool:
        """Post one Event about ``ref``; returns whether it was created (never raises).

        ``reason`` is a CamelCase word (``Resized``, ``OverrideGranted``, ...); ``message`` is
        cut to 1,024 characters.
        """
        now = dt.datetime.now(dt.UTC)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        namespace = ref.namespace or "default"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{ref.name}.{secrets.token_hex(8)}",
                "namespace": namespace,
                # the chart's Lease fence selects what dynquota writes by this label
                "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
            },
            "involvedObject": {
                "apiVersion": ref.api_version,
                "kind": ref.kind,
                "name": ref.name,
                **({"namespace": ref.namespace} if ref.namespace else {}),
                **({"uid": ref.uid} if ref.uid else {}),
            },
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._instance or COMPONENT,
        }
        try:
            # the raw answer: deserialising the returned Event into a model cost 1.9 ms of
            # CPU a post (dateutil parsing its timestamps), on the reconcile's path
            await call_json(
                "create",
                "events",
                lambda t: self._api.create_namespaced_event(
                    namespace, body, _request_timeout=t, _preload_content=False
                ),
                self._observer,
            )
        except KubeError as exc:
            log.warning("could not post Event %s on %s %s: %s", reason, ref.kind, ref.name, exc)
            return False
        self.posted += 1
        return True
