"""``python -m dynquota`` and the ``kubectl-dynquota`` plugin script (~1 s: one subprocess)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from dynquota import __version__, cli

ROOT = Path(__file__).resolve().parents[2]


def test_python_dash_m_runs_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dynquota", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"dynquota {__version__}\n"


def test_kubectl_plugin_script_names_the_plugin_entry_point() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-dynquota"] == "dynquota.cli:kubectl_plugin"
    assert scripts["dynquota"] == "dynquota.cli:main"


def test_kubectl_plugin_shows_kubectl_dynquota_in_usage(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["kubectl-dynquota", "no-such-command"])
    with pytest.raises(SystemExit) as exit_info:
        cli.kubectl_plugin()
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("usage: kubectl dynquota ")
