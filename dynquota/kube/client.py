"""Building a kubernetes_asyncio ``ApiClient`` from a kubeconfig or the in-cluster config."""

from __future__ import annotations

import os

from kubernetes_asyncio import client, config

__all__ = ["new_api_client"]


async def new_api_client(
    kubeconfig: str | None = None, context: str | None = None
) -> client.ApiClient:
    """Return a new kubernetes_asyncio ``ApiClient``; the caller closes it (``async with``).

    With ``kubeconfig`` (a path) it is used, with ``context`` if given. Without it: the
    in-cluster ServiceAccount config when running in a pod (``KUBERNETES_SERVICE_HOST`` set),
    else ``$KUBECONFIG`` or ``~/.kube/config``. In-cluster tokens are re-read as they rotate.

    Raises ``kubernetes_asyncio.config.ConfigException`` when no configuration is found.
    """
    configuration = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        await config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    return client.ApiClient(configuration=configuration)
