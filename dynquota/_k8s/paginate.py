"""Paginated lists: one page type and the one ``limit``/``continue`` loop.

A list without ``resourceVersion`` is a consistent read (a quorum read from etcd, never the
watch cache); its later pages, fetched with the ``continue`` token of the one before, continue
the first page's snapshot. An expired token answers 410 Gone
(:class:`~dynquota._k8s.errors.GoneError`): the whole list must start again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dynquota._k8s.errors import TransportError

__all__ = ["ListPage", "paginate"]


@dataclass
class ListPage:
    """One page of a list.

    ``items`` are decoded objects (dicts, camelCase keys; ``{"metadata": {...}}`` for
    metadata-only lists), ``resource_version`` the list's ``metadata.resourceVersion``,
    ``continue_token`` the token for the next page (``None`` on the last page), ``size`` the
    body length in bytes (0 when not known).
    """

    items: list[dict[str, Any]]
    resource_version: str
    continue_token: str | None
    size: int = 0

    @classmethod
    def from_body(cls, decoded: Any, what: str, size: int = 0) -> ListPage:
        """The page of a decoded list body (``{"metadata": ..., "items": [...]}``).

        ``what`` names the list in errors. Raises :class:`TransportError` when ``decoded`` is
        not a list (an empty list may come as ``"items": null``).
        """
        items = decoded.get("items") if isinstance(decoded, dict) else None
        if items is None and isinstance(decoded, dict) and "metadata" in decoded:
            items = []
        if not isinstance(items, list):
            raise TransportError(f"list of {what}: not a list")
        metadata = decoded.get("metadata") or {}
        return cls(
            items=items,
            resource_version=str(metadata.get("resourceVersion") or ""),
            continue_token=metadata.get("continue") or None,
            size=size,
        )

    @classmethod
    def from_model(cls, model: Any, sanitize: Callable[[Any], Any]) -> ListPage:
        """The page of a kubernetes_asyncio list model (``V1NamespaceList``, ...), or of a
        custom-object list dict; ``sanitize`` is ``ApiClient.sanitize_for_serialization``."""
        decoded = model if isinstance(model, Mapping) else sanitize(model)
        return cls.from_body(dict(decoded), type(model).__name__)


async def paginate(
    fetch: Callable[[str | None], Awaitable[ListPage]],
) -> AsyncIterator[ListPage]:
    """Yield every page of one list: ``fetch(None)``, then ``fetch(token)`` with the previous
    page's ``continue_token`` until a page has none.

    Raises whatever ``fetch`` raises (``GoneError`` when a token expired).
    """
    token: str | None = None
    while True:
        page = await fetch(token)
        yield page
        token = page.continue_token
        if not token:
            return
