"""Benchmark: bytes a tally retains per object, uid kept as text vs as the tally keeps it.

    .venv/bin/pytest -m bench -s tests/bench/test_tally_memory_bench.py

Both structures are built in this process from the same fresh uid strings (as a JSON decoder
hands them over), under ``tracemalloc``; the baseline is the v0.1 layout (per-namespace dict
keyed by the uid text). Knobs: ``DYNQUOTA_BENCH_TALLY_OBJECTS`` (150,000),
``DYNQUOTA_BENCH_TALLY_NAMESPACES`` (2,000).
"""

from __future__ import annotations

import gc
import os
import tracemalloc
import uuid
from collections.abc import Callable

import pytest

from dynquota.usage import INDEFINITE, ResourceTally

pytestmark = pytest.mark.bench

OBJECTS = int(os.environ.get("DYNQUOTA_BENCH_TALLY_OBJECTS", "150000"))
NAMESPACES = int(os.environ.get("DYNQUOTA_BENCH_TALLY_NAMESPACES", "2000"))


def _retained(build: Callable[[list[str]], object]) -> float:
    """Bytes per object retained by what ``build`` returns (the uids count only if kept)."""
    uids = [str(uuid.uuid4()) for _ in range(OBJECTS)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = build([u.encode().decode() for u in uids])  # fresh strings, as decoded from JSON
    del uids
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert kept is not None
    return (after - before) / OBJECTS


def _text_keyed(uids: list[str]) -> object:
    tally: dict[str, dict[str, None]] = {}
    for i, uid in enumerate(uids):
        tally.setdefault(f"ns-{i % NAMESPACES}", {})[uid] = None
    return tally


def _tally(uids: list[str]) -> object:
    tally = ResourceTally("pods")
    for i, uid in enumerate(uids):
        tally.upsert(f"ns-{i % NAMESPACES}", uid, INDEFINITE)
    return tally


def test_tally_bytes_per_object() -> None:
    baseline = _retained(_text_keyed)
    ours = _retained(_tally)
    print(
        f"\n{OBJECTS:,} objects in {NAMESPACES:,} namespaces: uid text keys {baseline:.1f} "
        f"B/object, ResourceTally {ours:.1f} B/object, ratio {ours / baseline:.2f}"
    )
    assert ours < baseline
