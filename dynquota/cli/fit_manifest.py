"""The pods a manifest asks for: ``kubectl dynquota fit -f``'s reading of it (Pure).

A manifest is YAML or JSON, one or more documents (``---``), a ``kind: List`` unpacked. Each
Deployment, ReplicaSet, StatefulSet, Job or Pod is one :class:`Workload`: the pod its
controller would create (the template's labels, annotations and spec, with a
``generateName``) and how many at once (``spec.replicas``, default 1; a Job's
``parallelism``, default 1, at most its ``completions``; a Pod is one). Any other kind is
listed in :attr:`Manifest.skipped` (it creates no pod, or creates them on a schedule of its
own, like a CronJob). A StatefulSet's ``volumeClaimTemplates`` are the claims each replica
needs besides its pod (:attr:`Workload.claims`). What quota or admission would read is checked
here (objects where objects belong, every resource amount a quantity), so a malformed manifest
is one :class:`ManifestError` naming the object and the field, never a traceback later.
Nothing is sent anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dynquota.quantity import QuantityError, parse_quantity

__all__ = ["KINDS", "Manifest", "ManifestError", "Workload", "read_manifest"]

KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "Job", "Pod")
"""The kinds whose pods ``fit`` evaluates."""


class ManifestError(ValueError):
    """A manifest that cannot be read (the message says where and why)."""


@dataclass(frozen=True)
class Workload:
    """One workload of the manifest: ``kind``, ``name``, its ``namespace`` as written (``""``:
    none), the ``replicas`` it runs at once and the ``pod`` its controller would create
    (Kubernetes JSON, ``generateName`` ``<name>-fit-``); a StatefulSet's ``claims``: one
    PersistentVolumeClaim (JSON, ``metadata.name`` the template's name) per entry of
    ``spec.volumeClaimTemplates``, which the controller creates as ``<template>-<name>-<ordinal>``
    for each replica that lacks it; ``template`` (``spec.template`` as written) and
    ``strategy`` (a Deployment's ``spec.strategy`` as written), to tell a rollout from a
    scale of a workload that exists."""

    kind: str
    name: str
    namespace: str
    replicas: int
    pod: Mapping[str, Any]
    claims: tuple[Mapping[str, Any], ...] = ()
    template: Mapping[str, Any] = field(default_factory=dict)
    strategy: Mapping[str, Any] = field(default_factory=dict)

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
            name or a pod template, a count that is not a whole number, a field that must be
            an object or a list and is not, an amount that is not a quantity, or no workload.
    """
    import yaml

    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ManifestError(f"{source}: not valid YAML: {_yaml_problem(exc)}") from exc
    workloads: list[Workload] = []
    skipped: list[str] = []
    for i, document in enumerate(_unpacked(documents, source)):
        kind = str(document.get("kind") or "")
        meta = _object(document.get("metadata"), f"{source}: document {i + 1}: metadata")
        name = str(meta.get("name") or "")
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


def _yaml_problem(exc: Exception) -> str:
    """PyYAML's error on one line: ``line 2, column 1: expected ',' or ']', but got '<stream
    end>'`` (its text spans several lines, with the source quoted)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is None:
        return str(problem)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


def _object(value: object, where: str) -> Mapping[str, Any]:
    """``value`` when it is an object (``None``: an empty one); else :class:`ManifestError`."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ManifestError(f"{where} must be an object, not {_shown(value)}")
    return value


def _list(value: object, where: str) -> list[Any]:
    """``value`` when it is a list (``None``: an empty one); else :class:`ManifestError`."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ManifestError(f"{where} must be a list, not {_shown(value)}")
    return value


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _quantities(value: object, where: str) -> None:
    """Every amount of a ResourceList (``requests``, ``limits``, ``overhead``) is a quantity
    (as admission reads it: the text of a YAML number too)."""
    for key, amount in _object(value, where).items():
        if isinstance(amount, bool) or not isinstance(amount, (str, int, float)):
            raise ManifestError(f"{where}.{key}: not a quantity: {_shown(amount)}")
        try:
            parse_quantity(str(amount))
        except QuantityError as exc:
            raise ManifestError(f"{where}.{key}: {exc}") from exc


def _check_pod_spec(spec: Mapping[str, Any], where: str) -> None:
    """The parts of a pod spec quota and the LimitRanger read: containers and init containers
    (lists of objects), their ``resources.requests``/``limits``, the pod's ``overhead`` and
    ``resources``."""
    for kind in ("initContainers", "containers"):
        for n, container in enumerate(_list(spec.get(kind), f"{where}.{kind}")):
            at = f"{where}.{kind}[{n}]"
            resources = _object(_object(container, at).get("resources"), f"{at}.resources")
            for part in ("requests", "limits"):
                _quantities(resources.get(part), f"{at}.resources.{part}")
    _quantities(spec.get("overhead"), f"{where}.overhead")
    pod_resources = _object(spec.get("resources"), f"{where}.resources")
    for part in ("requests", "limits"):
        _quantities(pod_resources.get(part), f"{where}.resources.{part}")


def _claims(spec: Mapping[str, Any], where: str) -> tuple[dict[str, Any], ...]:
    """A StatefulSet's ``volumeClaimTemplates`` as claims (JSON, named by the template)."""
    claims = []
    for n, template in enumerate(_list(spec.get("volumeClaimTemplates"), f"{where}")):
        at = f"{where}[{n}]"
        meta = _object(_object(template, at).get("metadata"), f"{at}.metadata")
        if not meta.get("name"):
            raise ManifestError(f"{at}.metadata.name is missing")
        claim_spec = _object(template.get("spec"), f"{at}.spec")
        resources = _object(claim_spec.get("resources"), f"{at}.spec.resources")
        _quantities(resources.get("requests"), f"{at}.spec.resources.requests")
        claims.append(
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": dict(meta), "spec": dict(claim_spec)}
        )  # fmt: skip
    return tuple(claims)


INT32_MAX = 2**31 - 1  # replicas, parallelism, completions are int32 in the API


def _count(value: object, default: int, where: str) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ManifestError(f"{where} must be a whole number >= 0, not {value!r}")
    if value > INT32_MAX:
        raise ManifestError(f"{where} must be at most {INT32_MAX} (int32), not {value}")
    return value


def _int_or_percent(value: object, where: str) -> None:
    """An IntOrString of a rolling update (``maxSurge``, ``maxUnavailable``): a whole number
    >= 0 or ``"N%"``, as the apiserver's validation accepts."""
    if value is None:
        return
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        return
    raise ManifestError(
        f"{where} must be a whole number >= 0 or a percentage like 25%, not {value!r}"
    )


def _workload(
    document: Mapping[str, Any], kind: str, name: str, where: str, replicas: int | None
) -> Workload:
    meta = _object(document.get("metadata"), f"{where}: metadata")
    spec = _object(document.get("spec"), f"{where}: spec")
    if kind == "Pod":
        template: Mapping[str, Any] = {"metadata": meta, "spec": spec}
        count = 1
        _check_pod_spec(spec, f"{where}: spec")
    else:
        template = _object(spec.get("template"), f"{where}: spec.template")
        if not isinstance(template.get("spec"), Mapping):
            raise ManifestError(f"{where}: spec.template.spec is missing")
        _check_pod_spec(template["spec"], f"{where}: spec.template.spec")
        if kind == "Job":
            count = _count(spec.get("parallelism"), 1, f"{where}: spec.parallelism")
            completions = spec.get("completions")
            if completions is not None:
                count = min(count, _count(completions, 1, f"{where}: spec.completions"))
        else:
            count = _count(spec.get("replicas"), 1, f"{where}: spec.replicas")
    namespace = str(meta.get("namespace") or "")
    template_meta = _object(template.get("metadata"), f"{where}: spec.template.metadata")
    pod_meta: dict[str, Any] = {"generateName": f"{name}-fit-"}
    for part in ("labels", "annotations"):
        if template_meta.get(part):
            pod_meta[part] = dict(_object(template_meta[part], f"{where}: metadata.{part}"))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": dict(template["spec"])}
    claims = _claims(spec, f"{where}: spec.volumeClaimTemplates") if kind == "StatefulSet" else ()
    strategy = (
        _object(spec.get("strategy"), f"{where}: spec.strategy") if kind == "Deployment" else {}
    )
    rolling = _object(strategy.get("rollingUpdate"), f"{where}: spec.strategy.rollingUpdate")
    for field_name in ("maxSurge", "maxUnavailable"):
        _int_or_percent(
            rolling.get(field_name), f"{where}: spec.strategy.rollingUpdate.{field_name}"
        )
    return Workload(
        kind, name, namespace, count if replicas is None else replicas, pod, claims,
        dict(template) if kind != "Pod" else {}, dict(strategy),
    )  # fmt: skip
