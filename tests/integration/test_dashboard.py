"""The Grafana dashboard's queries run by a real Prometheus against a live scrape (issue 30).

A Prometheus server (Debian's package, unpacked by hack/promtool/install.sh like promtool)
scrapes an in-process operator every second, as job ``dynquota`` with ``cluster="test-a"``
added by its scrape config, while the operator manages three namespaces: ``busy`` pressed
against a hard limit below its maximum (throttled), ``calm`` with room, and ``held`` under a
tenant override. Every panel query and variable of ``helm/dynquota/dashboards/dynquota.json``
is evaluated with Grafana's variables filled in, and the figures the issue asks for are
compared with exact values: the top-N table, the throttled table, the overrides table, the
versions table and the fleet counts (compared with the operator's own registry).
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dynquota import __version__
from dynquota.testing.operator import OperatorCluster, OperatorThread
from dynquota.testing.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "helm" / "dynquota" / "dashboards" / "dynquota.json"
CLUSTER, JOB = "test-a", "dynquota"
VARIABLES = {
    "$__rate_interval": "1m",
    "$cluster": CLUSTER,
    "$job": JOB,
    "$namespace": ".*",
    "$resource": ".*",
    "$enforcement": ".*",
    "$topn": "20",
}
# Panels whose queries may answer nothing here (nothing grows, nothing is above its maximum,
# nothing failed): they must still be valid PromQL that Prometheus evaluates.
MAY_BE_EMPTY = {
    "Soonest to exhaustion",
    "Usage above the maximum",
    "Writes held",
    "Watch restarts and relists",
    "API errors and conflicts",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fill(expr: str) -> str:
    """``expr`` with the dashboard's variables as Grafana sends them (longest names first)."""
    for name in sorted(VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, VARIABLES[name])
    return expr


