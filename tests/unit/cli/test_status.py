"""``dynquota status``'s text (pure) and its namespace without -n (the context's, as kubectl)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dynquota.cli import main
from dynquota.cli.status import status_text
from dynquota.kube.identity import context_namespace

OBJ = {
    "metadata": {"name": "dynquota", "namespace": "team-a"},
    "status": {
        "asOf": "2027-01-15T08:01:40Z",
        "state": "Enforced",
        "message": "sized by policy p",
        "policy": {
            "name": "p",
            "dryRun": False,
            "resources": {"pods": {"minimum": "10", "maximum": "100", "bufferPercent": 40,
                                   "upscaleCooldown": "1m", "downscaleCooldown": "5m",
                                   "nextRaiseAfter": "2027-01-15T08:01:00Z"}},
            "override": {"allowed": True, "ttl": "168h", "minInterval": "0s"},
        },
        "budget": {"name": "team", "hard": {"pods": "60"}, "slice": {"pods": "20"},
                   "used": {"pods": "31"}, "granted": {"pods": "45"}, "free": {"pods": "15"},
                   "figuresAsOf": "2027-01-15T08:00:00Z"},
    },
}  # fmt: skip


def test_the_text_is_plain_lines_and_columns() -> None:
    assert status_text(OBJ).splitlines() == [
        "namespace: team-a",
        "state: Enforced (as of 2027-01-15T08:01:40Z)",
        "message: sized by policy p",
        "policy: p",
        "KEY   MINIMUM  MAXIMUM  BUFFER  UP  DOWN  NEXT RAISE AFTER",
        "pods  10       100      40%     1m  5m    2027-01-15T08:01:00Z",
        "override: allowed, ttl 168h, minInterval 0s",
        "budget: team (used, granted and free as of 2027-01-15T08:00:00Z)",
        "KEY   HARD  SLICE  USED  GRANTED  FREE",
        "pods  60    20     31    45       15",
    ]


def test_dry_run_says_the_override_does_nothing_and_no_raise_time() -> None:
    import copy

    dry = copy.deepcopy(OBJ)
    dry["status"]["state"] = "DryRun"  # type: ignore[index]
    del dry["status"]["policy"]["resources"]["pods"]["nextRaiseAfter"]  # type: ignore[index]
    lines = status_text(dry).splitlines()
    assert lines[5] == "pods  10       100      40%     1m  5m    -"
    assert lines[6] == (
        "override: allowed, ttl 168h, minInterval 0s (the policy's rules; no effect while "
        "nothing is enforced)"
    )


def test_status_without_n_reads_the_context_namespace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As kubectl: the context's namespace, ``default`` when it names none (port 9 refuses)."""
    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: a\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: a, context: {cluster: c, user: u, namespace: team-q}},"
        " {name: b, context: {cluster: c, user: u}}]\n"
    )
    assert context_namespace(str(config), None) == "team-q"
    assert context_namespace(str(config), "b") == "default"
    with pytest.raises(SystemExit) as exited:
        main(["status", "--kubeconfig", str(config)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("dynquota: error: reading AppliedDynamicQuota dynquota in team-q: ")


def test_the_tarpit_line_says_why_the_tenant_gets_429s() -> None:
    rate = {"limit": 300, "window": "1m", "quietPeriod": "5m", "tarpitted": False}
    quiet = {**OBJ, "status": {**OBJ["status"], "writeRate": rate}}
    assert status_text(quiet).splitlines()[7] == (
        "writeRate: 300 creates+deletes of pods and ConfigMaps in 1m, quiet period 5m; "
        "not in the tarpit"
    )
    held = {**rate, "tarpitted": True, "reason": "tarpit: 480 writes in 60 s (limit 300)"}
    text = status_text({**OBJ, "status": {**OBJ["status"], "writeRate": held}})
    assert text.splitlines()[7] == (
        "writeRate: 300 creates+deletes of pods and ConfigMaps in 1m, quiet period 5m; IN THE "
        "APF TARPIT (tarpit: 480 writes in 60 s (limit 300)): writes of pods and ConfigMaps "
        "here run on a few seats and get 429 (Retry-After) when they are taken, until the "
        "namespace stays at or below half the limit for the quiet period (why am I getting "
        "429s: docs/tenants.md)"
    )


def test_the_tarpit_line_in_dry_run_says_nothing_is_throttled() -> None:
    """LOW-1: it said "IN THE APF TARPIT (... (dry run: not enforced)): writes ... get 429"."""
    held = {
        "limit": 300, "window": "1m", "quietPeriod": "5m", "tarpitted": True,
        "reason": "tarpit: 480 writes in 60 s (limit 300) (dry run: not enforced)",
    }  # fmt: skip
    policy = {**OBJ["status"].get("policy", {}), "dryRun": True}
    text = status_text({**OBJ, "status": {**OBJ["status"], "writeRate": held, "policy": policy}})
    line = next(x for x in text.splitlines() if x.startswith("writeRate:"))
    assert line == (
        "writeRate: 300 creates+deletes of pods and ConfigMaps in 1m, quiet period 5m; WOULD BE "
        "IN THE APF TARPIT (tarpit: 480 writes in 60 s (limit 300)), but the policy is in dry "
        "run: nothing is throttled; once enforced, writes of pods and ConfigMaps here would run "
        "on a few seats and get 429 (Retry-After) when they are taken"
    )
