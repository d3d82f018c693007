"""The chart's alerts tested the Prometheus way, and every metric the alerts and the Grafana
dashboard query checked against a real ``/metrics`` scrape of the running operator.

- ``promtool check rules`` and ``promtool test rules`` (promtool from hack/promtool/install.sh)
  on the PrometheusRule rendered by the real ``helm template``, with the series cases in
  ``tests/alerts/dynquota.test.yaml``: each alert fires when it should and stays silent when it
  should not. A new alert without both kinds of case fails here.
- The metric names in every alert ``expr`` and every dashboard query (panels and template
  variables) must be families the operator declares on ``/metrics``: an in-process operator with
  the chart's RBAC on the operator tests' control plane, scraped over HTTP. A labelled metric
  with no children yet still declares its family (``# TYPE``), so this holds before any
  namespace is managed.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dynquota.testing.controlplane import find_binaries
from dynquota.testing.operator import OperatorThread
from dynquota.testing.promql import missing_metrics, scrape_families, selected_metrics

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "dynquota"
ALERT_TESTS = ROOT / "tests" / "alerts" / "dynquota.test.yaml"
SELECTOR_TESTS = ROOT / "tests" / "alerts" / "selector.test.yaml"
OVERRIDE_TESTS = ROOT / "tests" / "alerts" / "override.test.yaml"
"""DynquotaOverrideHeldLong's cases: two weeks of series, evaluated every 10m."""
RUNBOOK = ROOT / "docs" / "runbook.md"
DASHBOARD = CHART / "dashboards" / "dynquota.json"
RELEASE, NS = "dynquota", "dynquota-system"


