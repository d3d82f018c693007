"""docs/architecture.md cannot drift from the code (issue 25).

Its tables name every module of the package, and its "Where a quota is deleted or shrunk" table
names only files and functions that exist. A module counts as named when a table row names its
path (``operator/deleter.py``), when a table under a heading naming its package
(``dynquota/operator/``) names its file (``deleter.py``), or when the row of the layers contract
whose container is its package lists it as a layer. The checks are plain functions of the
document's text, so a planted drift shows what fails.
"""

from __future__ import annotations

import ast
import re
import shutil
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from dynquota.names import EventReason

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dynquota"
DOC = ROOT / "docs" / "architecture.md"
SHRUNK = "## Where a quota is deleted or shrunk"


def tables(text: str) -> Iterator[tuple[str, str]]:
    """``(heading, row)`` for every Markdown table row of ``text``, under its last heading."""
    heading = ""
    for line in text.splitlines():
        if line.startswith("#"):
            heading = line
        elif line.startswith("|"):
            yield heading, line


def _named_as_layer(row: str, name: str) -> bool:
    return any(f"{a}{name}{b}" in row for a in "` " for b in "` ")


def unlisted_modules(text: str, package: Path = PACKAGE) -> list[str]:
    """The modules of ``package`` (paths relative to it) no table of ``text`` names."""
    rows = list(tables(text))
    config = tomllib.loads((package.parent / "pyproject.toml").read_text())
    contract_rows = {
        contract["containers"][0].removeprefix("dynquota.").replace(".", "/"): row
        for contract in config["tool"]["importlinter"]["contracts"]
        if contract["type"] == "layers" and contract["name"] != "layers"
        for _, row in rows
        if row.startswith(f"| `{contract['name']}` |")
    }
    missing = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        folder = relative.parent.as_posix()
        home = "dynquota/" if folder == "." else f"dynquota/{folder}/"
        named = any(f"`{relative.as_posix()}`" in row for _, row in rows) or any(
            f"`{relative.name}`" in row for heading, row in rows if f"`{home}`" in heading
        )
        layered = folder in contract_rows and _named_as_layer(contract_rows[folder], path.stem)
        if not (named or layered or (relative.name == "__init__.py" and folder != ".")):
            missing.append(relative.as_posix())
    return missing


@cache
def _definitions(path: Path) -> frozenset[str]:
    """Every name ``path`` defines: top-level and nested functions, classes and assignments,
    and ``Class.member`` for each member of a class."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    names.add(f"{node.name}.{item.name}")
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(f"{node.name}.{item.target.id}")
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return frozenset(names)


def _defined(name: str, package: Path) -> bool:
    return any(name in _definitions(path) for path in package.rglob("*.py"))


CODE_NAME = re.compile(r"^[A-Za-z_][\w.]*(\(\))?$")
REASONS = frozenset(reason.value for reason in EventReason)


def _reads_as_code(token: str, after_file: bool) -> bool:
    if CODE_NAME.match(token) is None or token in REASONS:  # an Event's reason is no code
        return False
    return (
        after_file or "." in token or token.endswith("()") or token[0] == "_" or token[0].isupper()
    )


def missing_names(text: str, package: Path = PACKAGE) -> list[str]:
    """The files, functions and classes the "deleted or shrunk" table's second column names
    that do not exist in ``package``. A backticked token is a file when it ends in ``.py``, a
    name when it follows a file or reads as code (``Class.method``, ``call()``, ``_private``,
    ``ClassName``); lower-case words elsewhere (a change's kind) and Event reasons are prose."""
    section = text[text.index(SHRUNK) :]
    section = section[: section.find("\n## ", 1)]
    missing = []
    rows = [row for _, row in tables(section)][2:]  # past the header and its rule
    assert rows, "the deleted-or-shrunk table is empty"
    for row in rows:
        cells = row.split(" | ")
        after_file = False
        for token in re.findall(r"`([^`]+)`", cells[1]):
            if token.endswith(".py"):
                if not (package / token).is_file():
                    missing.append(token)
                after_file = True
                continue
            code = _reads_as_code(token, after_file)
            after_file = False
            if code and not _defined(token.removesuffix("()"), package):
                missing.append(token)
    return missing


def test_every_module_is_in_a_table() -> None:
    assert unlisted_modules(DOC.read_text()) == []


def test_the_deleted_or_shrunk_table_names_what_exists() -> None:
    assert missing_names(DOC.read_text()) == []


def test_every_contract_has_a_row() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    rows = [row for heading, row in tables(DOC.read_text()) if heading == "## The contracts"]
    names = [c["name"] for c in config["tool"]["importlinter"]["contracts"]]
    assert [n for n in names if not any(r.startswith(f"| `{n}` |") for r in rows)] == []


def test_a_planted_drift_fails(tmp_path: Path) -> None:
    """The checks above catch a module the tables do not name and a function renamed away."""
    shutil.copytree(PACKAGE, tmp_path / "dynquota", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "dynquota" / "operator" / "remover.py").write_text('"""Planted."""\n')
    text = DOC.read_text()
    assert unlisted_modules(text, tmp_path / "dynquota") == ["operator/remover.py"]
    sweep = "`KillSwitch._sweep` → `operator/deleter.py` `Deleter.delete`"
    renamed = text.replace(sweep, sweep.replace("Deleter.delete", "Deleter.delete_managed"))
    assert missing_names(renamed) == ["Deleter.delete_managed"]
