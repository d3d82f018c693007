"""Failing managed-quota writes, per namespace and writer, until one succeeds (a part of
:class:`~dynquota.operator.assembly.Operator`).

A QuotaBudget or a DynamicQuotaPolicy must not say ``Ready`` while the operator's writes of
its quotas are refused (the operator's token lacks rights in a member namespace, a
ValidatingAdmissionPolicy refuses the patch) or fail. :class:`RecordingQuotas` wraps the
:class:`~dynquota.operator.ports.QuotaStore` each writer is handed and tells
:class:`WriteFailures` the outcome of every create, patch and delete:

- an ``ApiError`` is a failure (:class:`~dynquota.policy.readiness.WriteFailure`), except 404
  (gone meanwhile), 409 (changed meanwhile, or not ours: decided again) and the 403 of a
  namespace being deleted; a ``TransportError`` (no answer) is one with status 0;
- a write that succeeds clears that writer's failure in that namespace (a budget's slice
  patch does not clear a refused create of the reconcile, nor the reverse).

The status writers read :meth:`WriteFailures.of` (the budget's members, the policy's governed
namespaces) into Ready/Reconciling/Stalled (:func:`~dynquota.policy.readiness.set_readiness`);
:attr:`WriteFailures.on_change` (a namespace's failures appeared, changed or cleared) wakes
them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final, TypeVar

from dynquota._k8s.errors import ApiError, TransportError
from dynquota.kube.quotas import QuotaSnapshot
from dynquota.operator.ports import QuotaStore, namespace_terminating
from dynquota.policy.readiness import WriteFailure

__all__ = ["BUDGET_WRITER", "RECONCILE_WRITER", "RecordingQuotas", "WriteFailures"]

T = TypeVar("T")

RECONCILE_WRITER: Final = "reconcile"
"""The per-namespace writer, the deleter and the kill switch."""
BUDGET_WRITER: Final = "budget"
"""A budget's slice patches (:mod:`dynquota.operator.budget_task`)."""


class WriteFailures:
    """The last failure of each ``(namespace, writer)`` (see the module docs)."""

    def __init__(self) -> None:
        self._failed: dict[tuple[str, str], WriteFailure] = {}
        self.on_change: Callable[[str], None] | None = None
        """Called with a namespace whose failures appeared, changed or cleared."""

    def failed(self, failure: WriteFailure) -> None:
        """Record ``failure`` (the latest of its namespace and writer wins; a new message
        alone, e.g. another timeout's, calls no :attr:`on_change`)."""
        key = (failure.namespace, failure.writer)
        old = self._failed.get(key)
        self._failed[key] = failure
        if old is None or _kind(old) != _kind(failure):
            self._changed(failure.namespace)

    def succeeded(self, namespace: str, writer: str) -> None:
        """A write of ``writer`` in ``namespace`` succeeded: its failure there is over."""
        if self._failed.pop((namespace, writer), None) is not None:
            self._changed(namespace)

    def forget(self, namespace: str) -> None:
        """``namespace`` was deleted."""
        for key in [k for k in self._failed if k[0] == namespace]:
            del self._failed[key]

    def of(self, namespaces: Iterable[str]) -> list[WriteFailure]:
        """The failures in ``namespaces``, by namespace and writer."""
        wanted = set(namespaces)
        return [f for key, f in sorted(self._failed.items()) if key[0] in wanted]

    def namespaces(self) -> set[str]:
        """The namespaces with a failure now."""
        return {ns for ns, _ in self._failed}

    def _changed(self, namespace: str) -> None:
        if self.on_change is not None:
            self.on_change(namespace)


def _kind(failure: WriteFailure) -> tuple[str, int, str, bool]:
    return failure.verb, failure.status, failure.reason, failure.retryable


class RecordingQuotas:
    """A :class:`~dynquota.operator.ports.QuotaStore` that reports each write's outcome to
    ``failures`` as ``writer`` (:data:`RECONCILE_WRITER` or :data:`BUDGET_WRITER`) and hands
    each successful write to ``wrote(namespace, snapshot)`` (``None``: deleted; the cluster
    view's :meth:`~dynquota.operator.cluster_view.ClusterView.wrote`, so a decision waits for
    the watch to show this replica's own write); reads pass through. Every error is raised on
    as the wrapped store raised it."""

    def __init__(
        self,
        quotas: QuotaStore,
        failures: WriteFailures,
        writer: str,
        wrote: Callable[[str, QuotaSnapshot | None], None] = lambda _ns, _quota: None,
    ) -> None:
        self.quotas = quotas
        self.failures = failures
        self.writer = writer
        self.wrote = wrote

    async def get(self, namespace: str) -> QuotaSnapshot | None:
        """The wrapped store's ``get``."""
        return await self.quotas.get(namespace)

    async def list_managed(self, label_selector: str | None = None) -> list[QuotaSnapshot]:
        """The wrapped store's ``list_managed``."""
        return await self.quotas.list_managed(label_selector)

    async def create(
        self, namespace: str, hard: Mapping[str, str], annotations: Mapping[str, str]
    ) -> QuotaSnapshot:
        """The wrapped store's ``create``, recorded."""
        created = await self._recorded(
            namespace, "create", self.quotas.create(namespace, hard, annotations)
        )
        self.wrote(namespace, created)
        return created

    async def patch(
        self, namespace: str, body: Mapping[str, Any], resource_version: str | None = None
    ) -> QuotaSnapshot:
        """The wrapped store's ``patch``, recorded."""
        patched = await self._recorded(
            namespace, "patch", self.quotas.patch(namespace, body, resource_version)
        )
        self.wrote(namespace, patched)
        return patched

    async def delete(self, namespace: str, uid: str | None = None) -> bool:
        """The wrapped store's ``delete``, recorded (a 404 is no failure)."""
        deleted = await self._recorded(namespace, "delete", self.quotas.delete(namespace, uid))
        self.wrote(namespace, None)
        return deleted

    async def _recorded(self, namespace: str, verb: str, write: Awaitable[T]) -> T:
        """Await ``write`` (a ``verb`` in ``namespace``) and record its outcome."""
        try:
            done = await write
        except (ApiError, TransportError) as exc:
            self._failed(namespace, verb, exc)
            raise
        self.failures.succeeded(namespace, self.writer)
        return done

    def _failed(self, namespace: str, verb: str, exc: ApiError | TransportError) -> None:
        if isinstance(exc, TransportError):
            failure = WriteFailure(namespace, self.writer, verb, 0, "", str(exc), True)
        elif exc.status in (404, 409) or namespace_terminating(exc):
            return  # gone or changed meanwhile (decided again), or the namespace is going
        else:
            failure = WriteFailure(
                namespace, self.writer, verb, exc.status, exc.reason, exc.message, exc.retryable
            )
        self.failures.failed(failure)
