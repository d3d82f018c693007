"""`dynquota cleanup` (the chart's uninstall hook) on the real apiserver: it lists managed quotas
by label and deletes each with a uid precondition, so a quota replaced since the list (by an
unlabelled one, or by a new object under the same name) is never deleted by mistake."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from dynquota.cli import delete_managed_quotas, list_managed_quotas, main
from dynquota.testing.controlplane import LocalControlPlane

MANAGED = {"app.kubernetes.io/managed-by": "dynquota"}


@pytest.fixture
def core(api_client: kubernetes.client.ApiClient) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(api_client)


@pytest.fixture
def namespaces(core: kubernetes.client.CoreV1Api) -> Iterator[list[str]]:
    """Three fresh namespaces, deleted after the test."""
    names = [f"dq-clean-{uuid.uuid4().hex[:6]}" for _ in range(3)]
    for name in names:
        core.create_namespace({"metadata": {"name": name}})
    yield names
    for name in names:
        try:
            core.delete_namespace(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def quota(name: str, hard: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"hard": {"pods": hard}},
    }


def quotas_in(core: kubernetes.client.CoreV1Api, ns: str) -> dict[str, tuple[str, dict[str, str]]]:
    """``{name: (uid, labels)}`` of the quotas in ``ns``."""
    items = core.list_namespaced_resource_quota(ns).items
    return {q.metadata.name: (q.metadata.uid, q.metadata.labels or {}) for q in items}


def test_delete_uses_a_uid_precondition(
    core: kubernetes.client.CoreV1Api, namespaces: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, c = namespaces
    for ns in namespaces:
        core.create_namespaced_resource_quota(ns, quota("dynquota", "10", MANAGED))
    # A labelled quota with another name is never a managed quota.
    core.create_namespaced_resource_quota(a, quota("team", "1", MANAGED))
    listed = [q for q in list_managed_quotas(core) if q.metadata.namespace in namespaces]
    assert sorted(q.metadata.namespace for q in listed) == sorted(namespaces)
    # Between the list and the deletes: b's quota is replaced by an unlabelled one (a user's
    # own quota under the same name), c's by a new managed one (another object).
    core.delete_namespaced_resource_quota("dynquota", b)
    core.create_namespaced_resource_quota(b, quota("dynquota", "3"))
    core.delete_namespaced_resource_quota("dynquota", c)
    core.create_namespaced_resource_quota(c, quota("dynquota", "10", MANAGED))
    b_before, c_before = quotas_in(core, b), quotas_in(core, c)
    capsys.readouterr()

    report = delete_managed_quotas(core, listed)

    assert (report.deleted, report.gone, sorted(report.replaced)) == ([a], [], sorted([b, c]))
    assert quotas_in(core, a) == {"team": quotas_in(core, a)["team"]}
    assert quotas_in(core, b) == b_before  # the unlabelled replacement is untouched
    assert quotas_in(core, c) == c_before  # so is the new object: the next list finds it
    out = capsys.readouterr().out
    (uid_a,) = [q.metadata.uid for q in listed if q.metadata.namespace == a]
    (uid_b,) = [q.metadata.uid for q in listed if q.metadata.namespace == b]
    assert f"deleted resourcequota {a}/dynquota (uid {uid_a})" in out.splitlines()
    assert (
        f"resourcequota {b}/dynquota left alone: replaced since it was listed (uid {uid_b} is gone)"
    ) in out.splitlines()
    # A quota already gone is not an error.
    again = delete_managed_quotas(core, [q for q in listed if q.metadata.namespace == a])
    assert (again.deleted, again.gone, again.replaced) == ([], [a], [])


def test_cleanup_command_deletes_managed_quotas_until_none_is_listed(
    controlplane: LocalControlPlane,
    core: kubernetes.client.CoreV1Api,
    namespaces: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b, c = namespaces
    core.create_namespaced_resource_quota(a, quota("dynquota", "10", MANAGED))
    core.create_namespaced_resource_quota(b, quota("dynquota", "10", MANAGED))
    core.create_namespaced_resource_quota(c, quota("dynquota", "3"))  # unmanaged
    core.create_namespaced_resource_quota(b, quota("team", "1", MANAGED))
    c_before = quotas_in(core, c)
    # Without --yes: lists only.
    assert main(["cleanup", "--kubeconfig", controlplane.kubeconfig]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"would delete resourcequota {a}/dynquota" in out
    assert f"would delete resourcequota {b}/dynquota" in out
    assert f"would delete resourcequota {c}/dynquota" not in out
    assert set(quotas_in(core, a)) == {"dynquota"}

    assert main(["cleanup", "--yes", "--kubeconfig", controlplane.kubeconfig]) == 0
    out = capsys.readouterr().out.splitlines()
    assert quotas_in(core, a) == {}
    assert set(quotas_in(core, b)) == {"team"}
    assert quotas_in(core, c) == c_before
    assert [line for line in out if line.startswith("deleted resourcequota ") and c in line] == []
    assert out[-1].startswith("deleted ")
    assert out[-1].endswith(" managed quotas (0 already gone, 0 replaced meanwhile and left alone)")
