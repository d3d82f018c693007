"""The running release's operator settings, read from the cluster (for ``dynquota plan``).

The chart renders every operator setting as a ``DYNQUOTA_*`` environment variable of the
operator container (``helm/dynquota/templates/deployment.yaml``), so the settings the operator
runs with are in its Deployment. :func:`find_release` finds that Deployment (by the chart's
labels ``app.kubernetes.io/part-of=dynquota`` and ``app.kubernetes.io/component=operator``,
narrowed by release name and namespace when given) and :func:`release_settings` rebuilds the
operator's :class:`~dynquota.settings.Settings` from its container, as the operator would:

- ``value``: taken as is; ``fieldRef`` ``metadata.namespace``: the Deployment's namespace (a
  pod of it runs there); ``metadata.name``: a pod name, only the Lease identity;
- ``configMapKeyRef`` and ``envFrom`` ``configMapRef``: the ConfigMap is read (GET), in the
  Deployment's namespace;
- ``secretKeyRef``, ``envFrom`` ``secretRef``, ``resourceFieldRef`` and other ``fieldRef``
  paths: **not resolved** (plan reads no Secrets); the setting keeps its default and a note
  says so;
- container ``args`` (flags of ``dynquota run``, which take precedence over the
  environment), when the container has any.

Read-only: GET and LIST only, through the operator's own kubernetes_asyncio adapters
(:func:`dynquota._k8s.request.call_api`: every request has the short timeout of
:mod:`dynquota._k8s.timeouts`, failures are :mod:`dynquota._k8s.errors` types).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client

from dynquota._k8s.errors import ForbiddenError, NotFoundError
from dynquota._k8s.request import call_api
from dynquota.settings import ENV_PREFIX, Settings, add_run_flags, flag_overrides

__all__ = [
    "RELEASE_SELECTOR",
    "Release",
    "ReleaseNotFoundError",
    "describe",
    "find_release",
    "release_settings",
]

RELEASE_SELECTOR = "app.kubernetes.io/part-of=dynquota,app.kubernetes.io/component=operator"
"""Labels of the chart's operator Deployment (whatever ``nameOverride`` says)."""


class ReleaseNotFoundError(LookupError):
    """No operator Deployment matched; the message says what was looked for."""


@dataclass(frozen=True)
class Release:
    """The operator Deployment of one release and the settings it runs with.

    ``name``: the release (label ``app.kubernetes.io/instance``); ``namespace`` and
    ``deployment``: where it runs; ``container``: the container read; ``settings``: as the
    operator reads them; ``notes``: what could not be resolved or was ignored, one line each;
    ``replicas`` and ``ready``: the Deployment's ``spec.replicas`` and
    ``status.readyReplicas`` (0 ready: no operator runs now, nothing is decided).
    """

    name: str
    namespace: str
    deployment: str
    container: str
    settings: Settings
    notes: list[str] = field(default_factory=list)
    replicas: int = 0
    ready: int = 0


async def find_release(
    api: client.ApiClient, release: str | None = None, namespace: str | None = None
) -> dict[str, Any]:
    """The operator Deployment of the release, as decoded JSON.

    ``api``: a kubernetes_asyncio ``ApiClient`` (not closed here). Lists Deployments labelled
    :data:`RELEASE_SELECTOR` (plus ``app.kubernetes.io/instance=release`` when given) in
    ``namespace``, or in all namespaces.

    Raises:
        ReleaseNotFoundError: none matched.
        ValueError: several matched (the message names them: pass the release and namespace).
        ApiError: the list failed (``ForbiddenError``: no right to list Deployments).
        TransportError: no answer.
    """
    apps: Any = client.AppsV1Api(api)
    selector = RELEASE_SELECTOR + (f",app.kubernetes.io/instance={release}" if release else "")
    if namespace:
        listed = await call_api(
            "list",
            "deployments",
            lambda t: apps.list_namespaced_deployment(
                namespace, label_selector=selector, _request_timeout=t
            ),
        )
    else:
        listed = await call_api(
            "list",
            "deployments",
            lambda t: apps.list_deployment_for_all_namespaces(
                label_selector=selector, _request_timeout=t
            ),
        )
    found = [api.sanitize_for_serialization(d) for d in listed.items]
    where = f"in namespace {namespace}" if namespace else "in any namespace"
    if not found:
        raise ReleaseNotFoundError(f"no Deployment labelled {selector} {where}")
    if len(found) > 1:
        names = ", ".join(
            sorted(
                f"{d['metadata']['namespace']}/{d['metadata']['name']} (release {_instance(d)})"
                for d in found
            )
        )
        raise ValueError(
            f"{len(found)} dynquota releases found ({names}): choose one with --release and "
            "--release-namespace"
        )
    deployment: dict[str, Any] = found[0]
    return deployment


def _instance(deployment: Mapping[str, Any]) -> str:
    labels = (deployment.get("metadata") or {}).get("labels") or {}
    return str(labels.get("app.kubernetes.io/instance") or "")


def _operator_container(deployment: Mapping[str, Any]) -> Mapping[str, Any]:
    containers = ((deployment.get("spec") or {}).get("template") or {}).get("spec", {}).get(
        "containers"
    ) or []
    for container in containers:
        if container.get("name") == "operator":
            return dict(container)
    return dict(containers[0]) if containers else {}


