"""Shared fixtures: the real local control plane (session) and a fresh namespace per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import kubernetes
import kubernetes_asyncio
import pytest
from kubernetes.client.exceptions import ApiException

from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.wait import wait_until

_CONTROLPLANE: list[LocalControlPlane] = []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests by folder, so `-m integration` / `-m 'not bench'` select by kind."""
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "integration" in parts:
            item.add_marker(pytest.mark.integration)
        if "bench" in parts:
            item.add_marker(pytest.mark.bench)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Attach the control-plane logs to the report of a failing test that used it."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and _CONTROLPLANE and "controlplane" in getattr(item, "fixturenames", ()):
        report.sections.append(("control-plane logs", _CONTROLPLANE[0].log_tails()))


@pytest.fixture(scope="session")
def controlplane() -> Iterator[LocalControlPlane]:
    """etcd + kube-apiserver + kube-controller-manager, started once per test session."""
    with LocalControlPlane() as cp:
        _CONTROLPLANE.append(cp)
        yield cp
        _CONTROLPLANE.clear()


@pytest.fixture(scope="session")
def api_client(controlplane: LocalControlPlane) -> Iterator[kubernetes.client.ApiClient]:
    """The official sync client as cluster admin: the fixtures' independent path to the API."""
    client = kubernetes.config.new_client_from_config(config_file=controlplane.kubeconfig)
    yield client
    client.close()


@pytest.fixture
async def async_api_client(
    controlplane: LocalControlPlane,
) -> AsyncIterator[kubernetes_asyncio.client.ApiClient]:
    """A kubernetes_asyncio client as cluster admin, closed after the test."""
    client = await kubernetes_asyncio.config.new_client_from_config(
        config_file=controlplane.kubeconfig
    )
    async with client:
        yield client


@pytest.fixture
def namespace(api_client: kubernetes.client.ApiClient) -> Iterator[str]:
    """A fresh namespace whose `default` ServiceAccount exists; deleted after the test."""
    core = kubernetes.client.CoreV1Api(api_client)
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})

    def has_default_sa() -> bool:
        try:
            core.read_namespaced_service_account("default", name)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True

    wait_until(has_default_sa, f"ServiceAccount default in {name}", timeout=60)
    yield name
    try:
        core.delete_namespace(name)
    except ApiException as e:
        if e.status != 404:
            raise
