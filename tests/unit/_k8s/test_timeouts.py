"""Every Kubernetes API call dynquota makes carries a timeout (ported from p9_no_timeouts.py).

Two checks:

- **Recorded**: an ``ApiClient`` whose request path (``ApiClient.request``, which every
  generated method and ``call_api`` go through) records each request's ``_request_timeout``
  and query, then fails as a refused connection would. Every public method of every adapter
  is driven once; the test fails when a request went out without a bounded
  ``aiohttp.ClientTimeout``, and when an adapter grows a public method that has no driver
  below (so a new call site cannot slip through). Start-up reads must be consistent reads
  (no ``resourceVersion`` parameter).
- **Hanging socket**: against a loopback server that accepts connections and never answers
  (a half-open apiserver: a transport fault, no Kubernetes), with the timeout constants made
  small, each short call raises ``TransportError`` within a deadline.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from dynquota._k8s import timeouts
from dynquota._k8s.errors import KubeError, TransportError
from dynquota._k8s.reflector import Collection
from dynquota.admission.errors import QuotaAccessError
from dynquota.admission.kubernetes_accessor import KubernetesQuotaAccessor
from dynquota.admission.types import ResourceQuota
from dynquota.kube.cluster import ClusterClient
from dynquota.kube.events import EventRecorder, ObjectRef
from dynquota.kube.informer import PODS_WATCH, KubeMetadataSource
from dynquota.kube.lease import KubeLeaseApi
from dynquota.kube.quotas import QuotaClient


class RecordingApiClient(client.ApiClient):  # type: ignore[misc]
    """Records every request, then fails it like a refused connection."""

    def __init__(self, host: str = "http://127.0.0.1:9") -> None:
        super().__init__(client.Configuration(host=host))
        self.requests: list[dict[str, Any]] = []

    async def request(  # type: ignore[override]
        self,
        method: str,
        url: str,
        query_params: Any = None,
        headers: Any = None,
        post_params: Any = None,
        body: Any = None,
        _preload_content: bool = True,
        _request_timeout: Any = None,
    ) -> Any:
        self.requests.append(
            {
                "method": method,
                "url": url,
                "query": dict(query_params or []),
                "timeout": _request_timeout,
                "headers": dict(headers or {}),
            }
        )
        raise aiohttp.ClientConnectionError("recorded: no apiserver here")


QUOTA = ResourceQuota.from_object(
    {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "q", "namespace": "team", "resourceVersion": "5"},
        "spec": {"hard": {"pods": "1"}},
    }
)
LEASE = {"metadata": {"name": "dq", "namespace": "ops", "resourceVersion": "1"}, "spec": {}}


async def _drain(generator: Any) -> None:
    async for _ in generator:
        pass


async def _watch_from(accessor: KubernetesQuotaAccessor, resource_version: str) -> None:
    """One watch cycle of the accessor's informer from ``resource_version``."""
    accessor.informer.resource_version = resource_version
    await accessor.informer.watch_once()


