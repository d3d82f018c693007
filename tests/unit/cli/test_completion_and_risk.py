"""Shell completion from the parser, and plan's at-risk view and wide table (pure)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dynquota.cli import build_parser, kubectl_complete, main
from dynquota.cli.completion import bash_script, candidates
from dynquota.cli.plan_text import plan_text
from dynquota.cli.risk import at_risk, summary
from dynquota.operator.plan_model import BudgetKeyPlan, BudgetMember, BudgetPlan, Plan, PlanRow


def test_candidates_come_from_the_parser() -> None:
    parser = build_parser()
    assert candidates(parser, [""]) == [
        "cleanup", "completion", "demo", "fit", "kill-switch", "override", "plan", "run",
        "status",
    ]  # fmt: skip
    assert candidates(parser, ["plan", "-o", "j"]) == ["json", "jsonpath="]
    assert candidates(parser, ["--as", "x", "kill-switch", "o"]) == ["off", "on"]
    assert candidates(parser, ["plan", "--as-"]) == ["--as-group", "--as-uid"]
    assert candidates(parser, ["completion", ""]) == ["bash", "zsh"]


def test_kubectl_complete_prints_cobras_format(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["kubectl_complete-dynquota", "kill-switch", "s"])
    assert kubectl_complete() == 0
    assert capsys.readouterr().out == "status\n:4\n"
    assert main(["__complete", "plan", "--at"]) == 0
    assert capsys.readouterr().out == "--at-risk\n"


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_bash_script_completes(tmp_path: Path) -> None:
    shim = tmp_path / "dynquota"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m dynquota "$@"\n')
    shim.chmod(0o755)
    script = bash_script() + (
        "COMP_WORDS=(dynquota kill-switch s); COMP_CWORD=2; _dynquota_complete; "
        'echo "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"},
    )
    assert done.stdout == "status\n"


def _row(
    ns: str,
    resource: str,
    used: int | None,
    hard: int | None,
    why: str = "",
    next_: str = "nothing",
) -> PlanRow:
    return PlanRow(ns, resource, used, used, hard, hard, next_, why)


def test_at_risk_sorts_by_urgency_then_use() -> None:
    rows = [
        _row("calm", "pods", 1, 10),
        _row("near", "pods", 9, 10),
        _row("full", "pods", 10, 10),
        _row(
            "slow",
            "pods",
            5,
            10,
            "upscale pods 12: usage 5; the buffer waits for the cooldown until 12:00",
        ),
        _row(
            "capped", "configmaps", 50, 60, "hold configmaps: usage 50, buffer 40%, at maximum 60"
        ),
        _row("frozen", "pods", 2, 10, "frozen: selected by budgets a, b; not written"),
        _row("held", "requests.cpu", None, None, "NeedsDefaultRequests: ...", "held"),
        _row("budget", "pods", 3, 10),
    ]
    member = BudgetMember("budget", 10, 10, 3, 12, None, "")
    budgets = [
        BudgetPlan("b", "", (BudgetKeyPlan("pods", 8, 10, 10, 3, -2, "OverBudget", (member,)),), ())
    ]
    risks = at_risk(rows, budgets)
    assert [(r.row.namespace, r.risk) for r in risks] == [
        ("full", "at limit"),
        ("budget", "over budget"),
        ("frozen", "frozen"),
        ("slow", "throttled"),
        ("capped", "at maximum"),
        ("held", "held"),
        ("near", "near limit"),
    ]
    assert summary(risks, 8) == (
        "7 keys at risk in 7 of 8 namespaces: 1 at limit, 1 over budget, 1 frozen, "
        "1 throttled, 1 at maximum, 1 held, 1 near limit"
    )
    assert summary([], 8) == "nothing at risk in 8 namespaces"
    text = plan_text(
        Plan(rows[:3], [], []), ["h", ""], risks=at_risk(rows[:3], []), shown_namespaces=3
    )
    assert text.splitlines() == [
        "h",
        "",
        "NAMESPACE  RESOURCE  RISK        USE   USED  HARD  TARGET  NEXT     WHY",
        "full       pods      at limit    100%  10    10    10      nothing",
        "near       pods      near limit  90%   9     10    10      nothing",
        "2 keys at risk in 2 of 3 namespaces: 1 at limit, 1 near limit",
    ]
    wide = plan_text(Plan(rows[:2], [], []), [], wide=True).splitlines()
    assert wide == [
        "NAMESPACE  RESOURCE  TALLY  STATUS.USED  HARD  TARGET  USE  RISK        NEXT     WHY",
        "calm       pods      1      1            10    10      10%  -           nothing",
        "near       pods      9      9            10    10      90%  near limit  nothing",
    ]