@pytest.fixture(scope="module")
def promtool() -> Path:
    """promtool, installed (once, cached by version) by the project's script."""
    done = subprocess.run(
        [str(ROOT / "hack" / "promtool" / "install.sh")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def rule_groups() -> list[dict[str, Any]]:
    """The PrometheusRule's groups as `helm template` renders them with every alert on
    (leader election adds DynquotaNoLeader, the ServiceMonitor DynquotaAbsent, the write-rate
    governor DynquotaNamespaceTarpitted)."""
    return render_groups("--set", "replicaCount=2", "--set", "metrics.serviceMonitor.enabled=true",
                         "--set", "writeRate.enabled=true")  # fmt: skip


def render_groups(*args: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(find_binaries() / "helm"), "template", RELEASE, str(CHART), "--namespace", NS,
         "--set", "metrics.prometheusRule.enabled=true", *args,
         "--show-only", "templates/prometheusrule.yaml"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rule = yaml.safe_load(done.stdout)
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


@pytest.fixture(scope="module")
def rules_dir(rule_groups: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rules.yaml (the rendered groups) beside a copy of the test file, as promtool wants."""
    work = tmp_path_factory.mktemp("alerts")
    (work / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups}, sort_keys=False))
    shutil.copy(ALERT_TESTS, work / ALERT_TESTS.name)
    shutil.copy(OVERRIDE_TESTS, work / OVERRIDE_TESTS.name)
    return work


def alert_names(groups: list[dict[str, Any]]) -> list[str]:
    return [r["alert"] for g in groups for r in g["rules"] if "alert" in r]


def test_promtool_check_rules(promtool: Path, rules_dir: Path) -> None:
    done = subprocess.run(
        [str(promtool), "check", "rules", "rules.yaml"],
        capture_output=True, text=True, cwd=rules_dir, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rules = yaml.safe_load((rules_dir / "rules.yaml").read_text())["groups"]
    assert f"SUCCESS: {len(alert_names(rules))} rules found" in done.stdout


def test_promtool_test_rules(promtool: Path, rules_dir: Path) -> None:
    done = subprocess.run(
        [str(promtool), "test", "rules", ALERT_TESTS.name, OVERRIDE_TESTS.name],
        capture_output=True, text=True, cwd=rules_dir, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_absent_alert_with_the_admins_own_scrape_job(promtool: Path, rules_dir: Path) -> None:
    """Without a ServiceMonitor, `selector` makes DynquotaAbsent (and every other alert) select
    the admin's own scrape job: it fires when that job's target is down, stays silent while
    it is up."""
    groups = render_groups("--set-string", 'metrics.prometheusRule.selector=job="dynquota"')
    (rules_dir / "selector-rules.yaml").write_text(
        yaml.safe_dump({"groups": groups}, sort_keys=False)
    )
    shutil.copy(SELECTOR_TESTS, rules_dir / SELECTOR_TESTS.name)
    done = subprocess.run(
        [str(promtool), "test", "rules", SELECTOR_TESTS.name],
        capture_output=True, text=True, cwd=rules_dir, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # Without either, nothing says which `up` is the operator's: no DynquotaAbsent at all.
    assert "DynquotaAbsent" not in alert_names(render_groups())


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def test_every_alert_links_its_runbook_section(rule_groups: list[dict[str, Any]]) -> None:
    headings = re.findall(r"^#+ (.+)$", RUNBOOK.read_text(), re.MULTILINE)
    anchors = {github_slug(h) for h in headings}
    base = "https://github.com/dynquota/dynquota/blob/main/docs/runbook.md#"
    for group in rule_groups:
        for rule in group["rules"]:
            url = rule["annotations"]["runbook_url"]
            assert url.startswith(base), (rule["alert"], url)
            assert url.removeprefix(base) in anchors, (rule["alert"], url)


def test_promtool_test_rules_can_fail(promtool: Path, rules_dir: Path) -> None:
    """A wrong expectation makes promtool fail (the cases are not vacuous): the kill-switch
    alert with its `for:` shortened by the test would fire too early."""
    cases = yaml.safe_load(ALERT_TESTS.read_text())
    broken = next(c for c in cases["tests"] if c["name"].startswith("kill switch engaged longer"))
    cases["tests"] = [broken]
    broken["alert_rule_test"][0]["eval_time"] = "10m"  # it fires by then: expected [] is wrong
    (rules_dir / "broken.test.yaml").write_text(yaml.safe_dump(cases, sort_keys=False))
    done = subprocess.run(
        [str(promtool), "test", "rules", "broken.test.yaml"],
        capture_output=True, text=True, cwd=rules_dir, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "alertname: DynquotaKillSwitchEngaged" in done.stdout + done.stderr


def test_every_alert_has_a_firing_and_a_silent_case(rule_groups: list[dict[str, Any]]) -> None:
    cases = [
        case
        for path in (ALERT_TESTS, OVERRIDE_TESTS)
        for case in yaml.safe_load(path.read_text())["tests"]
    ]
    firing: set[str] = set()
    silent: set[str] = set()
    for case in cases:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    names = set(alert_names(rule_groups))
    # The alerts the issue asks for (operator down, kill switch engaged too long, usage above
    # maximum, drift, leader missing, reconcile errors) and the invalid-policy one; alerts
    # added later are checked the same way below.
    assert names >= {
        "DynquotaAbsent",
        "DynquotaKillSwitchEngaged",
        "DynquotaNamespaceAtMaximum",
        "DynquotaUsageDrift",
        "DynquotaNoLeader",
        "DynquotaReconcileErrors",
        "DynquotaPolicyInvalid",
        # issue 30: throttled below the maximum for long, overrides held for days
        "DynquotaNamespaceThrottled",
        "DynquotaOverrideHeldLong",
    }
    assert names - firing == set(), "alerts without a case where they fire"
    assert names - silent == set(), "alerts without a case where they stay silent"
    assert (firing | silent) - names == set(), "cases for alerts the chart does not have"


# -- metric names versus a live scrape ----------------------------------------------------------


def dashboard_queries() -> list[str]:
    """Every PromQL query of the dashboard: panel targets and query variables."""
    dash = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]
            queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


@pytest.fixture(scope="module")
def scraped_text(op_cluster_operator: Callable[..., OperatorThread]) -> str:
    """A real scrape of an operator's ``/metrics`` over HTTP (the text format)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    op_cluster_operator(metrics_port=port)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        assert answer.status == 200
        return str(answer.read().decode())


@pytest.fixture(scope="module")
def scraped_families(scraped_text: str) -> dict[str, str]:
    """``{family: type}`` of that scrape."""
    return scrape_families(scraped_text)


def test_fleet_series_in_a_live_scrape(scraped_text: str, scraped_families: dict[str, str]) -> None:
    """Issue 30: the build, the process and the runtime are on the operator's own registry,
    with exactly these labels."""
    from prometheus_client.parser import text_string_to_metric_families

    from dynquota import __version__
    from dynquota.metrics.fleet import build_labels

    samples = {
        s.name: s.labels
        for family in text_string_to_metric_families(scraped_text)
        for s in family.samples
    }
    assert samples["dynquota_build_info"] == build_labels(__version__)
    assert samples["dynquota_build_info"]["version"] == __version__
    for family, kind in (
        ("process_cpu_seconds_total", "counter"), ("process_resident_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"), ("process_start_time_seconds", "gauge"),
        ("python_info", "gauge"), ("python_gc_collections_total", "counter"),
    ):  # fmt: skip
        assert scraped_families.get(family) == kind, family


@pytest.fixture(scope="module")
def op_cluster_operator(op_cluster: Any) -> Iterator[Callable[..., OperatorThread]]:
    """A module-scoped ``start_operator`` (see conftest.py): stopped after the module."""
    from dynquota.testing.operator import operator_settings

    running: list[OperatorThread] = []

    def start(**overrides: Any) -> OperatorThread:
        op = OperatorThread(operator_settings(op_cluster, **overrides))
        running.append(op)
        return op.start()

    yield start
    for op in running:
        op.stop()


def test_alert_metrics_exist_in_a_live_scrape(
    rule_groups: list[dict[str, Any]], scraped_families: dict[str, str]
) -> None:
    used: dict[str, set[str]] = {}
    for group in rule_groups:
        for rule in group["rules"]:
            used[rule.get("alert") or rule["record"]] = selected_metrics(rule["expr"])
    assert all(used.values()), used  # the extraction found something in every rule
    missing = {name: missing_metrics(m, scraped_families) for name, m in used.items()}
    assert {k: v for k, v in missing.items() if v} == {}


def test_dashboard_metrics_exist_in_a_live_scrape(scraped_families: dict[str, str]) -> None:
    queries = dashboard_queries()
    used = {q: selected_metrics(q) for q in queries}
    assert all(used.values()), [q for q, m in used.items() if not m]
    missing = {q: missing_metrics(m, scraped_families) for q, m in used.items()}
    assert {k: v for k, v in missing.items() if v} == {}
    # What the issue asks the dashboard to show, by metric.
    everything = set().union(*used.values())
    for needed in (
        "dynquota_usage",
        "dynquota_hard",
        "dynquota_target",
        "dynquota_maximum",
        "dynquota_resizes_total",
        "dynquota_overrides_active",
        "dynquota_kill_switch_engaged",
        "dynquota_reconcile_duration_seconds_bucket",
        "dynquota_watch_restarts_total",
    ):
        assert needed in everything, needed
