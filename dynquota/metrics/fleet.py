"""What a fleet of operators needs on every ``/metrics``: the build, the process, and which
namespaces are enforced (prometheus-client; no I/O of its own).

- :func:`register_build_and_process` adds ``dynquota_build_info`` (the package version, the
  Python and the main libraries) and prometheus-client's own process, platform and GC
  collectors (``process_*``, ``python_info``, ``python_gc_*``) to a registry. They are
  prometheus-client's standard collectors, registered on the operator's own registry (the
  default registry would carry them, but the operator does not use it).
- :class:`EnforcementLabels` re-exports per-namespace gauges with one more label,
  ``enforcement``: ``enforced`` (the managed quota is written), ``dry-run`` (computed and
  reported against a simulated quota, nothing written: its ``dynquota_hard`` is the simulated
  one) or ``unknown`` (nothing said yet for the namespace). The gauges keep their own label
  names, so writers call ``gauge.labels(namespace, resource)`` as before; the mode of a
  namespace is set once with :meth:`EnforcementLabels.set` and applies to all its series at
  the next scrape (a change of mode never leaves a stale series of the old one).
- :class:`FleetRegistry` is a ``CollectorRegistry`` whose :meth:`get_sample_value` (meant for
  tests) also finds a series when the lookup leaves ``enforcement`` out.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib import metadata
from typing import Final

from prometheus_client import CollectorRegistry, Gauge, Info
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

__all__ = [
    "ENFORCEMENT_LABEL",
    "ENFORCEMENT_MODES",
    "EnforcementLabels",
    "FleetRegistry",
    "build_labels",
    "register_build_and_process",
]

ENFORCEMENT_LABEL: Final = "enforcement"
"""The label :class:`EnforcementLabels` adds to every per-namespace series."""
ENFORCEMENT_MODES: Final = ("enforced", "dry-run", "unknown")
"""Its values: written, simulated (dry run: the policy's ``dryRun`` or the operator's), or not
said yet for the namespace."""

_LIBRARIES: Final = ("kopf", "kubernetes_asyncio", "pydantic", "prometheus_client")


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


def build_labels(version: str) -> dict[str, str]:
    """The labels of ``dynquota_build_info``: ``version`` (the dynquota package's), and
    ``python_version``, ``python_implementation``, and ``<library>_version`` for kopf,
    kubernetes_asyncio, pydantic and prometheus_client as installed (``unknown`` when a
    distribution's metadata is missing)."""
    labels = {
        "version": version,
        "python_version": platform.python_version(),
        "python_implementation": sys.implementation.name,
    }
    for library in _LIBRARIES:
        labels[f"{library}_version"] = _version(library.replace("_", "-"))
    return labels


def register_build_and_process(registry: CollectorRegistry, version: str) -> None:
    """Add ``dynquota_build_info`` (:func:`build_labels`, value 1) and the process, platform
    and garbage-collector collectors to ``registry``.

    Raises ``ValueError`` (prometheus-client's duplicate check) if ``registry`` has them
    already."""
    info = Info("dynquota_build", "The dynquota build: its version and runtime", registry=registry)
    info.info(build_labels(version))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)


class EnforcementLabels(Collector):
    """Exports ``gauges`` (not registered anywhere themselves) with the label
    :data:`ENFORCEMENT_LABEL` added to each series, from the namespace's mode.

    Every gauge must have a ``namespace`` label. Register this collector on the registry
    instead of the gauges."""

    def __init__(self, gauges: Iterable[Gauge]) -> None:
        self._gauges = tuple(gauges)
        self._modes: dict[str, str] = {}
        self.before_collect: list[Callable[[], None]] = []
        """Called before the gauges are collected (their writer sets what it deferred)."""

    def set(self, namespace: str, mode: str) -> None:
        """Say how ``namespace`` is enforced: one of :data:`ENFORCEMENT_MODES`.

        Raises ``ValueError`` for any other mode."""
        if mode not in ENFORCEMENT_MODES:
            raise ValueError(f"enforcement must be one of {ENFORCEMENT_MODES}, not {mode!r}")
        self._modes[namespace] = mode

    def forget(self, namespace: str) -> None:
        """Drop what was said about ``namespace`` (its series are removed by their writers)."""
        self._modes.pop(namespace, None)

    def forget_if_unused(self, namespace: str) -> None:
        """:meth:`forget` ``namespace`` when none of the gauges has a series of it left."""
        for gauge in self._gauges:
            for family in gauge.collect():
                if any(s.labels.get("namespace") == namespace for s in family.samples):
                    return
        self.forget(namespace)

    def mode(self, namespace: str) -> str:
        """The mode of ``namespace`` (``unknown`` until :meth:`set`)."""
        return self._modes.get(namespace, "unknown")

    def modes(self) -> Mapping[str, str]:
        """Every namespace's mode said so far (a copy)."""
        return dict(self._modes)

    def describe(self) -> Iterator[Metric]:
        """The families without samples (the registry's duplicate-name check)."""
        for gauge in self._gauges:
            for family in gauge.describe():
                yield Metric(family.name, family.documentation, family.type)

    def collect(self) -> Iterator[Metric]:
        """Each gauge's family, every sample with ``enforcement`` added."""
        for hook in list(self.before_collect):
            hook()
        for gauge in self._gauges:
            for family in gauge.collect():
                out = Metric(family.name, family.documentation, family.type)
                for sample in family.samples:
                    labels = dict(sample.labels)
                    labels[ENFORCEMENT_LABEL] = self.mode(labels.get("namespace", ""))
                    out.add_sample(sample.name, labels, sample.value, sample.timestamp)
                yield out


class FleetRegistry(CollectorRegistry):
    """A ``CollectorRegistry`` whose test lookup ignores ``enforcement`` when not asked for."""

    def get_sample_value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """The value of the sample ``name`` with exactly ``labels``; when ``labels`` has no
        ``enforcement`` key, a sample whose labels are ``labels`` plus ``enforcement`` (a
        namespace has one mode at a time) also matches. None when there is none."""
        wanted = dict(labels or {})
        exact = super().get_sample_value(name, wanted)
        if exact is not None or ENFORCEMENT_LABEL in wanted:
            return exact
        for metric in self.collect():
            for sample in metric.samples:
                if sample.name != name or ENFORCEMENT_LABEL not in sample.labels:
                    continue
                rest = {k: v for k, v in sample.labels.items() if k != ENFORCEMENT_LABEL}
                if rest == wanted:
                    return float(sample.value)
        return None