def drivers(api: client.ApiClient) -> dict[str, Callable[[], Awaitable[Any]]]:
    """One call of every public adapter method (and of the accessor's informer requests)."""
    quotas = QuotaClient(api)
    cluster = ClusterClient(api)
    events = EventRecorder(api)
    leases = KubeLeaseApi(api)
    source = KubeMetadataSource(api, PODS_WATCH)
    collection = Collection(api, "/api/v1/namespaces/team/resourcequotas")
    accessor = KubernetesQuotaAccessor(api)
    return {
        "QuotaClient.get": lambda: quotas.get("team"),
        "QuotaClient.list_managed": quotas.list_managed,
        "QuotaClient.create": lambda: quotas.create("team", {"pods": "1"}, {}),
        "QuotaClient.patch": lambda: quotas.patch("team", {"spec": {}}, "5"),
        "QuotaClient.delete": lambda: quotas.delete("team", "uid-1"),
        "ClusterClient.read_namespace": lambda: cluster.read_namespace("kube-system"),
        "ClusterClient.list_namespaces": cluster.list_namespaces,
        "ClusterClient.list_limit_ranges": lambda: cluster.list_limit_ranges("team-a"),
        "ClusterClient.create_limit_range": lambda: cluster.create_limit_range(
            "team-a", {"type": "Container", "defaultRequest": {"cpu": "100m"}}
        ),
        "ClusterClient.patch_limit_range": lambda: cluster.patch_limit_range(
            "team-a", {"type": "Container", "defaultRequest": {"cpu": "100m"}}, "5"
        ),
        "ClusterClient.list_policies": cluster.list_policies,
        "ClusterClient.patch_policy_status": lambda: cluster.patch_policy_status("p", {}),
        "ClusterClient.list_budgets": cluster.list_budgets,
        "ClusterClient.patch_budget_status": lambda: cluster.patch_budget_status("b", {}),
        "EventRecorder.emit": lambda: events.emit(
            ObjectRef.quota("team", "dynquota"), "Normal", "Resized", "x"
        ),
        "KubeLeaseApi.get": lambda: leases.get("ops", "dq"),
        "KubeLeaseApi.create": lambda: leases.create("ops", LEASE),
        "KubeLeaseApi.replace": lambda: leases.replace("ops", "dq", LEASE),
        "KubeMetadataSource.list_page": lambda: source.list_page(500, None),
        "KubeMetadataSource.list_all": source.list_all,
        "KubeMetadataSource.watch": lambda: _drain(source.watch("1", 300)),
        "Collection.list_page": lambda: collection.list_page(500, None),
        "Collection.list_all": collection.list_all,
        "Collection.watch": lambda: _drain(collection.watch("1", 300)),
        "KubernetesQuotaAccessor.list_quotas": lambda: accessor.list_quotas("team"),
        "KubernetesQuotaAccessor.get_quotas_live": lambda: accessor.get_quotas_live("team"),
        "KubernetesQuotaAccessor.write_quota_status": lambda: accessor.write_quota_status(QUOTA),
        "KubernetesQuotaAccessor._relist": accessor.informer.list_once,
        "KubernetesQuotaAccessor._watch": lambda: _watch_from(accessor, "1"),
    }


ADAPTERS = (
    QuotaClient,
    ClusterClient,
    EventRecorder,
    KubeLeaseApi,
    KubeMetadataSource,
    Collection,
    KubernetesQuotaAccessor,
)
# public methods that make no request of their own (lifecycle, pure helpers, reads of a cache)
NO_REQUEST = {
    "KubernetesQuotaAccessor.start",  # runs its informer, driven directly
    "KubernetesQuotaAccessor.stop",
    "KubernetesQuotaAccessor.get_quotas",  # cache first, then list_quotas
    "KubernetesQuotaAccessor.update_quota_status",  # write_quota_status + cache
    "KubernetesQuotaAccessor.informer_quotas",
    "KubernetesQuotaAccessor.informer_synced",
}


def _public_methods(cls: type) -> set[str]:
    names = set()
    for name, member in inspect.getmembers(cls):
        if name.startswith("_"):
            continue
        if inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member):
            names.add(f"{cls.__name__}.{name}")
    return names


def _bounded(timeout: Any, kind: str) -> bool:
    if not isinstance(timeout, aiohttp.ClientTimeout):
        return False
    connect = timeout.sock_connect if timeout.sock_connect is not None else timeout.connect
    if connect is None or connect > timeouts.CONNECT_TIMEOUT:
        return False
    if kind == "watch":
        return timeout.total is None and timeout.sock_read is not None
    return timeout.total is not None and timeout.total <= timeouts.REQUEST_TIMEOUT


async def test_every_public_adapter_method_has_a_driver() -> None:
    async with RecordingApiClient() as api:
        driven = {name for name in drivers(api) if not name.split(".")[1].startswith("_")}
    discovered = set().union(*(_public_methods(cls) for cls in ADAPTERS)) - NO_REQUEST
    assert discovered == driven, "a new adapter method needs a driver in this test"


