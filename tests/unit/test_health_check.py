"""docs/operator.md's Argo CD health check (Lua), run with Lua (lupa) on DynamicQuotaPolicy and
QuotaBudget objects in each state the summary conditions describe (issue 30)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from lupa import LuaRuntime

from dynquota.policy.readiness import set_readiness

ROOT = Path(__file__).resolve().parents[2]


def health_script() -> str:
    text = (ROOT / "docs" / "operator.md").read_text()
    (script,) = re.findall(r"```lua\n(.*?)```", text, re.DOTALL)
    return script


def argo_health(obj: dict[str, Any]) -> tuple[str, str]:
    """(status, message) as Argo CD's health check returns them for ``obj``."""
    lua = LuaRuntime(unpack_returned_tuples=True)
    check = lua.eval(f"function(obj)\n{health_script()}\nend")
    hs = check(to_lua(lua, obj))
    return str(hs["status"]), str(hs["message"])


def to_lua(lua: LuaRuntime, value: Any) -> Any:
    """JSON-like Python as Lua tables (lists 1-based, as Argo CD's converter makes them)."""
    if isinstance(value, dict):
        return lua.table_from({k: to_lua(lua, v) for k, v in value.items()})
    if isinstance(value, list):
        return lua.table_from([to_lua(lua, v) for v in value])
    return value


def obj(
    conditions: list[dict[str, Any]] | None, generation: int = 2, observed: int = 2
) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": "p", "generation": generation}}
    if conditions is not None:
        body["status"] = {"observedGeneration": observed, "conditions": conditions}
    return body


def with_readiness(kind: str, *given: tuple[str, str, str]) -> list[dict[str, Any]]:
    conditions = [{"type": t, "status": s, "reason": r, "message": f"{t} says {r}"}
                  for t, s, r in given]  # fmt: skip
    set_readiness(conditions, kind, 2, "2026-12-04T10:00:00Z")  # type: ignore[arg-type]
    return conditions


@pytest.mark.parametrize(
    ("kind", "given", "status", "message"),
    [
        ("DynamicQuotaPolicy", [("Valid", "True", "Valid")], "Healthy",
         "the policy is valid and applied to the namespaces it governs"),
        ("DynamicQuotaPolicy", [("Valid", "False", "Invalid")], "Degraded",
         "InvalidSpec: the spec is invalid and its namespaces are frozen: Valid says Invalid"),
        ("DynamicQuotaPolicy", [("Valid", "True", "Valid"),
                                ("QuotaControllerStalled", "True", "SpecNotCopied")],
         "Degraded", "QuotaControllerStalled: QuotaControllerStalled says SpecNotCopied"),
        ("DynamicQuotaPolicy", [], "Progressing",
         "NotObserved: dynquota has not validated this generation yet"),
        ("QuotaBudget", [("Valid", "True", "Valid"), ("Rebalancing", "False", "Settled")],
         "Healthy", "every member's slice is enforced and the budget holds"),
        ("QuotaBudget", [("Valid", "True", "Valid"), ("OverBudget", "True", "OverBudget")],
         "Degraded", "OverBudget: OverBudget says OverBudget"),
        ("QuotaBudget", [("Valid", "True", "Valid"), ("AtRisk", "True", "Unenforced")],
         "Progressing", "AtRisk: AtRisk says Unenforced"),
    ],
)  # fmt: skip
def test_argo_cd_health_follows_the_summary_conditions(
    kind: str, given: list[tuple[str, str, str]], status: str, message: str
) -> None:
    assert argo_health(obj(with_readiness(kind, *given))) == (status, message)


def test_no_status_or_an_old_generation_is_progressing() -> None:
    assert argo_health(obj(None)) == ("Progressing", "waiting for dynquota")
    ready = with_readiness("QuotaBudget", ("Valid", "True", "Valid"))
    assert argo_health(obj(ready, generation=3, observed=2)) == (
        "Progressing",
        "dynquota has not observed the current generation",
    )


def test_a_broken_script_would_fail_here() -> None:
    """The check runs the documented text: a typo in it is a Lua error, not a pass."""
    from lupa import LuaError

    lua = LuaRuntime()
    with pytest.raises(LuaError):
        lua.execute(health_script().replace("then", "than", 1))
