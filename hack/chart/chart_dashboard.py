"""The Grafana dashboard (``helm/dynquota/dashboards/dynquota.json``), built for a fleet of
clusters with hundreds of namespaces each: written by ``make chart-generate`` (generate.py calls
:func:`dashboard`), checked for staleness by the unit tests, its queries run against a live
scrape by ``tests/integration/test_dashboard.py``.

Decisions (docs/metrics.md "Grafana dashboard"):

- No per-namespace repeated rows: 300 namespaces made 900 panels with "All". Namespaces
  appear as rows of top-N tables (``$topn``: 10, 20, 50) and as one aggregated graph of the
  selection.
- ``cluster`` and ``job`` variables on every query (``allValue: .*``, so a Prometheus without
  a ``cluster`` label still matches); ``namespace``, ``resource`` and ``enforcement`` filter
  the per-namespace panels.
- Only PromQL that Prometheus 2.42 (Debian's, what CI runs) and 3.x evaluate alike.
"""

from __future__ import annotations

from typing import Any

DS = {"type": "prometheus", "uid": "${datasource}"}
S = 'cluster=~"$cluster", job=~"$job"'
"""The selector of the operator-wide series."""
N = f'{S}, namespace=~"$namespace", resource=~"$resource", enforcement=~"$enforcement"'
"""The selector of the per-namespace series."""
BY = "cluster, namespace, resource"


def per_ns(metric: str, extra: str = "") -> str:
    """``max by (cluster, namespace, resource)`` of a per-namespace gauge (replicas agree)."""
    return f"max by ({BY}) ({metric}{{{N}{extra}}})"


RATIO = f"{per_ns('dynquota_usage')} / ({per_ns('dynquota_hard')} > 0)"
THROTTLED_NOW = (
    f"({per_ns('dynquota_usage')} >= bool {per_ns('dynquota_hard')})"
    f" * ({per_ns('dynquota_hard')} < bool {per_ns('dynquota_maximum')})"
    f" * ({per_ns('dynquota_hard')} > bool 0)"
)
"""1 per (cluster, namespace, resource) whose usage is at a hard below the maximum, else 0
(the DynquotaNamespaceThrottled indicator)."""
OVERRIDES = (
    f'max by (cluster, namespace) (dynquota_overrides_active{{{S}, namespace=~"$namespace"}})'
)


def _var_query(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name, "type": "query", "label": label, "datasource": DS,
        "query": {"query": query, "refId": name}, "definition": query,
        "multi": True, "includeAll": True, "allValue": ".*", "refresh": 2, "sort": 1,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
    }  # fmt: skip


def _var_custom(
    name: str, label: str, options: list[str], default: str, *, multi: bool
) -> dict[str, Any]:
    current = (
        {"selected": True, "text": ["All"], "value": ["$__all"]}
        if multi
        else {"selected": True, "text": default, "value": default}
    )
    return {
        "name": name, "type": "custom", "label": label, "query": ",".join(options),
        "options": [{"text": o, "value": o, "selected": o == default} for o in options],
        "multi": multi, "includeAll": multi, "allValue": ".*", "current": current,
    }  # fmt: skip


def templating() -> list[dict[str, Any]]:
    """Data source, cluster, job, namespace, resource, enforcement, top N."""
    return [
        {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source",
         "current": {}, "hide": 0},
        _var_query("cluster", "Cluster", "label_values(dynquota_build_info, cluster)"),
        _var_query("job", "Job", 'label_values(dynquota_build_info{cluster=~"$cluster"}, job)'),
        _var_query("namespace", "Namespace", f"label_values(dynquota_hard{{{S}}}, namespace)"),
        _var_query("resource", "Resource", f"label_values(dynquota_hard{{{S}}}, resource)"),
        _var_custom("enforcement", "Enforcement", ["enforced", "dry-run", "unknown"], "",
                    multi=True),
        _var_custom("topn", "Top N", ["10", "20", "50"], "20", multi=False),
    ]  # fmt: skip


