"""Building a kubernetes_asyncio ``ApiClient`` from a kubeconfig or the in-cluster config,
acting as the identity the kubeconfig (or the flags) ask for (:mod:`dynquota.kube.identity`)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
from collections.abc import Sequence

from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio import client, config
from yarl import URL

from dynquota import __version__
from dynquota.kube.identity import Identity, ImpersonatingApiClient, load

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
    as_user: str | None = None,
    as_uid: str | None = None,
    as_groups: Sequence[str] | None = None,
) -> client.ApiClient:
    """Return a new kubernetes_asyncio ``ApiClient``; the caller closes it (``async with``).

    With ``kubeconfig`` (a path) it is used, with ``context`` if given. Without it: the
    in-cluster ServiceAccount config when running in a pod (``KUBERNETES_SERVICE_HOST`` set),
    else ``$KUBECONFIG`` or ``~/.kube/config``. In-cluster tokens are re-read as they rotate.

    ``user_agent`` (default :data:`DEFAULT_USER_AGENT`, ``dynquota/<version>``) is sent with
    every request; the operator passes ``dynquota/<version> (<pod name>)`` so the apiserver's
    audit log tells replicas apart (``managedFields`` cannot: same manager and account).

    Identity: the kubeconfig user's ``as``, ``as-uid``, ``as-groups`` and ``as-user-extra``,
    with ``as_user``, ``as_uid`` and ``as_groups`` (kubectl's ``--as``, ``--as-uid``,
    ``--as-group``; ``None``: not given) in their place, are sent with every request
    (:class:`~dynquota.kube.identity.ImpersonatingApiClient`); without any, a plain
    ``ApiClient``.

    The client sets no timeout itself: every call site passes one from
    :mod:`dynquota._k8s.timeouts`.

    Raises ``kubernetes_asyncio.config.ConfigException`` (no such context, unusable
    credentials, no in-cluster config), :class:`~dynquota.kube.identity.KubeconfigMissingError`
    (no kubeconfig file), :class:`~dynquota.kube.identity.IdentityError` (an impersonation
    that cannot be sent: groups without a user).
    """
    configuration = client.Configuration()
    if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        identity = Identity()
    else:
        identity = await load(configuration, kubeconfig, context)
    identity = identity.overridden(as_user, as_uid, as_groups)
    identity.check()
    _proxy_from_environment(configuration)
    api_client = (
        ImpersonatingApiClient(configuration, identity)
        if identity.impersonating
        else client.ApiClient(configuration=configuration)
    )
    api_client.user_agent = user_agent or DEFAULT_USER_AGENT
    # kubernetes_asyncio opens its aiohttp session with trust_env=True: every request then
    # looks up ~/.netrc and the proxy variables in a worker thread, twice (two thread hops a
    # call: 5 % of the operator's CPU under churn, issue 25). The proxy is looked up once above.
    api_client.rest_client.pool_manager._trust_env = False
    return api_client


def _proxy_from_environment(configuration: client.Configuration) -> None:
    """Set ``configuration.proxy`` (and its ``Proxy-Authorization``) from ``HTTPS_PROXY``/
    ``HTTP_PROXY``/``NO_PROXY`` for the apiserver's URL, as aiohttp's ``trust_env`` did per
    request, when the kubeconfig names no ``proxy-url``; never for a loopback apiserver
    (``localhost``, ``127.0.0.0/8``, ``::1``), as kubectl. Raises nothing."""
    url = URL(configuration.host or "")
    if configuration.proxy or url.host in (None, "localhost"):
        return
    with contextlib.suppress(ValueError):  # (not an address: a name)
        if ipaddress.ip_address(url.host).is_loopback:
            return  # as kubectl (Go's httpproxy): a loopback apiserver is never proxied
    with contextlib.suppress(LookupError, ValueError):
        proxy, auth = get_env_proxy_for_url(url)
        configuration.proxy = str(proxy)
        if auth is not None:
            configuration.proxy_headers = {"Proxy-Authorization": auth.encode()}
