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


# `make test` runs on two pytest-xdist workers (`--dist loadgroup --no-loadscope-reorder`):
# the integration tests mostly wait on controllers and cooldowns, not on the CPU. Each
# integration file is one xdist group, so its module fixtures are set up once, on one worker;
# the files on the kwok-node cluster share one group, so only one worker starts that cluster.
_NODE_CLUSTER_FILES = {"test_realism.py", "test_runaways.py"}
# The longest files first (seconds in `make test`'s durations), so the two workers finish
# together (longest-processing-time-first); other files, then the unit tests, follow in order.
_SECONDS = {
    "test_faults.py": 330,
    "test_budgets.py": 280,
    "test_operator.py": 230,
    "test_runaways.py": 100,
    "test_realism.py": 70,
    "test_informer.py": 110,
    "test_keys.py": 90,
    "test_operator_demo.py": 80,
    "test_chart_image.py": 60,
    "test_chart_install.py": 95,
    "test_quota_controller_stall.py": 105,
    "test_unenforced_runaway.py": 40,
    "test_dashboard.py": 30,
}


def _integration_group(item: pytest.Item) -> str | None:
    """The xdist group of an integration test (its file, or ``node_cluster``); None for the
    others."""
    path = Path(str(item.fspath))
    if "integration" not in path.parts:
        return None
    return "node_cluster" if path.name in _NODE_CLUSTER_FILES else path.name


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests by folder, so `-m integration` / `-m 'not bench'` select by kind; group the
    integration tests by file for pytest-xdist and run the longest groups first (the order
    inside a file is kept)."""
    files: dict[str, set[str]] = {}
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        group = _integration_group(item)
        if group is not None:
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.xdist_group(group))
            files.setdefault(group, set()).add(Path(str(item.fspath)).name)
            first.setdefault(group, index)
        if "bench" in Path(str(item.fspath)).parts:
            item.add_marker(pytest.mark.bench)
    seconds = {
        group: sum(_SECONDS.get(name, 0) for name in names) for group, names in files.items()
    }

    def order(pair: tuple[int, pytest.Item]) -> tuple[int, int, int]:
        index, item = pair
        group = _integration_group(item)
        if group is None:  # unit tests and benchmarks: after the integration groups, in order
            return (1, 0, index)
        return (0, -seconds[group], first[group])

    # sorted() is stable: the tests inside a group keep their order
    items[:] = [item for _, item in sorted(enumerate(items), key=order)]


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