async def test_every_request_carries_a_bounded_timeout() -> None:
    async with RecordingApiClient() as api:
        for name, call in drivers(api).items():
            before = len(api.requests)
            try:
                result = await call()
            except (KubeError, QuotaAccessError, aiohttp.ClientError):
                result = None
            sent = api.requests[before:]
            assert sent, f"{name} sent no request"
            assert name != "EventRecorder.emit" or result is False
            for request in sent:
                kind = "watch" if request["query"].get("watch") in ("true", True) else "short"
                assert _bounded(request["timeout"], kind), (name, request["timeout"])


async def test_watches_get_a_socket_read_timeout_of_their_server_timeout_plus_30s() -> None:
    async with RecordingApiClient() as api:
        with pytest.raises(TransportError):
            await _drain(KubeMetadataSource(api, PODS_WATCH).watch("7", 120))
        with pytest.raises(TransportError):  # the accessor's informer loop retries it
            await _watch_from(KubernetesQuotaAccessor(api, watch_timeout=120), "7")
    for request in api.requests:
        timeout = request["timeout"]
        assert (timeout.total, timeout.sock_read, timeout.sock_connect) == (None, 150.0, 3.0)
        assert request["query"]["timeoutSeconds"] in ("120", 120)


async def test_short_calls_get_10s_total_and_3s_connect() -> None:
    async with RecordingApiClient() as api:
        with pytest.raises(TransportError):
            await QuotaClient(api).get("team")
        with pytest.raises(TransportError):
            await KubeLeaseApi(api).get("ops", "dq")
    quota, lease = (request["timeout"] for request in api.requests)
    assert (quota.total, quota.sock_connect) == (10.0, 3.0)
    assert (lease.total, lease.sock_connect) == (3.0, 3.0)


async def test_start_up_reads_are_consistent_reads() -> None:
    """Never ``resourceVersion`` (0 or any): a quorum read, not the watch cache."""
    async with RecordingApiClient() as api:
        cluster, quotas = ClusterClient(api), QuotaClient(api)
        for call in (
            lambda: cluster.read_namespace("kube-system"),
            cluster.list_namespaces,
            cluster.list_policies,
            cluster.list_budgets,
            quotas.list_managed,
        ):
            with pytest.raises(TransportError):
                await call()
    assert len(api.requests) == 5
    for request in api.requests:
        assert request["method"] == "GET"
        assert "resourceVersion" not in request["query"], request
        assert "resourceVersionMatch" not in request["query"], request


# -- a loopback server that accepts and never answers ---------------------------------------


@pytest.fixture
async def silent_server() -> AsyncIterator[str]:
    """``http://127.0.0.1:PORT`` of a server that reads requests and never answers."""
    hold = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await hold.wait()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    hold.set()
    server.close()
    await server.wait_closed()


async def test_calls_to_a_silent_apiserver_end_in_transport_errors(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(timeouts, "REQUEST_TIMEOUT", 0.5)
    monkeypatch.setattr(timeouts, "LEASE_REQUEST_TIMEOUT", 0.5)
    async with client.ApiClient(client.Configuration(host=silent_server)) as api:
        quotas, cluster = QuotaClient(api), ClusterClient(api)
        leases = KubeLeaseApi(api, request_timeout=0.5)
        source = KubeMetadataSource(api, PODS_WATCH)
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "quota get": lambda: quotas.get("team"),
            "managed quota list (kill-switch sweep)": quotas.list_managed,
            "quota patch": lambda: quotas.patch("team", {"spec": {}}, "5"),
            "kube-system read": lambda: cluster.read_namespace("kube-system"),
            "policy list": cluster.list_policies,
            "lease get": lambda: leases.get("ops", "dq"),
            "metadata list page": lambda: source.list_page(500, None),
        }
        for what, call in calls.items():
            started = time.monotonic()
            with pytest.raises(TransportError):
                await asyncio.wait_for(call(), 5)
            took = time.monotonic() - started
            assert took < 2.0, (what, took)
