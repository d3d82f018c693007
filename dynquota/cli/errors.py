"""What the CLI tells a user who can fix the problem: :class:`UserError` and :func:`explain`.

Errors a user can fix (no kubeconfig, cluster unreachable, CRD missing, RBAC) become one clear
line on stderr with exit code 2 (:func:`dynquota.cli.main`). Every command talks to the
cluster through the operator's own kubernetes_asyncio adapters, so there is one error stack
to translate: kubernetes_asyncio's config errors, the kubeconfig's YAML, and
:mod:`dynquota._k8s.errors` (with aiohttp's, should one escape an adapter).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

__all__ = [
    "CLI_INSTANCE",
    "CRD_HINT",
    "FIELD_MANAGER",
    "UserError",
    "check_kubeconfig",
    "connect",
    "explain",
    "guard",
]

CRD_HINT = (
    "the DynamicQuotaPolicy CRD (dynamicquotapolicies.dynquota.io) is not installed: "
    "kubectl apply -f crds/dynamicquotapolicies.yaml, or install the Helm chart"
)

CLI_INSTANCE = "cli"
"""The CLI's requests carry ``User-Agent: dynquota/<version> (cli)`` (the operator's carry its
pod name), so the apiserver's audit log tells an admin's command from the operator."""
FIELD_MANAGER = "dynquota-cli"
"""``fieldManager`` of the CLI's writes (override and kill-switch annotations, scale-down):
an admin's write, told apart from the operator's (``dynquota``) in ``managedFields``."""

T = TypeVar("T")


class UserError(Exception):
    """A problem the user can fix; the message says what and how."""


def explain(exc: BaseException, what: str = "") -> UserError | None:
    """Turn a client failure into a :class:`UserError` with a clear message, or ``None``.

    ``what`` (e.g. ``reading namespace kube-system``) prefixes the message. Understands
    kubernetes_asyncio's ``ConfigException``, a kubeconfig that is not YAML or not there,
    :class:`~dynquota._k8s.errors.ApiError` (401/403, 404 on the CRD) and connection failures
    (:class:`~dynquota._k8s.errors.TransportError`, aiohttp, ``ConnectionError``).
    """
    import aiohttp
    import kubernetes_asyncio
    import yaml

    from dynquota._k8s.errors import ApiError, ForbiddenError, NotFoundError, TransportError

    prefix = f"{what}: " if what else ""
    if isinstance(exc, yaml.YAMLError):
        mark = getattr(exc, "problem_mark", None)
        where = (
            f"{mark.name} (line {mark.line + 1}, column {mark.column + 1})"
            if mark is not None
            else "file"
        )
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return UserError(f"{prefix}kubeconfig {where} is not valid YAML: {problem}")
    if isinstance(exc, kubernetes_asyncio.config.ConfigException):
        return UserError(
            f"{prefix}no usable Kubernetes configuration ({exc}); set KUBECONFIG or "
            "--kubeconfig, or run inside a cluster"
        )
    if isinstance(exc, FileNotFoundError):
        return UserError(f"{prefix}kubeconfig not found: {exc.filename}")
    if isinstance(exc, ApiError):
        status, message = exc.status, exc.message
        if status == 401:
            return UserError(f"{prefix}the cluster refused the credentials (401): {message}")
        if status == 403 or isinstance(exc, ForbiddenError):
            return UserError(f"{prefix}insufficient RBAC permissions (403): {message}")
        if status == 404 and (isinstance(exc, NotFoundError) or "dynamicquotapolicies" in what):
            return UserError(f"{prefix}{CRD_HINT}")
        if status == 0:
            return UserError(f"{prefix}cannot reach the Kubernetes API: {message or exc}")
        return None
    if isinstance(exc, aiohttp.ClientError | TransportError | ConnectionError):
        return UserError(f"{prefix}cannot reach the Kubernetes API: {exc}")
    return None


def check_kubeconfig(kubeconfig: str | None) -> None:
    """Fail early, naming the path, when the kubeconfig to be used does not exist.

    ``kubeconfig`` is the ``--kubeconfig`` path; without it (and outside a pod), the files
    listed in ``$KUBECONFIG`` (``:``-separated) are checked: at least one must exist.

    Raises :class:`UserError` (``kubeconfig not found: PATH``).
    """
    if kubeconfig:
        if not os.path.isfile(kubeconfig):
            raise UserError(f"kubeconfig not found: {kubeconfig}")
        return
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed and not any(os.path.isfile(p) for p in listed):
        raise UserError(f"kubeconfig not found: {os.pathsep.join(listed)} (from $KUBECONFIG)")


async def guard(what: str, call: Awaitable[T]) -> T:
    """Await ``call``; a failure :func:`explain` understands is raised as its
    :class:`UserError` (prefixed with ``what``), anything else as it is."""
    try:
        return await call
    except Exception as exc:
        error = explain(exc, what)
        if error is not None:
            raise error from exc
        raise


@asynccontextmanager
async def connect(kubeconfig: str | None, what: str = "connecting") -> AsyncIterator[Any]:
    """A kubernetes_asyncio ``ApiClient`` for ``kubeconfig`` (``None``: ``$KUBECONFIG`` or
    in-cluster; see :func:`dynquota.kube.client.new_api_client`), closed on exit.

    Raises :class:`UserError` (prefixed with ``what``) when the kubeconfig is missing,
    malformed or unusable.
    """
    from dynquota.kube.client import new_api_client, replica_user_agent

    check_kubeconfig(kubeconfig)
    api_client = await guard(
        what, new_api_client(kubeconfig or None, user_agent=replica_user_agent(CLI_INSTANCE))
    )
    async with api_client:
        yield api_client
