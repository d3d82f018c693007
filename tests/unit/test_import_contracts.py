"""The layer contracts of ``pyproject.toml`` hold, and a forbidden import breaks them.

``lint-imports`` (import-linter, run by ``make lint``) is run on the package as it is, then on
a temporary copy of it with one bad import added: it must exit non-zero naming the contract
the import breaks. About 1 s per run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the ``dynquota`` package in ``tree`` with ``tree/pyproject.toml``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}  # the copy is found before the installed one
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(tree / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_the_package_keeps_every_contract() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "bad_import", "contract"),
    [
        # the low layer reaching up into the operator's adapters
        ("_k8s/paginate.py", "import dynquota.kube.quotas", "layers"),
        # the cycle issue #11 broke: policy reading the operator's settings
        ("policy/selection.py", "import dynquota.settings", "layers"),
        (
            "admission/check.py",
            "import dynquota.usage",
            "admission imports only _k8s and quantity",
        ),
        ("kube/events.py", "import kubernetes", "no sync kubernetes client in the product"),
        # the CLI and `plan` read through the operator's async adapters, never the sync client
        ("cli/plan.py", "import kubernetes", "no sync kubernetes client in the product"),
        # the upward import issue #11 removed: `run`'s flags now live in settings
        ("operator/release.py", "import dynquota.cli", "layers"),
        # one command reaching into another (they share only cli/errors.py)
        ("cli/plan.py", "import dynquota.cli.cleanup", "cli: one command a module"),
        # one part of the operator reaching into another (issue 25: they are handed their
        # collaborators)
        (
            "operator/killswitch.py",
            "import dynquota.operator.apply",
            "operator: the parts that act do not know each other",
        ),
        (
            "operator/deleter.py",
            "import dynquota.operator.reporting",
            "operator: the shared parts do not know each other",
        ),
    ],
)
def test_a_forbidden_import_breaks_its_contract(
    tmp_path: Path, module: str, bad_import: str, contract: str
) -> None:
    shutil.copytree(
        ROOT / "dynquota", tmp_path / "dynquota", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "dynquota" / module
    target.write_text(target.read_text() + f"\n{bad_import}  # added by the test\n")

    done = lint_imports(tmp_path)

    assert done.returncode != 0, done.stdout
    assert f"{contract} BROKEN" in done.stdout, done.stdout
    importer = "dynquota." + module.removesuffix(".py").replace("/", ".")
    assert f"{importer} -> {bad_import.split()[-1]}" in done.stdout, done.stdout
