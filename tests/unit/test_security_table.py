"""SECURITY.md's table of what a leaked operator token can and cannot do, in step with the
test that tries each row as the token (tests/integration/test_token_matrix.py): the same row
ids, each with the same enforcing layer. A row without a test, or a test without a row, fails
here."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECURITY = ROOT / "SECURITY.md"
MATRIX = ROOT / "tests" / "integration" / "test_token_matrix.py"
HEADING = "## What a leaked operator token can and cannot do"


def table_rows() -> dict[str, tuple[str, str]]:
    """Test id -> (outcome, layer) of every row of the table under :data:`HEADING`."""
    text = SECURITY.read_text()
    start = text.index(HEADING)
    end = text.find("\n## ", start + len(HEADING))
    section = text[start : end if end != -1 else len(text)]
    rows = re.findall(r"^\| `([a-z0-9-]+)` \| .+ \| (403|admitted) \| (RBAC|policy|nothing) \|$",
                      section, re.MULTILINE)  # fmt: skip
    return {row_id: (outcome, layer) for row_id, outcome, layer in rows}


def matrix_rows() -> dict[str, tuple[str, str]]:
    """Test id -> (outcome, layer) of every row of the token-matrix test (its module is
    loaded, not run: nothing there talks to a cluster at import)."""
    spec = importlib.util.spec_from_file_location("token_matrix", MATRIX)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return {
        row.id: ("admitted" if row.outcome is None else "403", row.layer) for row in module.ROWS
    }


def test_every_table_row_has_its_test_with_the_same_layer_and_outcome() -> None:
    table, tests = table_rows(), matrix_rows()
    assert len(table) >= 20, table
    assert table == tests


def test_the_table_names_what_no_layer_bounds() -> None:
    text = SECURITY.read_text()
    assert "`pods: 0`" in text
    assert "in **every managed namespace**" in text
    assert "**revoke the token**" in text
    assert "**engage the kill switch**" in text
