"""The managed-quota store every part of the operator writes through: it tells the cluster view
what this replica wrote, so a decision is made from the watched copy only once the watch shows
that write (:meth:`~dynquota.operator.cluster_view.ClusterView.current`). No I/O of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dynquota.kube.quotas import QuotaSnapshot
from dynquota.operator.ports import QuotaStore

__all__ = ["RecordedQuotas"]


class RecordedQuotas:
    """A :class:`~dynquota.operator.ports.QuotaStore` that passes every call to ``store`` and
    hands each successful write to ``wrote(namespace, snapshot)`` (``None``: deleted).

    Errors are the store's (``KubeError`` and its subclasses), raised unchanged; a failed write
    records nothing.
    """

    def __init__(
        self, store: QuotaStore, wrote: Callable[[str, QuotaSnapshot | None], None]
    ) -> None:
        self.store = store
        self.wrote = wrote

    async def get(self, namespace: str) -> QuotaSnapshot | None:
        """The managed quota of ``namespace`` read afresh (``None``: none)."""
        return await self.store.get(namespace)

    async def list_managed(self, label_selector: str | None = None) -> list[QuotaSnapshot]:
        """Every managed quota (optionally also matching ``label_selector``)."""
        return await self.store.list_managed(label_selector)

    async def create(
        self, namespace: str, hard: Mapping[str, str], annotations: Mapping[str, str]
    ) -> QuotaSnapshot:
        """Create the managed quota of ``namespace``; returns it as stored."""
        created = await self.store.create(namespace, hard, annotations)
        self.wrote(namespace, created)
        return created

    async def patch(
        self, namespace: str, body: Mapping[str, Any], resource_version: str | None = None
    ) -> QuotaSnapshot:
        """Merge-patch the managed quota of ``namespace`` (conditional on
        ``resource_version`` when given); returns it as stored."""
        patched = await self.store.patch(namespace, body, resource_version)
        self.wrote(namespace, patched)
        return patched

    async def delete(self, namespace: str, uid: str | None = None) -> bool:
        """Delete the managed quota of ``namespace`` (with ``uid`` as precondition); ``False``
        if it was already gone."""
        deleted = await self.store.delete(namespace, uid)
        self.wrote(namespace, None)
        return deleted
