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

from dynquota.cli.flags import Target

__all__ = [
    "CLI_INSTANCE",
    "CRD_HINT",
    "FIELD_MANAGER",
    "UserError",
    "check_kubeconfig",
    "connect",
    "explain",
    "guard",
    "unreachable",
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
    kubernetes_asyncio's ``ConfigException``, a kubeconfig that is not YAML or not there
    (:class:`~dynquota.kube.identity.KubeconfigMissingError`), an impersonation that cannot
    be sent (:class:`~dynquota.kube.identity.IdentityError`),
    :class:`~dynquota._k8s.errors.ApiError` (401/403, 404 on the CRD) and connection failures
    (:class:`~dynquota._k8s.errors.TransportError`, aiohttp, ``ConnectionError``: one line,
    :func:`unreachable`).
    """
    import aiohttp
    import kubernetes_asyncio
    import yaml

    from dynquota._k8s.errors import (
        ApiError,
        ForbiddenError,
        NotFoundError,
        TransportError,
        redact_userinfo,
    )
    from dynquota.kube.identity import IdentityError, KubeconfigMissingError

    prefix = f"{what}: " if what else ""
    if isinstance(exc, KubeconfigMissingError):
        return UserError(f"{prefix}{exc}; set KUBECONFIG or --kubeconfig")
    if isinstance(exc, IdentityError):
        return UserError(f"{prefix}{exc}")
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
            if "ValidatingAdmissionPolicy" in message or "admission webhook" in message:
                # RBAC allowed it; an admission policy or webhook refused it: say which
                return UserError(
                    f"{prefix}refused by an admission policy, not RBAC (403): {message}"
                )
            return UserError(f"{prefix}insufficient RBAC permissions (403): {message}")
        if status == 404 and (isinstance(exc, NotFoundError) or "dynamicquotapolicies" in what):
            return UserError(f"{prefix}{CRD_HINT}")
        if status == 429:
            # (e.g. "storage is (re)initializing" right after a CRD is re-created)
            return UserError(
                f"{prefix}the apiserver asked to retry later (429 Too Many Requests): "
                f"{message}; run the command again"
            )
        if status == 0:
            text = redact_userinfo(f"{message or exc}")
            return UserError(f"{prefix}cannot reach the Kubernetes API: {text}")
        return None
    if isinstance(exc, aiohttp.ClientError | TransportError | ConnectionError):
        return UserError(f"{prefix}{unreachable(exc)}")
    return None


def unreachable(exc: BaseException) -> str:
    """One human line for a request that got no answer: ``cannot reach the Kubernetes API at
    HOST:PORT: connection refused`` (the innermost cause that names the host and the OS
    error), else ``cannot reach the Kubernetes API: <the innermost cause>`` (never a repr
    of aiohttp's connection key)."""
    import aiohttp

    from dynquota._k8s.errors import redact_userinfo

    chain: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    for error in chain:
        if isinstance(error, aiohttp.ClientConnectorError):
            code = error.os_error.errno
            why = os.strerror(code) if code else str(error.os_error)
            return f"cannot reach the Kubernetes API at {error.host}:{error.port}: {why.lower()}"
    for error in chain:
        if isinstance(error, TimeoutError):
            return "cannot reach the Kubernetes API: no answer before the request timeout"
    innermost = chain[-1]
    text = redact_userinfo(str(innermost)) or type(innermost).__name__  # (a proxy's password)
    return f"cannot reach the Kubernetes API: {text}"


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
async def connect(target: Target | str | None, what: str = "connecting") -> AsyncIterator[Any]:
    """A kubernetes_asyncio ``ApiClient`` for ``target`` (a :class:`~dynquota.cli.flags.Target`
    from the command's flags, or a kubeconfig path; ``None``: ``$KUBECONFIG`` or in-cluster;
    see :func:`dynquota.kube.client.new_api_client`), acting as the identity the kubeconfig
    and the flags ask for, closed on exit.

    Raises :class:`UserError` (prefixed with ``what``) when the kubeconfig is missing,
    malformed or unusable, or the impersonation cannot be sent.
    """
    from dynquota.kube.client import new_api_client, replica_user_agent

    if not isinstance(target, Target):
        target = Target(kubeconfig=target or None)
    check_kubeconfig(target.kubeconfig)
    api_client = await guard(
        what,
        new_api_client(
            target.kubeconfig,
            target.context,
            user_agent=replica_user_agent(CLI_INSTANCE),
            as_user=target.as_user,
            as_uid=target.as_uid,
            as_groups=target.as_groups,
        ),
    )
    async with api_client:
        yield api_client


def context_namespace_of(target: Target) -> str:
    """The namespace of ``target``'s kubeconfig context, as kubectl takes it without ``-n``
    (:func:`dynquota.kube.identity.context_namespace`: ``default`` when it names none).

    Raises :class:`UserError` (:func:`explain`) for a kubeconfig that cannot be read."""
    from dynquota.kube.identity import context_namespace

    try:
        return context_namespace(target.kubeconfig, target.context)
    except Exception as exc:
        explained = explain(exc, "reading the kubeconfig")
        if explained is None:
            raise
        raise explained from exc
