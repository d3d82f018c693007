"""The pods a manifest asks for: ``kubectl dynquota fit -f``'s reading of it (Pure).

A manifest is YAML or JSON, one or more documents (``---``), a ``kind: List`` unpacked. Each
Deployment, ReplicaSet, StatefulSet, Job or Pod is one :class:`Workload`: the pod its
controller would create (the template's labels, annotations and spec, with a
``generateName``) and how many at once (``spec.replicas``, default 1; a Job's
``parallelism``, default 1, at most its ``completions``; a Pod is one). Any other kind is
listed in :attr:`Manifest.skipped` (it creates no pod, or creates them on a schedule of its
own, like a CronJob). Nothing is sent anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["KINDS", "Manifest", "ManifestError", "Workload", "read_manifest"]

KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "Job", "Pod")
"""The kinds whose pods ``fit`` evaluates."""


class ManifestError(ValueError):
    """A manifest that cannot be read (the message says where and why)."""


@dataclass(frozen=True)
class Workload:
    """One workload of the manifest: ``kind``, ``name``, its ``namespace`` as written (``""``:
    none), the ``replicas`` it runs at once and the ``pod`` its controller would create
    (Kubernetes JSON, ``generateName`` ``<name>-fit-``)."""

    kind: str
    name: str
    namespace: str
    replicas: int
    pod: Mapping[str, Any]

    @property
    def title(self) -> str:
        """``Deployment/web``."""
        return f"{self.kind}/{self.name}"


@dataclass(frozen=True)
class Manifest:
    """The workloads of a manifest, in document order, and the documents skipped
    (``ConfigMap/settings``)."""

    workloads: tuple[Workload, ...]
    skipped: tuple[str, ...] = ()


def read_manifest(text: str, source: str = "manifest", replicas: int | None = None) -> Manifest:
    """The workloads of ``text`` (YAML or JSON; ``source`` names it in errors); ``replicas``
    (if given) replaces every workload's count.

    Raises:
        ManifestError: not YAML, a document that is not an object, a workload without a
            name or a pod template, a count that is not a whole number, or no workload.
    """
    import yaml

    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ManifestError(f"{source}: not valid YAML: {exc}") from exc
    workloads: list[Workload] = []
    skipped: list[str] = []
    for i, document in enumerate(_unpacked(documents, source)):
        kind = str(document.get("kind") or "")
        name = str((document.get("metadata") or {}).get("name") or "")
        if kind not in KINDS:
            skipped.append(f"{kind or '(no kind)'}/{name or f'document {i + 1}'}")
            continue
        if not name:
            raise ManifestError(f"{source}: document {i + 1} ({kind}) has no metadata.name")
        workloads.append(_workload(document, kind, name, f"{source}: {kind}/{name}", replicas))
    if not workloads:
        listed = f" (only {', '.join(skipped)})" if skipped else ""
        raise ManifestError(f"{source}: no Deployment, ReplicaSet, StatefulSet, Job or Pod{listed}")
    return Manifest(tuple(workloads), tuple(skipped))


def _unpacked(documents: Iterable[object], source: str) -> list[Mapping[str, Any]]:
    """The documents, a ``kind: List``'s ``items`` in its place."""
    out: list[Mapping[str, Any]] = []
    for n, document in enumerate(documents):
        if not isinstance(document, Mapping):
            raise ManifestError(f"{source}: document {n + 1} is not an object")
        if str(document.get("kind") or "").endswith("List") and "items" in document:
            items = document.get("items") or []
            if not isinstance(items, list) or not all(isinstance(x, Mapping) for x in items):
                raise ManifestError(f"{source}: document {n + 1}: items must be objects")
            out.extend(items)
        else:
            out.append(document)
    return out


def _count(value: object, default: int, where: str) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ManifestError(f"{where} must be a whole number >= 0, not {value!r}")
    return value


def _workload(
    document: Mapping[str, Any], kind: str, name: str, where: str, replicas: int | None
) -> Workload:
    meta = document.get("metadata") or {}
    spec = document.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise ManifestError(f"{where}: spec is not an object")
    if kind == "Pod":
        template: Mapping[str, Any] = {"metadata": meta, "spec": spec}
        count = 1
    else:
        template = spec.get("template") or {}
        if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
            raise ManifestError(f"{where}: spec.template.spec is missing")
        if kind == "Job":
            count = _count(spec.get("parallelism"), 1, f"{where}: spec.parallelism")
            completions = spec.get("completions")
            if completions is not None:
                count = min(count, _count(completions, 1, f"{where}: spec.completions"))
        else:
            count = _count(spec.get("replicas"), 1, f"{where}: spec.replicas")
    namespace = str(meta.get("namespace") or "")
    template_meta = template.get("metadata") or {}
    pod_meta: dict[str, Any] = {"generateName": f"{name}-fit-"}
    for part in ("labels", "annotations"):
        if template_meta.get(part):
            pod_meta[part] = dict(template_meta[part])
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": dict(template["spec"])}
    return Workload(kind, name, namespace, count if replicas is None else replicas, pod)
