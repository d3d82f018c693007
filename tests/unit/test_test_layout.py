"""The test tree itself. pytest imports a test module outside a package by its basename, so two
such files with one name in different directories break collection of the whole suite. The unit
tests mirror the package (``tests/unit/<package>/test_<module>.py``) inside the package ``unit``
(every directory holding tests has an ``__init__.py``), so pytest imports them by their dotted
name (``unit.kube.test_leader``), and they may share a basename with an integration test."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PACKAGE = TESTS.parent / "dynquota"


def test_test_module_basenames_are_unique() -> None:
    unit = TESTS / "unit"
    holding = [d for d in [unit, *unit.rglob("*")] if d.is_dir() and any(d.glob("*.py"))]
    assert [str(d.relative_to(TESTS)) for d in holding if not (d / "__init__.py").exists()] == []
    # tests/unit/<package>/ mirrors dynquota/<package>/
    assert sorted(d.name for d in holding if d != unit and not (PACKAGE / d.name).is_dir()) == []
    names = Counter(p.name for p in TESTS.rglob("test_*.py") if unit not in p.parents)
    assert [name for name, n in names.items() if n > 1] == []