async def release_settings(api: client.ApiClient, deployment: Mapping[str, Any]) -> Release:
    """Rebuild the operator's settings from ``deployment`` (see the module docstring).

    ``api``: a kubernetes_asyncio ``ApiClient`` (reads referenced ConfigMaps).

    Raises:
        pydantic.ValidationError: a value the operator would refuse as well.
        ApiError: reading a ConfigMap failed other than 404 or 403 (those become notes).
        TransportError: no answer.
    """
    meta = deployment.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    container = _operator_container(deployment)
    notes: list[str] = []
    env: dict[str, str] = {}
    configmaps: dict[str, Mapping[str, str] | None] = {}

    async def configmap(name: str, optional: bool) -> Mapping[str, str] | None:
        if name not in configmaps:
            configmaps[name] = await _read_configmap(api, namespace, name, optional, notes)
        return configmaps[name]

    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix") or "")
        if "configMapRef" in source:
            ref = source["configMapRef"]
            data = await configmap(str(ref.get("name")), bool(ref.get("optional")))
            for key, value in (data or {}).items():
                env[prefix + key] = value
        elif "secretRef" in source:
            name = (source.get("secretRef") or {}).get("name")
            notes.append(
                f"envFrom secretRef {name} not resolved (plan reads no Secrets): any "
                f"{ENV_PREFIX}* setting it holds keeps its default here"
            )
    for var in container.get("env") or []:
        name = str(var.get("name") or "")
        if "value" in var or "valueFrom" not in var:
            env[name] = str(var.get("value") or "")
            continue
        value_from = var["valueFrom"] or {}
        field_ref = value_from.get("fieldRef")
        if field_ref and field_ref.get("fieldPath") == "metadata.namespace":
            env[name] = namespace
        elif field_ref and field_ref.get("fieldPath") == "metadata.name":
            env[name] = f"{meta.get('name')}-<pod>"
        elif "configMapKeyRef" in value_from:
            ref = value_from["configMapKeyRef"]
            data = await configmap(str(ref.get("name")), bool(ref.get("optional")))
            if data is not None and str(ref.get("key")) in data:
                env[name] = data[str(ref.get("key"))]
            elif data is not None and name.upper().startswith(ENV_PREFIX):
                notes.append(
                    f"{name} not resolved (ConfigMap {namespace}/{ref.get('name')} has no key "
                    f"{ref.get('key')}): its default is used"
                )
        elif name.upper().startswith(ENV_PREFIX):
            kind = next(iter(value_from), "valueFrom")
            why = "plan reads no Secrets" if kind == "secretKeyRef" else "not readable here"
            notes.append(f"{name} not resolved ({kind}: {why}): its default is used")
    env.update(_flag_overrides(container, notes))
    settings, unknown = Settings.from_environment(env)
    for name in unknown:
        notes.append(f"{name} is no setting: ignored here (the operator refuses it)")
    return Release(
        name=_instance(deployment),
        namespace=namespace,
        deployment=str(meta.get("name") or ""),
        container=str(container.get("name") or ""),
        settings=settings,
        notes=notes,
        replicas=int((deployment.get("spec") or {}).get("replicas") or 0),
        ready=int((deployment.get("status") or {}).get("readyReplicas") or 0),
    )


async def _read_configmap(
    api: client.ApiClient, namespace: str, name: str, optional: bool, notes: list[str]
) -> Mapping[str, str] | None:
    core: Any = client.CoreV1Api(api)
    try:
        found = await call_api(
            "get",
            "configmaps",
            lambda t: core.read_namespaced_config_map(name, namespace, _request_timeout=t),
        )
    except NotFoundError:
        if not optional:
            notes.append(f"ConfigMap {namespace}/{name} not found: its settings are not set")
        return None
    except ForbiddenError as exc:
        if exc.status != 403:
            raise
        notes.append(
            f"ConfigMap {namespace}/{name} not resolved (403: no right to read it): the "
            "settings it holds keep their defaults here"
        )
        return None
    data: Mapping[str, str] = found.data or {}
    return data


def _flag_overrides(container: Mapping[str, Any], notes: list[str]) -> dict[str, str]:
    """``dynquota run`` flags found in the container's ``args`` (and ``command`` after
    ``run``), as ``DYNQUOTA_*`` variables: flags take precedence over the environment, as in
    ``dynquota run``."""
    command: Sequence[str] = [str(a) for a in container.get("command") or []]
    args: Sequence[str] = [str(a) for a in container.get("args") or []]
    if command:
        argv = [*command, *args]
        if "run" not in argv:
            notes.append(f"container command {' '.join(argv)!r} is not `dynquota run`")
            return {}
        flags = argv[argv.index("run") + 1 :]
    else:
        flags = list(args)  # the image's entrypoint is `dynquota run`
    if not flags:
        return {}
    parser = add_run_flags(argparse.ArgumentParser(prog="dynquota run", add_help=False))
    parser.exit_on_error = False
    try:
        parsed, extra = parser.parse_known_args(flags)
    except (argparse.ArgumentError, SystemExit):
        extra = flags
    if extra:
        notes.append(f"container args {' '.join(flags)!r} not understood: ignored here")
        return {}
    return {
        f"{ENV_PREFIX}{key.upper()}": _flag_text(value)
        for key, value in flag_overrides(parsed).items()
    }


def _flag_text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def describe(settings: Settings) -> str:
    """The settings that decide which namespaces are managed, as one line."""
    include = ",".join(settings.include_namespaces) or "(all)"
    exclude = ",".join(settings.exclude_namespaces) or "(none)"
    hours, rest = divmod(settings.override_ttl, 3600)
    ttl = f"{hours}h" if not rest else f"{settings.override_ttl}s"
    return (
        f"dryRun={str(settings.dry_run).lower()}, own namespace "
        f"{settings.namespace or '(none)'}, excludeNamespaces={exclude}, "
        f"includeNamespaces={include}, overrideTTL={ttl}"
    )
