"""The write-rate governor's tarpit FlowSchema: read it, set its rules (I/O).

The chart installs ``<fullname>-tarpit`` (``templates/write-rate-tarpit.yaml``) with no rules;
the operator's token may ``get`` and ``patch`` that one object, and the chart's
``<fullname>-operator-writes`` policy lets an update change only the namespace lists of its
rules. :class:`FlowSchemaClient` reads it consistently (a GET without ``resourceVersion``) and
writes ``spec.rules`` with a JSON merge-patch carrying ``metadata.resourceVersion`` of the read
it was decided on: a FlowSchema changed meanwhile (a ``helm upgrade``, an admin) answers 409,
never a blind overwrite. Every call has the short timeout (:func:`~dynquota._k8s.request.
call_json`: 10 s). Failures are :mod:`dynquota._k8s.errors` types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client

from dynquota._k8s.request import ApiCallObserver, call_json
from dynquota.kube.quotas import FIELD_MANAGER

__all__ = ["FlowSchemaClient", "TarpitSchema"]

_MERGE_PATCH = "application/merge-patch+json"
_RESOURCE = "flowschemas"


@dataclass(frozen=True)
class TarpitSchema:
    """The tarpit FlowSchema as read or written: its ``spec.rules`` (JSON, ``()`` at rest) and
    ``metadata.resourceVersion`` (the precondition of the next patch)."""

    rules: tuple[Mapping[str, Any], ...]
    resource_version: str

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> TarpitSchema:
        """From a decoded FlowSchema."""
        spec = obj.get("spec") or {}
        meta = obj.get("metadata") or {}
        return cls(tuple(spec.get("rules") or ()), str(meta.get("resourceVersion") or ""))


class FlowSchemaClient:
    """Reads and patches one FlowSchema (``flowcontrol.apiserver.k8s.io/v1``).

    Args:
        api_client: a configured kubernetes_asyncio ``ApiClient`` (not closed here).
        observer: hears ``(verb, "flowschemas", status)`` after every call.
    """

    def __init__(
        self, api_client: client.ApiClient, observer: ApiCallObserver | None = None
    ) -> None:
        self._api: Any = client.FlowcontrolApiserverV1Api(api_client)
        self._observer = observer

    async def read(self, name: str) -> TarpitSchema:
        """The FlowSchema ``name``, read consistently. Raises ``NotFoundError`` (not
        installed), ``ForbiddenError``, other ``ApiError``, ``TransportError``."""
        obj = await call_json(
            "get",
            _RESOURCE,
            lambda t: self._api.read_flow_schema(name, _request_timeout=t, _preload_content=False),
            self._observer,
        )
        return TarpitSchema.from_object(obj)

    async def set_rules(
        self, name: str, rules: Sequence[Mapping[str, Any]], resource_version: str
    ) -> TarpitSchema:
        """Set ``spec.rules`` of ``name`` to ``rules`` (``[]``: none), conditional on
        ``resource_version``; returns the FlowSchema as stored. Raises ``ConflictError``
        (changed since that read), ``ForbiddenError`` (the chart's policy refused
        it), another ``ApiError`` (422: invalid), ``TransportError``."""
        body = {
            "metadata": {"resourceVersion": resource_version},
            "spec": {"rules": [dict(r) for r in rules]},
        }
        obj = await call_json(
            "patch",
            _RESOURCE,
            lambda t: self._api.patch_flow_schema(
                name,
                body,
                field_manager=FIELD_MANAGER,
                _content_type=_MERGE_PATCH,
                _request_timeout=t,
                _preload_content=False,
            ),
            self._observer,
        )
        return TarpitSchema.from_object(obj)
