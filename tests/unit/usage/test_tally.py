"""Per-namespace tallies (dynquota.usage.tally), including a property test vs a naive model."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynquota.usage import ADDED, DELETED, INDEFINITE, MODIFIED, Entry, ResourceTally

NOW = 1_000_000.0


def test_add_and_count() -> None:
    tally = ResourceTally("pods")
    assert tally.apply(ADDED, "a", "u1", INDEFINITE) is True
    assert tally.apply(ADDED, "a", "u2", INDEFINITE) is True
    assert tally.apply(ADDED, "b", "u3", INDEFINITE) is True
    assert tally.usage("a", NOW) == 2
    assert tally.usage("b", NOW) == 1
    assert tally.usage("missing", NOW) == 0
    assert tally.namespaces() == ["a", "b"]
    assert len(tally) == 3


def test_duplicate_added_is_idempotent() -> None:
    tally = ResourceTally("configmaps")
    assert tally.apply(ADDED, "a", "u1", INDEFINITE) is True
    assert tally.apply(ADDED, "a", "u1", INDEFINITE) is False
    assert tally.apply(MODIFIED, "a", "u1", INDEFINITE) is False
    assert tally.usage("a", NOW) == 1


def test_deleted_unknown_uid_is_harmless() -> None:
    tally = ResourceTally("pods")
    tally.apply(ADDED, "a", "u1", INDEFINITE)
    assert tally.apply(DELETED, "a", "nope", None) is False
    assert tally.apply(DELETED, "elsewhere", "u1", None) is False
    assert tally.usage("a", NOW) == 1
    assert tally.apply(DELETED, "a", "u1", None) is True
    assert tally.apply(DELETED, "a", "u1", None) is False
    assert tally.usage("a", NOW) == 0
    assert tally.namespaces() == []


def test_not_counting_object_is_removed() -> None:
    tally = ResourceTally("pods")
    tally.apply(ADDED, "a", "u1", INDEFINITE)
    assert tally.apply(MODIFIED, "a", "u1", None) is True
    assert tally.usage("a", NOW) == 0
    assert tally.apply(ADDED, "a", "u2", None) is False
    assert len(tally) == 0


def test_terminating_pod_expires() -> None:
    tally = ResourceTally("pods")
    tally.apply(ADDED, "a", "u1", INDEFINITE)
    tally.apply(ADDED, "a", "u2", INDEFINITE)
    assert tally.next_expiry("a", NOW) is None
    # u1 deleted gracefully: deletionTimestamp 10 s ago with grace 30 s.
    assert tally.apply(MODIFIED, "a", "u1", NOW - 10 + 30) is True
    assert tally.usage("a", NOW) == 2
    assert tally.next_expiry("a", NOW) == NOW + 20
    assert tally.usage("a", NOW + 20) == 2
    assert tally.usage("a", NOW + 20.5) == 1
    assert tally.next_expiry("a", NOW + 20.5) is None
    # It stays present (stuck terminating) until DELETED arrives.
    assert len(tally) == 2
    assert tally.apply(DELETED, "a", "u1", None) is True
    assert len(tally) == 1


def test_terminating_past_grace_not_counted() -> None:
    tally = ResourceTally("pods")
    tally.apply(ADDED, "a", "u1", NOW - 10 + 5)
    assert tally.usage("a", NOW) == 0
    assert tally.next_expiry("a", NOW) is None


def test_next_expiry_is_earliest_pending() -> None:
    tally = ResourceTally("pods")
    for uid, expiry in [("u1", NOW + 50), ("u2", NOW + 5), ("u3", NOW - 1), ("u4", INDEFINITE)]:
        tally.apply(ADDED, "a", uid, expiry)
    assert tally.next_expiry("a", NOW) == NOW + 5
    assert tally.next_expiry("a", NOW + 6) == NOW + 50
    assert tally.usages(NOW) == {"a": 3}


def test_shortened_grace_updates_expiry() -> None:
    tally = ResourceTally("pods")
    tally.apply(MODIFIED, "a", "u1", NOW + 60)
    assert tally.apply(MODIFIED, "a", "u1", NOW + 60) is False
    assert tally.apply(MODIFIED, "a", "u1", NOW + 2) is True
    assert tally.next_expiry("a", NOW) == NOW + 2


def test_relist_replaces() -> None:
    tally = ResourceTally("configmaps")
    tally.apply(ADDED, "a", "gone", INDEFINITE)
    tally.apply(ADDED, "a", "stays", INDEFINITE)
    tally.apply(ADDED, "b", "b1", INDEFINITE)
    tally.apply(ADDED, "c", "c1", INDEFINITE)
    changed = tally.replace(
        [
            Entry("a", "stays", INDEFINITE),
            Entry("b", "b1", INDEFINITE),
            Entry("d", "d1", INDEFINITE),
            Entry("d", "d2", None),
        ]
    )
    assert changed == {"a", "c", "d"}
    assert tally.usages(NOW) == {"a": 1, "b": 1, "d": 1}
    assert ("a", "gone") not in tally
    assert ("a", "stays") in tally
    assert tally.namespaces() == ["a", "b", "d"]


def test_relist_detects_changed_expiry() -> None:
    tally = ResourceTally("pods")
    tally.apply(ADDED, "a", "u1", INDEFINITE)
    assert tally.replace([("a", "u1", NOW + 3)]) == {"a"}
    assert tally.replace([("a", "u1", NOW + 3)]) == set()


@pytest.mark.parametrize("event_type", ["BOOKMARK", "ERROR", "added"])
def test_other_event_types_rejected(event_type: str) -> None:
    tally = ResourceTally("pods")
    with pytest.raises(ValueError, match="not a tally event"):
        tally.apply(event_type, "a", "u1", INDEFINITE)


# ---- property test: the tally behaves like a naive dict of (namespace, uid) -> expiry ----

namespaces = st.sampled_from(["a", "b", "c"])
uids = st.sampled_from([f"u{i}" for i in range(8)])
expiries = st.one_of(
    st.none(),
    st.just(INDEFINITE),
    st.integers(min_value=-20, max_value=20).map(lambda d: NOW + d),
)
events = st.tuples(st.sampled_from([ADDED, MODIFIED, DELETED]), namespaces, uids, expiries)
relists = st.lists(st.tuples(namespaces, uids, expiries), max_size=12)
operations = st.lists(st.one_of(events, relists.map(lambda r: ("RELIST", r))), max_size=40)


def naive_usage(model: dict[tuple[str, str], float], namespace: str, now: float) -> int:
    return sum(1 for (ns, _), e in model.items() if ns == namespace and now <= e)


@settings(max_examples=300, deadline=None)
@given(operations, st.integers(min_value=-25, max_value=25))
def test_tally_matches_naive_model(ops: list[tuple[object, ...]], offset: int) -> None:
    tally = ResourceTally("pods")
    model: dict[tuple[str, str], float] = {}
    now = NOW + offset
    for op in ops:
        if op[0] == "RELIST":
            listing = op[1]
            assert isinstance(listing, list)
            before_entries = dict(model)
            model = {}
            for ns, uid, expiry in listing:
                if expiry is not None:
                    model[(ns, uid)] = expiry
            changed = tally.replace(listing)
            expected_changed = {
                ns
                for ns in "abc"
                if {k: v for k, v in before_entries.items() if k[0] == ns}
                != {k: v for k, v in model.items() if k[0] == ns}
            }
            assert changed == expected_changed
            continue
        event_type, ns, uid, expiry = op
        assert isinstance(event_type, str)
        assert isinstance(ns, str)
        assert isinstance(uid, str)
        assert expiry is None or isinstance(expiry, float)
        key = (ns, uid)
        old = model.get(key)
        if event_type == DELETED or expiry is None:
            model.pop(key, None)
        else:
            model[key] = expiry
        changed = tally.apply(event_type, ns, uid, expiry)
        assert changed == (model.get(key) != old)
    for ns in "abc":
        assert tally.usage(ns, now) == naive_usage(model, ns, now)
        pending = [e for (n, _), e in model.items() if n == ns and now <= e and e != INDEFINITE]
        assert tally.next_expiry(ns, now) == (min(pending) if pending else None)
    assert sorted(tally.entries()) == sorted(Entry(ns, uid, e) for (ns, uid), e in model.items())
    assert tally.namespaces() == sorted({ns for ns, _ in model})
    assert len(tally) == len(model)


def test_canonical_uids_are_kept_as_ints_and_given_back_as_text() -> None:
    """A canonical uid is held as its 128-bit int (44 B instead of 85 B); any other text, and a
    non-canonical spelling of a UUID, is kept as given, so two spellings never merge."""
    canonical = str(uuid.uuid4())
    tally = ResourceTally("pods")
    assert tally.upsert("ns", canonical, INDEFINITE)
    assert tally.upsert("ns", canonical.upper(), INDEFINITE)
    assert tally.upsert("ns", "u1", INDEFINITE)
    assert not tally.upsert("ns", canonical, INDEFINITE)
    assert ("ns", canonical) in tally
    assert ("ns", canonical.upper()) in tally
    assert sorted(e.uid for e in tally.entries()) == sorted([canonical, canonical.upper(), "u1"])
    assert tally.usage("ns", 0.0) == 3
    assert tally.remove("ns", canonical)
    assert ("ns", canonical) not in tally
    assert tally.usage("ns", 0.0) == 2
