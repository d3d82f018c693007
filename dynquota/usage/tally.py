"""Per-namespace tallies of one tracked resource, keyed by object uid (Pure).

A :class:`ResourceTally` holds, per namespace, only what counting needs: the uids of objects
that count indefinitely (keys of a ``dict`` whose values are ``None`` — a compact dict costs
20-40 bytes per entry, a ``set`` 30-150) and, for the rare pods being deleted gracefully,
their expiry (a second small ``dict``). No object, name or label is kept. A uid in the
apiserver's canonical form is kept as its 128-bit ``int`` (44 bytes, where the 36-character
string costs 85), any other uid text as is; see ``docs/usage-tracking.md`` for measurements.

Events are applied idempotently, so a watch that repeats itself cannot skew a count:

- ADDED / MODIFIED: insert or update the object's entry (a duplicate ADDED changes nothing);
  an object that no longer counts (``expiry is None``) is removed.
- DELETED: remove the entry; an unknown uid is ignored.
- a relist replaces everything (:meth:`ResourceTally.replace`): objects missing from it vanish.

Times are seconds since the epoch (float); ``now`` is always passed in.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from typing import Final, NamedTuple

from dynquota.usage.counting import INDEFINITE

__all__ = ["ADDED", "DELETED", "MODIFIED", "Entry", "ResourceTally"]

ADDED: Final = "ADDED"
MODIFIED: Final = "MODIFIED"
DELETED: Final = "DELETED"
_UPSERT_TYPES: Final = frozenset({ADDED, MODIFIED})


class Entry(NamedTuple):
    """One object as the tally sees it: ``namespace``, ``uid`` and ``expiry``.

    ``expiry`` is seconds since the epoch after which the object stops counting
    (:data:`~dynquota.usage.counting.INDEFINITE` for never), or ``None`` if it does not count.
    """

    namespace: str
    uid: str
    expiry: float | None


_Key = int | str


def _key(uid: str) -> _Key:
    """The dict key of a uid: a canonical UUID (what the apiserver assigns) as its 128-bit int,
    which round-trips exactly (:func:`_uid`); any other text unchanged."""
    try:
        value = uuid.UUID(uid)
    except ValueError:
        return uid
    return value.int if str(value) == uid else uid


def _uid(key: _Key) -> str:
    """The uid text of a dict key (inverse of :func:`_key`)."""
    return str(uuid.UUID(int=key)) if isinstance(key, int) else key


class _NamespaceTally:
    """Entries of one namespace: indefinite uids as dict keys, terminating ones with expiries."""

    __slots__ = ("indefinite", "terminating")

    def __init__(self) -> None:
        self.indefinite: dict[_Key, None] = {}
        self.terminating: dict[_Key, float] | None = None

    def __len__(self) -> int:
        return len(self.indefinite) + (len(self.terminating) if self.terminating else 0)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _NamespaceTally):
            return NotImplemented
        return self.indefinite == other.indefinite and (self.terminating or {}) == (
            other.terminating or {}
        )

    __hash__ = None  # type: ignore[assignment]

    def upsert(self, uid: str, expiry: float) -> bool:
        """Insert or update; returns whether anything changed."""
        return self._upsert(_key(uid), expiry)

    def has(self, uid: str) -> bool:
        """Whether ``uid`` has an entry."""
        key = _key(uid)
        return key in self.indefinite or (self.terminating is not None and key in self.terminating)

    def _upsert(self, uid: _Key, expiry: float) -> bool:
        if expiry == INDEFINITE:
            if uid in self.indefinite:
                return False
            if self.terminating is not None and self.terminating.pop(uid, None) is not None:
                # Cannot happen through the API (a deletion is never undone); kept consistent.
                self._drop_empty_terminating()
            self.indefinite[uid] = None
            return True
        if self.terminating is None:
            self.terminating = {}
        elif self.terminating.get(uid) == expiry:
            return False
        self.indefinite.pop(uid, None)
        self.terminating[uid] = expiry
        return True

    def remove(self, uid_text: str) -> bool:
        """Remove; returns whether the uid was present."""
        uid = _key(uid_text)
        if uid in self.indefinite:
            del self.indefinite[uid]
            return True
        if self.terminating is not None and uid in self.terminating:
            del self.terminating[uid]
            self._drop_empty_terminating()
            return True
        return False

    def _drop_empty_terminating(self) -> None:
        if not self.terminating:
            self.terminating = None

    def usage(self, now: float) -> int:
        count = len(self.indefinite)
        if self.terminating:
            count += sum(1 for expiry in self.terminating.values() if now <= expiry)
        return count

    def next_expiry(self, now: float) -> float | None:
        if not self.terminating:
            return None
        pending = [expiry for expiry in self.terminating.values() if now <= expiry]
        return min(pending) if pending else None


class ResourceTally:
    """Usage of one tracked resource (``pods`` or ``configmaps``) in every namespace.

    Pure: no I/O, no clock. Shapes: namespaces and uids are strings, expiries and ``now``
    are seconds since the epoch (float), usages are counts (int).
    """

    __slots__ = ("_namespaces", "resource")

    def __init__(self, resource: str) -> None:
        self.resource = resource
        self._namespaces: dict[str, _NamespaceTally] = {}

    def __len__(self) -> int:
        """Number of objects held (counting or expired-but-present), all namespaces."""
        return sum(len(ns) for ns in self._namespaces.values())

    def __contains__(self, key: object) -> bool:
        """Whether ``(namespace, uid)`` has an entry."""
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        namespace, uid = key
        ns = self._namespaces.get(namespace)
        if ns is None:
            return False
        return isinstance(uid, str) and ns.has(uid)

    def apply(self, event_type: str, namespace: str, uid: str, expiry: float | None) -> bool:
        """Apply one watch event (``ADDED``, ``MODIFIED`` or ``DELETED``).

        ``expiry`` as in :class:`Entry` (ignored for DELETED). Returns whether the namespace's
        entries changed (an object came, went, or got a new expiry); ``False`` for a duplicate
        ADDED or a DELETED of an unknown uid. Raises ``ValueError`` for any other event type
        (``BOOKMARK`` and ``ERROR`` never reach a tally).
        """
        if event_type in _UPSERT_TYPES:
            if expiry is None:
                return self.remove(namespace, uid)
            return self.upsert(namespace, uid, expiry)
        if event_type == DELETED:
            return self.remove(namespace, uid)
        raise ValueError(f"not a tally event: {event_type!r}")

    def upsert(self, namespace: str, uid: str, expiry: float) -> bool:
        """Insert or update one counting object; returns whether anything changed."""
        ns = self._namespaces.get(namespace)
        if ns is None:
            ns = self._namespaces[namespace] = _NamespaceTally()
        return ns.upsert(uid, expiry)

    def remove(self, namespace: str, uid: str) -> bool:
        """Forget one object; returns whether it was present. Empty namespaces are dropped."""
        ns = self._namespaces.get(namespace)
        if ns is None or not ns.remove(uid):
            return False
        if not len(ns):
            del self._namespaces[namespace]
        return True

    def replace(self, entries: Iterable[Entry | tuple[str, str, float | None]]) -> set[str]:
        """Replace every entry with ``entries`` (a full relist); returns changed namespaces.

        Objects absent from ``entries`` vanish; entries with ``expiry is None`` are skipped.
        A namespace is "changed" when its set of entries (uids and expiries) differs.
        """
        fresh: dict[str, _NamespaceTally] = {}
        for namespace, uid, expiry in entries:
            if expiry is None:
                continue
            ns = fresh.get(namespace)
            if ns is None:
                ns = fresh[namespace] = _NamespaceTally()
            ns.upsert(uid, expiry)
        old = self._namespaces
        changed = {name for name, ns in fresh.items() if old.get(name) != ns}
        changed.update(name for name in old if name not in fresh)
        self._namespaces = fresh
        return changed

    def usage(self, namespace: str, now: float) -> int:
        """Count of objects the quota charges in ``namespace`` at ``now`` (0 if none)."""
        ns = self._namespaces.get(namespace)
        return ns.usage(now) if ns is not None else 0

    def next_expiry(self, namespace: str, now: float) -> float | None:
        """Earliest expiry ``>= now`` in ``namespace``, or ``None`` if no count is pending.

        Usage drops just after the returned instant: ``usage(ns, t)`` is smaller for every
        ``t > next_expiry(ns, now)``. A caller re-checks then (e.g. one second later, since
        Kubernetes timestamps have whole seconds).
        """
        ns = self._namespaces.get(namespace)
        return ns.next_expiry(now) if ns is not None else None

    def namespaces(self) -> list[str]:
        """Namespaces that hold at least one object, sorted."""
        return sorted(self._namespaces)

    def usages(self, now: float) -> dict[str, int]:
        """``{namespace: usage}`` for every namespace holding objects, at ``now``."""
        return {name: ns.usage(now) for name, ns in self._namespaces.items()}

    def entries(self) -> Iterator[Entry]:
        """Every entry held, in no particular order (for tests and diagnostics)."""
        for namespace, ns in self._namespaces.items():
            for key in ns.indefinite:
                yield Entry(namespace, _uid(key), INDEFINITE)
            if ns.terminating:
                for key, expiry in ns.terminating.items():
                    yield Entry(namespace, _uid(key), expiry)
