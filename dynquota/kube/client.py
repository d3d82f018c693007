"""Building a kubernetes_asyncio ``ApiClient`` from a kubeconfig or the in-cluster config."""

from __future__ import annotations

import os

from kubernetes_asyncio import client, config

from dynquota import __version__

__all__ = ["DEFAULT_USER_AGENT", "new_api_client", "replica_user_agent"]

DEFAULT_USER_AGENT = f"dynquota/{__version__}"
"""``User-Agent`` of dynquota's requests unless the caller gives one."""


def replica_user_agent(instance: str) -> str:
    """``dynquota/<version> (<instance>)``: the User-Agent of one replica (its pod name), so
    the apiserver's audit log (``userAgent``) tells replicas apart."""
    return f"{DEFAULT_USER_AGENT} ({instance})" if instance else DEFAULT_USER_AGENT


async def new_api_client(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    user_agent: str | None = None,
) -> client.ApiClient:
    """Return a new kubernetes_asyncio ``ApiClient``; the caller closes it (``async with``).

    With ``kubeconfig`` (a path) it is used, with ``context`` if given. Without it: the
    in-cluster ServiceAccount config when running in a pod (``KUBERNETES_SERVICE_HOST`` set),
    else ``$KUBECONFIG`` or ``~/.kube/config``. In-cluster tokens are re-read as they rotate.

    ``user_agent`` (default :data:`DEFAULT_USER_AGENT`, ``dynquota/<version>``) is sent with
    every request; the operator passes ``dynquota/<version> (<pod name>)`` so the apiserver's
    audit log tells replicas apart (``managedFields`` cannot: same manager and account).

    The client sets no timeout itself: every call site passes one from
    :mod:`dynquota._k8s.timeouts`.

    Raises ``kubernetes_asyncio.config.ConfigException`` when no configuration is found.
    """
    configuration = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        await config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    api_client = client.ApiClient(configuration=configuration)
    api_client.user_agent = user_agent or DEFAULT_USER_AGENT
    return api_client
