"""Run the ``dynquota`` command in the test's process (its ``main``), for the CLI tests."""

from __future__ import annotations

import pytest

from dynquota.cli import main


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``dynquota ARGV``: (exit code, stdout, stderr)."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err