class _Layout:
    """Panels placed left to right on a 24-wide grid, with ids in order."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self.x = 0
        self.y = 0
        self.row_height = 0

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append({"id": len(self.panels) + 1, "type": "row", "title": title,
                            "collapsed": False, "gridPos": {"x": 0, "y": self.y, "w": 24, "h": 1},
                            "panels": []})  # fmt: skip
        self.y += 1

    def _newline(self) -> None:
        if self.x:
            self.y += self.row_height
            self.x, self.row_height = 0, 0

    def add(self, panel: dict[str, Any], w: int, h: int) -> None:
        if self.x + w > 24:
            self._newline()
        panel["id"] = len(self.panels) + 1
        panel["gridPos"] = {"x": self.x, "y": self.y, "w": w, "h": h}
        panel["datasource"] = DS
        self.panels.append(panel)
        self.x += w
        self.row_height = max(self.row_height, h)


def _targets(queries: list[tuple[str, str]], *, instant: bool = False) -> list[dict[str, Any]]:
    out = []
    for i, (expr, legend) in enumerate(queries):
        target: dict[str, Any] = {"refId": chr(ord("A") + i), "datasource": DS, "expr": expr,
                                  "legendFormat": legend}  # fmt: skip
        if instant:
            target.update({"instant": True, "range": False, "format": "table"})
        out.append(target)
    return out


def stat(title: str, expr: str, description: str, **field: Any) -> dict[str, Any]:
    """A stat panel of one query."""
    return {"type": "stat", "title": title, "description": description,
            "targets": _targets([(expr, "")]),
            "fieldConfig": {"defaults": field, "overrides": []},
            "options": {"reduceOptions": {"calcs": ["lastNotNull"]},
                        "colorMode": "value"}}  # fmt: skip


def table(title: str, queries: list[tuple[str, str]], description: str,
          rename: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    """An instant table: the queries' results merged on their labels, the ``Value #X``
    columns renamed, ``Time`` hidden."""
    return {
        "type": "table", "title": title, "description": description,
        "targets": _targets(queries, instant=True),
        "transformations": [
            {"id": "merge", "options": {}},
            {"id": "organize", "options": {"excludeByName": {"Time": True},
                                           "renameByName": rename}},
        ],
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {"showHeader": True, "sortBy": [{"displayName": next(iter(rename.values())),
                                                     "desc": True}]},
    }  # fmt: skip


def graph(
    title: str, queries: list[tuple[str, str]], description: str, unit: str = "short"
) -> dict[str, Any]:
    """A time series panel."""
    return {"type": "timeseries", "title": title, "description": description,
            "targets": _targets(queries),
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []}}  # fmt: skip


def top(expr: str) -> str:
    """``topk($topn, expr)``."""
    return f"topk($topn, {expr})"


def panels() -> list[dict[str, Any]]:
    """Every panel, in order."""
    lay = _Layout()
    lay.row("Fleet")
    lay.add(
        stat(
            "Operators",
            f"count(dynquota_build_info{{{S}}}) or vector(0)",
            "Operator processes scraped (replicas included), from dynquota_build_info.",
        ),
        3,
        4,
    )
    lay.add(
        stat(
            "Managed namespaces",
            f"sum(max by (cluster) (dynquota_managed_namespaces{{{S}}}))",
            "Namespaces governed by a policy, summed over the selected clusters.",
        ),
        3,
        4,
    )
    lay.add(
        stat(
            "Enforced namespaces",
            f'count(count by (cluster, namespace) (dynquota_hard{{{S}, enforcement="enforced"}}))'
            " or vector(0)",
            "Namespaces whose managed quota is written (enforcement=enforced).",
        ),
        3,
        4,
    )
    lay.add(
        stat(
            "Dry-run namespaces",
            f'count(count by (cluster, namespace) (dynquota_hard{{{S}, enforcement="dry-run"}}))'
            " or vector(0)",
            "Namespaces decided against a simulated quota: their dynquota_hard is simulated, "
            "nothing is enforced.",
        ),
        3,
        4,
    )
    lay.add(
        stat(
            "Throttled now",
            f"count(({THROTTLED_NOW}) == 1) or vector(0)",
            "Keys whose usage is at a hard limit still below the policy maximum.",
        ),
        3,
        4,
    )
    lay.add(
        stat(
            "Overrides active",
            f"count({OVERRIDES}) or vector(0)",
            "Namespaces under a tenant override.",
        ),
        3,
        4,
    )
    lay.add(stat("Kill switch engaged",
                 f"sum(max by (cluster) (dynquota_kill_switch_engaged{{{S}}})) or vector(0)",
                 "Clusters whose kill switch is engaged (every managed quota removed).",
                 thresholds={"mode": "absolute",
                             "steps": [{"color": "green", "value": None},
                                       {"color": "red", "value": 1}]},
                 color={"mode": "thresholds"}), 3, 4)  # fmt: skip
    lay.add(
        stat(
            "Frozen namespaces",
            f"sum(max by (cluster) (dynquota_frozen_namespaces{{{S}}})) or vector(0)",
            "Namespaces matched by an invalid policy (their quota is left as it is).",
        ),
        3,
        4,
    )
    versions = f"count by (cluster, job, version) (dynquota_build_info{{{S}}})"
    lay.add(table("Versions", [(versions, "")],
                  "The dynquota release each cluster runs (dynquota_build_info).",
                  {"Value": "operators"}), 8, 6)  # fmt: skip
    lay.add(table("Leaders", [(f"sum by (cluster) (dynquota_leader{{{S}}})", "")],
                  "Replicas that hold the Lease per cluster (1 expected).",
                  {"Value": "leaders"}), 4, 6)  # fmt: skip
    lay.add(
        graph(
            "Managed, enforced and dry-run namespaces",
            [
                (
                    f"sum by (cluster) (max by (cluster) (dynquota_managed_namespaces{{{S}}}))",
                    "{{cluster}} managed",
                ),
                (
                    f"count by (cluster, enforcement) (count by (cluster, namespace, enforcement) "
                    f"(dynquota_hard{{{S}}}))",
                    "{{cluster}} {{enforcement}}",
                ),
            ],
            "How many namespaces each cluster governs, and how many are enforced.",
        ),
        12,
        6,
    )

    lay.row("Top namespaces")
    lay.add(table(
        "Top usage / hard", [
            (top(RATIO), ""),
            (f"{per_ns('dynquota_usage')} and on ({BY}) {top(RATIO)}", ""),
            (f"{per_ns('dynquota_hard')} and on ({BY}) {top(RATIO)}", ""),
            (f"{per_ns('dynquota_maximum')} and on ({BY}) {top(RATIO)}", ""),
            (f"{per_ns('dynquota_target')} and on ({BY}) {top(RATIO)}", ""),
        ],
        "The keys closest to their hard limit (usage / hard), with usage, hard, the policy "
        "maximum and the target, in each key's base unit (objects, cores, bytes).",
        {"Value #A": "usage / hard", "Value #B": "usage", "Value #C": "hard",
         "Value #D": "maximum", "Value #E": "target"},
    ), 12, 9)  # fmt: skip
    lay.add(table(
        "Throttled below the maximum (minutes in the last hour)", [
            (top(f"sum_over_time(({THROTTLED_NOW})[1h:1m]) > 0"), ""),
            (f"{per_ns('dynquota_hard')} and on ({BY}) "
             f"{top(f'sum_over_time(({THROTTLED_NOW})[1h:1m]) > 0')}", ""),
            (f"{per_ns('dynquota_maximum')} and on ({BY}) "
             f"{top(f'sum_over_time(({THROTTLED_NOW})[1h:1m]) > 0')}", ""),
        ],
        "Keys whose usage sat at a hard below the policy maximum, by minutes of the last hour "
        "(the DynquotaNamespaceThrottled alert fires at 45).",
        {"Value #A": "minutes throttled", "Value #B": "hard", "Value #C": "maximum"},
    ), 12, 9)  # fmt: skip
    lay.add(table(
        "Soonest to exhaustion", [
            (f"bottomk($topn, min by ({BY}, limit) (dynquota_exhaustion_seconds{{{N}}}))", ""),
        ],
        "Seconds until usage reaches hard or the maximum on its recent trend (no row: not "
        "growing).",
        {"Value": "seconds"},
    ), 8, 8)  # fmt: skip
    lay.add(table(
        "Overrides (hours held in the last 14 days)", [
            (top(f"count_over_time(({OVERRIDES} == 1)[14d:1m]) / 60 and {OVERRIDES}"), ""),
        ],
        "Namespaces under a tenant override now, by hours it was active in the last 14 days "
        "(DynquotaOverrideHeldLong fires above 8 days).",
        {"Value": "hours held"},
    ), 8, 8)  # fmt: skip
    lay.add(table(
        "Usage above the maximum", [
            (top(f"{per_ns('dynquota_usage')} and on ({BY}) "
                 f"({per_ns('dynquota_usage_above_maximum')} == 1)"), ""),
        ],
        "Keys whose usage exceeds the policy maximum (held at usage, never below it).",
        {"Value": "usage"},
    ), 8, 8)  # fmt: skip

    lay.row("Selected namespaces, aggregated")
    lay.add(graph("Usage and hard (sum over the selection)", [
        (f"sum by (resource) ({per_ns('dynquota_usage')})", "usage {{resource}}"),
        (f"sum by (resource) ({per_ns('dynquota_hard')})", "hard {{resource}}"),
        (f"sum by (resource) ({per_ns('dynquota_maximum')})", "maximum {{resource}}"),
    ], "The selected namespaces together, per key (base unit): pick namespaces in the "
       "variables above to see one."), 12, 8)  # fmt: skip
    lay.add(graph("Top usage / hard over time", [
        (top(RATIO), "{{cluster}} {{namespace}} {{resource}}"),
    ], "The top N keys by usage / hard at each step.", "percentunit"), 12, 8)  # fmt: skip

    lay.row("Operator")
    lay.add(graph("Resizes by reason", [
        (f"sum by (direction, reason) (increase(dynquota_resizes_total{{{S}}}[$__rate_interval]))",
         "{{direction}} {{reason}}"),
    ], "Changes of spec.hard of managed quotas, by direction and reason."), 8, 7)  # fmt: skip
    lay.add(graph("Reconcile latency", [
        (f"histogram_quantile({q}, sum by (le) (rate("
         f"dynquota_reconcile_duration_seconds_bucket{{{S}}}[$__rate_interval])))", f"p{p}")
        for q, p in (("0.5", "50"), ("0.9", "90"), ("0.99", "99"))
    ], "One namespace decision, including its write.", "s"), 8, 7)  # fmt: skip
    lay.add(graph("Reconciles by result", [
        (f"sum by (result) (rate(dynquota_reconciles_total{{{S}}}[$__rate_interval]))",
         "{{result}}"),
    ], "ok, dry-run, retry, invalid, standby, held."), 8, 7)  # fmt: skip
    lay.add(
        graph(
            "Writes held",
            [
                (
                    f"sum by (reason) (rate(dynquota_writes_held_total{{{S}}}[$__rate_interval]))",
                    "{{reason}}",
                ),
            ],
            "Writes held for want of positive knowledge (docs/operator.md, Fault safety).",
        ),
        8,
        7,
    )
    lay.add(graph("Watch restarts and relists", [
        (f"sum by (resource) (increase(dynquota_watch_restarts_total{{{S}}}[$__rate_interval]))",
         "restarts {{resource}}"),
        (f"sum by (resource) (increase(dynquota_relists_total{{{S}}}[$__rate_interval]))",
         "relists {{resource}}"),
    ], "Informer retries after errors, and full relists after 410 Gone."), 8, 7)  # fmt: skip
    lay.add(graph("API errors and conflicts", [
        ("sum by (verb, resource, code) "
         f"(rate(dynquota_api_errors_total{{{S}}}[$__rate_interval]))",
         "{{verb}} {{resource}} {{code}}"),
        (f"sum by (verb, resource) (rate(dynquota_api_conflicts_total{{{S}}}[$__rate_interval]))",
         "409 {{verb}} {{resource}}"),
    ], "Failed API requests (code 0: no answer) and 409 Conflicts."), 8, 7)  # fmt: skip
    lay.add(graph("Operator CPU", [
        (f"sum by (cluster, instance) (rate(process_cpu_seconds_total{{{S}}}[$__rate_interval]))",
         "{{cluster}} {{instance}}"),
    ], "CPU seconds per second of each operator process.", "short"), 8, 7)  # fmt: skip
    lay.add(graph("Operator memory", [
        (f"max by (cluster, instance) (process_resident_memory_bytes{{{S}}})",
         "{{cluster}} {{instance}}"),
    ], "Resident memory of each operator process.", "bytes"), 8, 7)  # fmt: skip
    lay.add(graph("Workqueue depth", [
        (f"max by (cluster) (dynquota_workqueue_depth{{{S}}})", "{{cluster}}"),
    ], "Namespaces queued or in progress."), 8, 7)  # fmt: skip
    return lay.panels


def dashboard() -> dict[str, Any]:
    """The dashboard JSON document."""
    return {
        "title": "dynquota",
        "uid": "dynquota",
        "description": "dynquota across a fleet: versions, enforced and dry-run namespaces, "
        "top-N keys by usage/hard, throttled keys, overrides, exhaustion; the operators' "
        "reconciles, API errors, CPU and memory. No per-namespace rows: filter with the "
        "variables.",
        "tags": ["dynquota", "kubernetes", "quota"],
        "editable": True,
        "schemaVersion": 39,
        "version": 2,
        "refresh": "1m",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "utc",
        "graphTooltip": 1,
        "annotations": {"list": []},
        "templating": {"list": templating()},
        "panels": panels(),
    }