class Prometheus:
    """A Prometheus server scraping one target; :meth:`query` evaluates PromQL."""

    def __init__(self, binary: Path, target: str, work: Path) -> None:
        self.port = free_port()
        config = work / "prometheus.yml"
        config.write_text(
            json.dumps({
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [{
                    "job_name": JOB,
                    "static_configs": [{"targets": [target], "labels": {"cluster": CLUSTER}}],
                }],
            })
        )  # fmt: skip
        self.log = (work / "prometheus.log").open("w")
        self.process = subprocess.Popen(
            [str(binary), f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_until(self._ready, "Prometheus ready", timeout=60)

    def _ready(self) -> bool:
        assert self.process.poll() is None, "Prometheus exited (see prometheus.log)"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=30) as answer:
            body = json.loads(answer.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of ``expr`` as ``[{"metric": {...}, "value": float}]``, evaluated
        now, or, for a subquery (``[...:1m]``), at the next whole minute: its steps are aligned
        to the minute, so evaluated now one begun after the last boundary sees no step yet
        (the 5m lookback reaches back from there)."""
        at = math.ceil(time.time() / 60) * 60 if ":1m]" in expr else time.time()
        data = self.api("query", query=expr, time=f"{at:.3f}")
        assert data["resultType"] == "vector", data
        return [{"metric": r["metric"], "value": float(r["value"][1])} for r in data["result"]]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


@pytest.fixture(scope="module")
def prometheus_binary() -> Path:
    done = subprocess.run(
        [str(ROOT / "hack" / "promtool" / "install.sh"), "prometheus"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip().splitlines()[-1])


def profile(minimum: int, maximum: int, buffer: int = 0, up: str = "1h") -> dict[str, Any]:
    return {"bufferPercent": buffer, "minimum": minimum, "maximum": maximum,
            "upscaleCooldown": up, "downscaleCooldown": "1h"}  # fmt: skip


@pytest.fixture(scope="module")
def fleet(
    op_cluster: OperatorCluster,
    prometheus_binary: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Prometheus, OperatorThread, dict[str, str]]]:
    """Prometheus scraping an operator that manages ``busy``, ``calm`` and ``held``."""
    from dynquota.testing.operator import operator_settings

    label = {"dq-dash": "1"}
    busy = op_cluster.new_namespace(label)
    calm = op_cluster.new_namespace(label)
    held = op_cluster.new_namespace(label)
    op_cluster.create_pods(busy, 2)  # pods hard 2 (buffer 0, minimum 2): at the limit
    op_cluster.create_pods(calm, 1)
    op_cluster.policy("p-dash", label, pods=profile(2, 100), configmaps=profile(20, 200, 40))
    port = free_port()
    op = OperatorThread(operator_settings(op_cluster, metrics_port=port, override_ttl="1h")).start()
    prom: Prometheus | None = None
    try:
        op_cluster.wait_hard(busy, {"pods": "2", "configmaps": "20"})
        op_cluster.wait_hard(held, {"pods": "2", "configmaps": "20"})
        op_cluster.core.patch_namespaced_resource_quota(
            "dynquota", held, {"metadata": {"annotations": {"dynquota.io/override": "max"}}}
        )
        op_cluster.wait_hard(held, {"pods": "100", "configmaps": "200"})
        prom = Prometheus(prometheus_binary, f"127.0.0.1:{port}", tmp_path_factory.mktemp("prom"))
        wait_until(
            lambda: (
                prom is not None and prom.query(f'dynquota_overrides_active{{namespace="{held}"}}')
            ),
            "Prometheus has scraped the override",
            timeout=60,
        )
        # enough samples for the rate() panels over their 1m window
        wait_until(
            lambda: (
                prom is not None and prom.query(f'count_over_time(up{{job="{JOB}"}}[1m]) >= 10')
            ),
            "ten scrapes",
            timeout=60,
        )
        yield prom, op, {"busy": busy, "calm": calm, "held": held}
    finally:
        if prom is not None:
            prom.stop()
        op.stop()
        op_cluster.delete_policy("p-dash")
        for ns in (busy, calm, held):
            op_cluster.delete_namespace(ns)


def panel_queries() -> list[tuple[str, str, str]]:
    """``(panel title, refId, expr)`` of every panel target."""
    dash = json.loads(DASHBOARD.read_text())
    return [
        (p["title"], t["refId"], t["expr"]) for p in dash["panels"] for t in p.get("targets", [])
    ]


def one_panel(title: str) -> dict[str, str]:
    return {ref: expr for t, ref, expr in panel_queries() if t == title}


def by_ns(rows: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    return {(r["metric"]["namespace"], r["metric"].get("resource", "")): r["value"] for r in rows}


Fleet = tuple[Prometheus, OperatorThread, dict[str, str]]


def test_the_dashboard_has_no_repeated_rows_and_has_fleet_variables() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert [p for p in dash["panels"] if p.get("repeat")] == []
    names = [v["name"] for v in dash["templating"]["list"]]
    assert names == ["datasource", "cluster", "job", "namespace", "resource", "enforcement", "topn"]
    for title, _, expr in panel_queries():
        assert 'cluster=~"$cluster"' in expr, (title, expr)
        assert 'job=~"$job"' in expr, (title, expr)
    tables = [p["title"] for p in dash["panels"] if p["type"] == "table"]
    assert "Top usage / hard" in tables
    assert "Throttled below the maximum (minutes in the last hour)" in tables


def test_every_panel_query_answers_on_a_live_scrape(fleet: Fleet) -> None:
    prom, _, _ = fleet
    empty = []
    for title, ref, expr in panel_queries():
        rows = prom.query(fill(expr))  # a PromQL error fails in Prometheus.api
        if not rows and title not in MAY_BE_EMPTY:
            empty.append(f"{title} {ref}: {fill(expr)}")
    assert empty == []


def test_variables_list_the_live_values(fleet: Fleet) -> None:
    prom, _, names = fleet
    dash = json.loads(DASHBOARD.read_text())
    found = {}
    for var in dash["templating"]["list"]:
        if var["type"] != "query":
            continue
        query = var["query"]["query"]
        metric_part, label = query.removeprefix("label_values(").removesuffix(")").rsplit(", ", 1)
        found[var["name"]] = set(
            prom.api(f"label/{label}/values", **{"match[]": fill(metric_part)})
        )
    assert found["cluster"] == {CLUSTER}
    assert found["job"] == {JOB}
    assert set(names.values()) <= found["namespace"]
    assert {"pods", "configmaps"} <= found["resource"]


def test_top_usage_table_has_exact_figures(fleet: Fleet) -> None:
    prom, _, names = fleet
    queries = one_panel("Top usage / hard")
    ratio = by_ns(prom.query(fill(queries["A"])))
    assert ratio[(names["busy"], "pods")] == 1.0  # 2 pods of 2
    assert ratio[(names["calm"], "pods")] == 0.5  # 1 pod of 2 (minimum 2)
    assert ratio[(names["held"], "pods")] == 0.0  # overridden to 100, no pod
    columns = {ref: by_ns(prom.query(fill(queries[ref]))) for ref in "BCDE"}
    assert {ref: col[(names["busy"], "pods")] for ref, col in columns.items()} == {
        "B": 2.0, "C": 2.0, "D": 100.0, "E": 2.0,  # usage, hard, maximum, target
    }  # fmt: skip
    assert columns["C"][(names["held"], "pods")] == 100.0


def test_throttled_table_names_the_namespace_at_a_hard_below_its_maximum(fleet: Fleet) -> None:
    prom, _, names = fleet
    queries = one_panel("Throttled below the maximum (minutes in the last hour)")
    minutes = by_ns(prom.query(fill(queries["A"])))
    ours = {k: v for k, v in minutes.items() if k[0] in names.values()}
    assert set(ours) == {(names["busy"], "pods")}
    assert ours[(names["busy"], "pods")] >= 1
    assert by_ns(prom.query(fill(queries["B"])))[(names["busy"], "pods")] == 2.0
    assert by_ns(prom.query(fill(queries["C"])))[(names["busy"], "pods")] == 100.0
    (throttled_now,) = prom.query(fill(one_panel("Throttled now")["A"]))
    assert throttled_now["value"] == 1.0


def test_overrides_table_and_fleet_counts_match_the_operator(fleet: Fleet) -> None:
    prom, op, names = fleet
    (overrides,) = prom.query(fill(one_panel("Overrides (hours held in the last 14 days)")["A"]))
    assert overrides["metric"]["namespace"] == names["held"]
    assert overrides["value"] > 0
    (active,) = prom.query(fill(one_panel("Overrides active")["A"]))
    assert active["value"] == 1.0
    (versions,) = prom.query(fill(one_panel("Versions")["A"]))
    assert versions["metric"] == {"cluster": CLUSTER, "job": JOB, "version": __version__}
    assert versions["value"] == 1.0
    (operators,) = prom.query(fill(one_panel("Operators")["A"]))
    assert operators["value"] == 1.0
    assert op.runtime is not None
    metrics = op.runtime.metrics
    modes = [metrics.enforcement(ns) for ns in names.values()]
    for title, mode in (("Enforced namespaces", "enforced"), ("Dry-run namespaces", "dry-run")):
        (count,) = prom.query(fill(one_panel(title)["A"]))
        assert count["value"] == modes.count(mode), title
    (managed,) = prom.query(fill(one_panel("Managed namespaces")["A"]))
    assert managed["value"] == metrics.registry.get_sample_value("dynquota_managed_namespaces")
    # every per-namespace series carries the enforcement the operator says
    rows = prom.query(f'dynquota_hard{{cluster="{CLUSTER}", namespace="{names["busy"]}"}}')
    assert {r["metric"]["enforcement"] for r in rows} == {metrics.enforcement(names["busy"])}


def test_a_query_error_would_fail(fleet: Fleet) -> None:
    """The harness is not vacuous: Prometheus refuses bad PromQL and the test sees it."""
    prom, _, _ = fleet
    with pytest.raises(urllib.error.HTTPError):
        prom.query("sum by (namespace (dynquota_hard)")
