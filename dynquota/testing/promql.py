"""Metric names in PromQL versus the families a ``/metrics`` scrape declares (tests only).

Used to check that every metric the chart's alerts and the Grafana dashboard query exists in a
real scrape of the running operator:

- :func:`scrape_families` reads the ``# TYPE`` lines of the Prometheus text format: a labelled
  metric with no children yet prints no sample but still declares its family;
- :func:`selected_metrics` lists the metric names a PromQL expression selects (functions,
  aggregations, keywords, label matchers, durations and string literals removed);
- :func:`missing_metrics` compares the two, allowing the suffixes Prometheus' text format gives
  counters (``_total``) and histograms/summaries (``_bucket``, ``_sum``, ``_count``) and the
  series Prometheus makes itself (``up``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = ["SYNTHETIC", "missing_metrics", "scrape_families", "selected_metrics"]

#: Series Prometheus creates for every target; not on any ``/metrics`` page.
SYNTHETIC = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})

_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
     "group_right", "inf", "nan", "start", "end"}
)  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_IDENT = re.compile(r"(?<![\w.:$])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")
_GRAFANA_LABEL_VALUES = re.compile(
    r"^\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{[^{}]*\})?\s*,"
)


def scrape_families(text: str) -> dict[str, str]:
    """``{family name: type}`` from the ``# TYPE`` lines of a Prometheus text-format scrape.

    Pure. Families without a ``# TYPE`` line (untyped samples) are added as ``untyped``.
    """
    families: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 4:
                families[parts[2]] = parts[3]
        elif line and not line.startswith("#"):
            name = re.split(r"[{\s]", line, maxsplit=1)[0]
            if not any(_family_of(name, families)):
                families.setdefault(name, "untyped")
    return families


def selected_metrics(expr: str) -> set[str]:
    """The metric names selected by the PromQL expression ``expr`` (or a Grafana
    ``label_values(metric{matchers}, label)`` variable query). Pure.

    A bare identifier that is not a function call, an aggregation, a keyword or part of a label
    matcher, grouping list, duration or string is a metric name. Grafana variables such as
    ``$__rate_interval`` only occur inside ranges and matchers, which are removed first.
    """
    grafana = _GRAFANA_LABEL_VALUES.match(expr)
    if grafana:
        return {grafana.group(1)}
    text = _STRING.sub(" ", expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _LABEL_LIST.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names


def _family_of(name: str, families: Mapping[str, str]) -> Iterable[str]:
    """The families ``name`` may be a sample of."""
    if name in families:
        yield name
    for suffix, kinds in (
        ("_total", ("counter",)),
        ("_created", ("counter", "histogram", "summary")),
        ("_bucket", ("histogram",)),
        ("_sum", ("histogram", "summary")),
        ("_count", ("histogram", "summary")),
    ):
        base = name.removesuffix(suffix)
        if base != name and families.get(base) in kinds:
            yield base


def missing_metrics(used: Iterable[str], families: Mapping[str, str]) -> set[str]:
    """The names in ``used`` that no family in ``families`` provides. Pure.

    ``up`` and Prometheus' other per-target series (:data:`SYNTHETIC`) always exist.
    """
    return {n for n in used if n not in SYNTHETIC and not any(_family_of(n, families))}
