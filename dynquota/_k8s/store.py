"""An informer of whole objects: a :class:`~dynquota._k8s.reflector.Reflector` whose store
keeps every object by key and turns lists and watch events into one event stream (I/O).

What client-go's ``SharedInformer`` gives a controller (``tools/cache/shared_informer.go``,
``store.go``, ``delta_fifo.go``), for the collections the operator must know *completely*
(its policies, its budgets):

- **Replace on relist.** A full list replaces the store: an object the list lacks is gone,
  and the handler is told so with a ``DELETED`` event carrying the last state known (client-go's
  ``DeletedFinalStateUnknown``), exactly as if the watch had delivered it. A deletion missed in
  a watch gap (the watch down past etcd's compaction: 410 Gone, relist) thus converges within
  one relist.
- **resourceVersion ordered.** resourceVersions of one resource are compared as integers (the
  apiserver's are etcd revisions): an event not newer than what the store holds for its key,
  or than the key's tombstone, changes nothing (``stale`` counts them).
- **Tombstones.** A deleted key's resourceVersion is kept until the next full list, so an
  older ``ADDED``/``MODIFIED`` of it cannot resurrect it.
- **A synced signal.** ``on_synced`` is called after every full list has been applied (the
  first call means: the store is complete). It replaces separate start-up LISTs: one stream
  lists then watches, so a list can never be applied over a newer event.

``on_event(event_type, obj)`` receives ``"ADDED"``/``"MODIFIED"``/``"DELETED"`` for a watch
event, ``None`` for an object (new or changed) of a full list, and ``"DELETED"`` for an object
a full list lacks. A handler that raises is logged, never stops the stream.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from dynquota._k8s.backoff import Backoff
from dynquota._k8s.errors import NotFoundError
from dynquota._k8s.reflector import ListerWatcher, Reflector
from dynquota._k8s.watch import ADDED, DELETED, MODIFIED

__all__ = ["EventHandler", "ObjectInformer", "key_of", "resource_version_int"]

log = logging.getLogger(__name__)

EventHandler = Callable[[str | None, Mapping[str, Any]], None]
"""``on_event(event_type, obj)``: see the module docs."""


def key_of(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` (``name`` for a cluster-scoped object); ``""`` without a name."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return ""
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return ""
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if isinstance(namespace, str) and namespace else name


def resource_version_int(obj: Mapping[str, Any]) -> int | None:
    """The object's ``metadata.resourceVersion`` as an int; ``None`` when absent or not a
    decimal integer (such an object is not ordered: always applied)."""
    meta = obj.get("metadata")
    rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    if isinstance(rv, str) and rv.isdigit():
        return int(rv)
    return None


class ObjectInformer(Reflector[dict[str, Any]]):
    """List+watch one collection into a store of whole objects; see the module docs.

    Args:
        source: the collection (a :class:`~dynquota._k8s.reflector.Collection`).
        name: labels log lines and metrics (e.g. the resource's plural).
        on_event: the handler (see the module docs).
        on_synced: called after every full list was applied and ``on_event`` told of it.
        absent_ok: when a list answers 404 (the collection's CRD not served) and this returns
            true, the collection counts as empty: the store is emptied (every object held is
            ``DELETED``), the informer counts as synced, and the list is retried with backoff
            (a CRD installed later is picked up). Only until the first list that succeeds:
            after it a 404 (an apiserver not serving the CRD yet after a restart) is an error
            and the store is kept, never taken for the deletion of everything (a CRD that is
            really deleted deletes its objects first, and the watch says so). ``None``: a 404
            is an error like any other.
        watch_timeout, page_size, backoff, clock: as for
            :class:`~dynquota._k8s.reflector.Reflector` (seconds, items, retry pacing, epoch
            seconds).
        lean: what is kept of each object (default: all but ``metadata.managedFields``;
            client-go's ``cache.TransformFunc``); must keep ``metadata.name``,
            ``namespace`` and ``resourceVersion``.

    ``objects`` maps key to the object as last listed or watched; ``stale`` counts events
    dropped as not newer than the store; ``absent`` says the last list answered 404 and was
    taken as empty.
    """

    def __init__(
        self,
        source: ListerWatcher,
        *,
        name: str,
        on_event: EventHandler,
        on_synced: Callable[[], None] | None = None,
        absent_ok: Callable[[], bool] | None = None,
        watch_timeout: int = 300,
        page_size: int = 500,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.time,
        lean: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(
            source,
            name=name,
            watch_timeout=watch_timeout,
            page_size=page_size,
            backoff=backoff if backoff is not None else Backoff(),
            clock=clock,
        )
        self.on_event = on_event
        self.on_synced = on_synced
        self._lean = lean or _lean
        self.absent_ok = absent_ok
        self.objects: dict[str, dict[str, Any]] = {}
        self._versions: dict[str, int] = {}
        self._tombstones: dict[str, int] = {}
        self.stale = 0
        self.absent = False
        self.listed_once = False

    # -- the store ----------------------------------------------------------------------------

    def convert(self, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        """Keep the whole object but ``metadata.managedFields`` (or what the informer's
        ``lean`` keeps; ``None``, logged, without a name)."""
        if not key_of(obj):
            log.warning("%s: listed object without a name ignored", self.name)
            return None
        return self._lean(obj)

    def replace(self, items: list[dict[str, Any]]) -> None:
        """Swap in a full list: keys it lacks are ``DELETED`` (last state known), new or
        changed objects are passed on with ``event_type`` ``None``; tombstones are dropped
        (the list is newer than all of them)."""
        listed = {key_of(obj): obj for obj in items}
        old = self.objects
        self.objects = {}
        self._versions = {}
        self._tombstones = {}
        for key, obj in old.items():
            if key not in listed:
                self._emit(DELETED, obj)
        for key, obj in listed.items():
            self.objects[key] = obj
            rv = resource_version_int(obj)
            if rv is not None:
                self._versions[key] = rv
            before = old.get(key)
            if before is None or before.get("metadata", {}).get("resourceVersion") != obj.get(
                "metadata", {}
            ).get("resourceVersion"):
                self._emit(None, obj)

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """Apply one watch event unless it is not newer than the store (or the tombstone)."""
        key = key_of(obj)
        if not key:
            return
        rv = resource_version_int(obj)
        held = max(self._versions.get(key, -1), self._tombstones.get(key, -1))
        if rv is not None and rv <= held:
            self.stale += 1
            log.debug(
                "%s: %s %s at %d not newer than %d; dropped", self.name, event_type, key, rv, held
            )
            return
        if event_type == DELETED:
            self._versions.pop(key, None)
            if rv is not None:
                self._tombstones[key] = rv
            if self.objects.pop(key, None) is None:
                return  # never held: nothing to tell
            self._emit(DELETED, obj)
            return
        if event_type in (ADDED, MODIFIED):
            self._tombstones.pop(key, None)
            self.objects[key] = _lean(obj)
            if rv is not None:
                self._versions[key] = rv
            self._emit(event_type, obj)

    def listed(self) -> None:
        """A full list was applied: say so (``on_synced``)."""
        self.absent = False
        self.listed_once = True
        log.info(
            "%s: listed %d objects at resourceVersion %s",
            self.name,
            len(self.objects),
            self.resource_version,
        )
        self._synced()

    async def list_once(self) -> None:
        """As :meth:`Reflector.list_once`; a 404 with ``absent_ok()`` true empties the store
        and counts as synced before the error propagates (so the loop retries with backoff)."""
        try:
            await super().list_once()
        except NotFoundError:
            if self.absent_ok is None or self.listed_once or not self.absent_ok():
                raise
            if not self.absent:
                log.warning("%s: not served (404): taken as empty until it is", self.name)
            self.absent = True
            self.replace([])
            self.mark_synced()
            self._synced()
            raise

    # -- internals ----------------------------------------------------------------------------

    def _synced(self) -> None:
        if self.on_synced is None:
            return
        try:
            self.on_synced()
        except Exception:
            log.exception("%s: on_synced failed", self.name)

    def _emit(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        try:
            self.on_event(event_type, obj)
        except Exception:
            log.exception("%s: handler failed on %s %s", self.name, event_type, key_of(obj))

    def stats(self) -> dict[str, Any]:
        """Counters and times, as :meth:`dynquota.kube.informer.UsageWatcher.stats` gives
        per resource (``objects`` is the store's size)."""
        return {
            "synced": self.synced,
            "resource_version": self.resource_version,
            "objects": len(self.objects),
            "lists": self.lists,
            "relists": self.relists,
            "restarts": self.restarts,
            "watch_cycles": self.watch_cycles,
            "events": self.events,
            "bookmarks": self.bookmarks,
            "stale": self.stale,
            "last_heard": self.last_heard,
            "last_watch_cycle": self.last_watch_cycle,
            "last_error": self.last_error,
        }


def _lean(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A shallow copy of ``obj`` without ``metadata.managedFields``: no handler reads them and
    they are often most of a Namespace's bytes (client-go's informers offer the same trim,
    ``cache.TransformFunc``)."""
    copy = dict(obj)
    meta = copy.get("metadata")
    if isinstance(meta, Mapping) and "managedFields" in meta:
        copy["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return copy
