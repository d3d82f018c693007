"""`dynquota cleanup` (the chart's uninstall hook) on the real apiserver: it lists managed quotas
by label and name and deletes them in parallel, rate-limited, each with a uid precondition, so
a quota replaced since the list (by an unlabelled one, or by a new object under the same name)
is never deleted by mistake.

The scale case (a few hundred namespaces, exact counts) runs on a private control plane, so
the cluster-wide list holds exactly what the test made. The 5,000-namespace measurement is
`tests/bench/test_cleanup_bench.py` (`-m bench`, not in `make test`).
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import kubernetes_asyncio
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from dynquota.cli import main
from dynquota.kube.cleanup import (
    ListedQuota,
    delete_managed_quotas,
    list_managed_quotas,
)
from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.toxiproxy import Toxiproxy
from dynquota.testing.wait import wait_until

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


def managed_namespaces(core: kubernetes.client.CoreV1Api, prefix: str, count: int) -> list[str]:
    """``count`` new namespaces ``<prefix>-<random>-<i>``, each with a managed quota
    (``pods: 10``)."""
    tag = uuid.uuid4().hex[:4]
    names = [f"{prefix}-{tag}-{i}" for i in range(count)]
    for ns in names:
        core.create_namespace({"metadata": {"name": ns}})
        core.create_namespaced_resource_quota(ns, quota("dynquota", "10", MANAGED))
    return names


def quotas_in(core: kubernetes.client.CoreV1Api, ns: str) -> dict[str, tuple[str, dict[str, str]]]:
    """``{name: (uid, labels)}`` of the quotas in ``ns``."""
    items = core.list_namespaced_resource_quota(ns).items
    return {q.metadata.name: (q.metadata.uid, q.metadata.labels or {}) for q in items}


async def test_delete_uses_a_uid_precondition(
    core: kubernetes.client.CoreV1Api,
    async_api_client: kubernetes_asyncio.client.ApiClient,
    namespaces: list[str],
) -> None:
    a, b, c = namespaces
    for ns in namespaces:
        core.create_namespaced_resource_quota(ns, quota("dynquota", "10", MANAGED))
    # A labelled quota with another name is never a managed quota.
    core.create_namespaced_resource_quota(a, quota("team", "1", MANAGED))
    listed = [q for q in await list_managed_quotas(async_api_client) if q.namespace in namespaces]
    assert sorted(q.namespace for q in listed) == sorted(namespaces)
    # Between the list and the deletes: b's quota is replaced by an unlabelled one (a user's
    # own quota under the same name), c's by a new managed one (another object).
    core.delete_namespaced_resource_quota("dynquota", b)
    core.create_namespaced_resource_quota(b, quota("dynquota", "3"))
    core.delete_namespaced_resource_quota("dynquota", c)
    core.create_namespaced_resource_quota(c, quota("dynquota", "10", MANAGED))
    b_before, c_before = quotas_in(core, b), quotas_in(core, c)
    results: list[tuple[str, str]] = []

    report = await delete_managed_quotas(
        async_api_client,
        listed,
        qps=50,
        on_result=lambda q, outcome, detail: results.append((q.namespace, outcome)),
    )

    assert (report.deleted, report.gone, sorted(report.replaced)) == ([a], [], sorted([b, c]))
    assert (report.failed, report.left) == ({}, [])
    assert sorted(results) == sorted([(a, "deleted"), (b, "replaced"), (c, "replaced")])
    assert quotas_in(core, a) == {"team": quotas_in(core, a)["team"]}
    assert quotas_in(core, b) == b_before  # the unlabelled replacement is untouched
    assert quotas_in(core, c) == c_before  # so is the new object: the next list finds it
    # A quota already gone is not an error.
    again = await delete_managed_quotas(
        async_api_client, [q for q in listed if q.namespace == a], qps=50
    )
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

    assert main(["cleanup", "--yes", "--verbose", "--kubeconfig", controlplane.kubeconfig]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("deleting ")  # after every delete was checked (dry run)
    assert quotas_in(core, a) == {}
    assert set(quotas_in(core, b)) == {"team"}
    assert quotas_in(core, c) == c_before
    assert [line for line in out if line.startswith("deleted resourcequota ") and c in line] == []
    assert [line for line in out if line.startswith(f"deleted resourcequota {a}/dynquota ")]
    assert out[-1].startswith("deleted ")
    assert out[-1].endswith(" managed quotas (0 already gone, 0 replaced meanwhile and left alone)")


def limit_range(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "100m"}}]},
    }


def limit_ranges_in(core: kubernetes.client.CoreV1Api, ns: str) -> set[str]:
    return {lr.metadata.name for lr in core.list_namespaced_limit_range(ns).items}


def test_cleanup_limit_ranges_deletes_only_the_companions_after_the_quotas(
    controlplane: LocalControlPlane,
    core: kubernetes.client.CoreV1Api,
    namespaces: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--limit-ranges: the companion LimitRanges (name dynquota and the managed-by label) are
    listed without --yes and deleted with it, after the quotas; a LimitRange named dynquota
    without the label, or labelled but named otherwise, is left alone. Without the option
    no LimitRange is touched."""
    a, b, c = namespaces
    core.create_namespaced_resource_quota(a, quota("dynquota", "10", MANAGED))
    core.create_namespaced_limit_range(a, limit_range("dynquota", MANAGED))
    core.create_namespaced_limit_range(b, limit_range("dynquota", MANAGED))
    core.create_namespaced_limit_range(b, limit_range("team", MANAGED))  # not the name
    core.create_namespaced_limit_range(c, limit_range("dynquota"))  # not the label
    config = ["--kubeconfig", controlplane.kubeconfig]

    assert main(["cleanup", "--limit-ranges", *config]) == 0
    out = capsys.readouterr().out.splitlines()
    mine = [line for line in out if any(ns in line for ns in namespaces)]
    assert mine[0] == f"would delete resourcequota {a}/dynquota"  # the quotas come first
    assert sorted(mine[1:]) == sorted(
        [f"would delete limitrange {a}/dynquota", f"would delete limitrange {b}/dynquota"]
    )
    assert [line for line in out if "companion LimitRanges; run with --yes" in line]
    assert limit_ranges_in(core, a) == {"dynquota"}

    assert main(["cleanup", "--yes", *config]) == 0  # quotas only
    capsys.readouterr()
    assert set(quotas_in(core, a)) == set()
    assert limit_ranges_in(core, a) == {"dynquota"}

    assert main(["cleanup", "--yes", "--verbose", "--limit-ranges", *config]) == 0
    out = capsys.readouterr().out.splitlines()
    assert limit_ranges_in(core, a) == set()
    assert limit_ranges_in(core, b) == {"team"}
    assert limit_ranges_in(core, c) == {"dynquota"}
    assert [line for line in out if line.startswith(f"deleted limitrange {a}/dynquota (uid ")]
    assert out[-1].startswith("deleted ")
    assert out[-1].endswith(
        " companion LimitRanges (0 already gone, 0 replaced meanwhile and left alone)"
    )


# -- a few hundred namespaces, exact counts (private control plane) ----------------------------

SCALE = 300  # namespaces with a managed quota
REPLACED = 10  # of them: the quota replaced after the list by a new labelled object
FOREIGN = 10  # of them: the managed quota replaced after the list by a user's unlabelled one
QPS = 200.0


async def _create_scale_bed(kubeconfig: str, prefix: str) -> None:
    """``SCALE`` namespaces, each with a managed quota; every tenth also gets a labelled quota
    of another name (never a managed quota)."""
    async with await kubernetes_asyncio.config.new_client_from_config(
        config_file=kubeconfig
    ) as api:
        core: Any = kubernetes_asyncio.client.CoreV1Api(api)
        gate = asyncio.Semaphore(16)

        async def one(i: int) -> None:
            ns = f"{prefix}-{i:04d}"
            async with gate:
                await core.create_namespace({"metadata": {"name": ns}})
                await core.create_namespaced_resource_quota(ns, quota("dynquota", "10", MANAGED))
                if i % 10 == 0:
                    await core.create_namespaced_resource_quota(ns, quota("team", "5", MANAGED))

        await asyncio.gather(*(one(i) for i in range(SCALE)))


async def _delete(kubeconfig: str, listed: list[ListedQuota], **kwargs: Any) -> Any:
    async with await kubernetes_asyncio.config.new_client_from_config(
        config_file=kubeconfig
    ) as api:
        return await delete_managed_quotas(api, listed, **kwargs)


async def _list(kubeconfig: str) -> list[ListedQuota]:
    async with await kubernetes_asyncio.config.new_client_from_config(
        config_file=kubeconfig
    ) as api:
        return await list_managed_quotas(api, page_size=100)


@pytest.fixture(scope="module")
def private_cp() -> Iterator[LocalControlPlane]:
    with LocalControlPlane() as cp:
        yield cp


def test_a_few_hundred_namespaces_exact_counts(
    private_cp: LocalControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    cp = private_cp
    api = kubernetes.config.new_client_from_config(config_file=cp.kubeconfig)
    core = kubernetes.client.CoreV1Api(api)
    prefix = f"dq-scale-{uuid.uuid4().hex[:4]}"
    asyncio.run(_create_scale_bed(cp.kubeconfig, prefix))
    listed = asyncio.run(_list(cp.kubeconfig))  # pages of 100: the continue path too
    assert len(listed) == SCALE
    assert len({q.namespace for q in listed}) == SCALE
    # After the list: REPLACED quotas become new managed objects, FOREIGN ones users' own.
    replaced = [f"{prefix}-{i:04d}" for i in range(1, 1 + REPLACED)]
    foreign = [f"{prefix}-{i:04d}" for i in range(101, 101 + FOREIGN)]
    for ns in replaced + foreign:
        core.delete_namespaced_resource_quota("dynquota", ns)
        labels = MANAGED if ns in replaced else None
        core.create_namespaced_resource_quota(ns, quota("dynquota", "7", labels))
    kept = {ns: quotas_in(core, ns) for ns in replaced + foreign}
    teams = {
        f"{prefix}-{i:04d}": quotas_in(core, f"{prefix}-{i:04d}")["team"]
        for i in range(0, SCALE, 10)
    }
    progress: list[tuple[int, int]] = []

    started = time.monotonic()
    report = asyncio.run(
        _delete(
            cp.kubeconfig,
            listed,
            qps=QPS,
            concurrency=16,
            on_progress=lambda r, total: progress.append((r.done, total)),
            progress_interval=0.5,
        )
    )
    elapsed = time.monotonic() - started

    assert len(report.deleted) == SCALE - REPLACED - FOREIGN
    assert sorted(report.replaced) == sorted(replaced + foreign)
    assert (report.gone, report.failed, report.left) == ([], {}, [])
    assert progress[-1] == (SCALE, SCALE)
    # rate-limited: QPS per second, after a first burst of at most QPS / 10
    assert elapsed >= (SCALE - QPS / 10) / QPS
    for ns, before in kept.items():
        assert quotas_in(core, ns) == before, ns  # the replacing objects, uid and all
    for ns, team in teams.items():
        assert quotas_in(core, ns)["team"] == team, ns  # labelled, other name: untouched
    deleted = set(report.deleted)
    assert [q for q in core.list_resource_quota_for_all_namespaces().items if
            q.metadata.namespace in deleted and q.metadata.name == "dynquota"] == []  # fmt: skip

    # The command finds the REPLACED new managed objects (and nothing else) and deletes them.
    capsys.readouterr()
    assert main(["cleanup", "--yes", "--qps", str(QPS), "--kubeconfig", cp.kubeconfig]) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        out[0] == f"deleting {REPLACED} managed quotas at {QPS:g}/s, 16 in parallel; deadline 31 s"
    )
    assert out[-2].startswith(f"progress: {REPLACED}/{REPLACED} in ")
    assert out[-2].endswith(f": {REPLACED} deleted, 0 already gone, 0 replaced, 0 failed")
    assert out[-1] == (
        f"deleted {REPLACED} managed quotas (0 already gone, 0 replaced meanwhile and left alone)"
    )
    for ns in foreign:
        assert quotas_in(core, ns) == kept[ns]
    assert asyncio.run(_list(cp.kubeconfig)) == []
    api.close()


def test_the_deadline_stops_the_deletes_and_says_what_is_left(
    private_cp: LocalControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    cp = private_cp
    api = kubernetes.config.new_client_from_config(config_file=cp.kubeconfig)
    core = kubernetes.client.CoreV1Api(api)
    names = managed_namespaces(core, "dq-late", 20)
    listed = asyncio.run(_list(cp.kubeconfig))
    assert len(listed) == len(names)
    # 2 per second for 1.2 s: deletes start at 0, 0.5 and 1.0 s; at least 15 are left
    report = asyncio.run(_delete(cp.kubeconfig, listed, qps=2.0, concurrency=1, deadline=1.2))
    assert report.done + len(report.left) == len(names)
    assert 1 <= report.done <= 4
    assert sorted(report.deleted + report.left) == sorted(names)
    remaining = {q.namespace for q in asyncio.run(_list(cp.kubeconfig))}
    assert remaining.isdisjoint(report.deleted)
    assert len(remaining) >= len(names) - 4

    # The command's deadline: one clear line, exit 2, and the next run continues.
    with pytest.raises(SystemExit) as exc:
        main(["cleanup", "--yes", "--qps", "2", "--concurrency", "1", "--deadline", "1",
              "--kubeconfig", cp.kubeconfig])  # fmt: skip
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("dynquota: error: deadline of 1 s passed with ")
    assert err.rstrip().endswith("or give more time with --deadline")
    assert main(["cleanup", "--yes", "--qps", "100", "--kubeconfig", cp.kubeconfig]) == 0
    assert asyncio.run(_list(cp.kubeconfig)) == []
    api.close()


def _kubeconfig_via(cp: LocalControlPlane, server: str, token: str, path: Path) -> str:
    """A kubeconfig for ``server`` (the apiserver, or a proxy in front of it) with ``token``."""
    config = yaml.safe_load(Path(cp.kubeconfig).read_text())
    config["clusters"][0]["cluster"]["server"] = server
    config["users"][0]["user"] = {"token": token}
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _admin_token(cp: LocalControlPlane) -> str:
    config = yaml.safe_load(Path(cp.kubeconfig).read_text())
    token: str = config["users"][0]["user"]["token"]
    return token


def test_a_delete_without_an_answer_is_tried_again(
    private_cp: LocalControlPlane, tmp_path: Path
) -> None:
    """Through Toxiproxy, disabled at first: the first delete gets no answer (connection
    refused); the retry, after the proxy is enabled again, succeeds."""
    cp = private_cp
    api = kubernetes.config.new_client_from_config(config_file=cp.kubeconfig)
    core = kubernetes.client.CoreV1Api(api)
    names = managed_namespaces(core, "dq-retry", 5)
    listed = sorted(asyncio.run(_list(cp.kubeconfig)), key=lambda q: q.namespace)
    assert [q.namespace for q in listed] == sorted(names)
    retried: list[tuple[str, int]] = []
    with Toxiproxy(log_path=tmp_path / "toxiproxy.log") as toxiproxy:
        proxy = toxiproxy.proxy("cleanup", f"127.0.0.1:{cp.apiserver_port}")
        proxied = _kubeconfig_via(cp, proxy.url, _admin_token(cp), tmp_path / "proxied")
        proxy.set_enabled(False)

        def on_retry(q: ListedQuota, attempts: int, error: str) -> None:
            assert error.startswith("delete resourcequotas: "), error
            retried.append((q.namespace, attempts))
            proxy.set_enabled(True)

        report = asyncio.run(_delete(proxied, listed, qps=50.0, concurrency=1, on_retry=on_retry))
    assert retried == [(listed[0].namespace, 1)]
    assert (sorted(report.deleted), report.failed, report.retries) == (sorted(names), {}, 1)
    assert asyncio.run(_list(cp.kubeconfig)) == []
    api.close()


def test_a_refused_delete_stops_the_cleanup(
    private_cp: LocalControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A principal that may list managed quotas but not delete them: the check before any
    delete ends the command (exit 2, one line naming RBAC), nothing is deleted."""
    cp = private_cp
    api = kubernetes.config.new_client_from_config(config_file=cp.kubeconfig)
    core = kubernetes.client.CoreV1Api(api)
    rbac = kubernetes.client.RbacAuthorizationV1Api(api)
    names = managed_namespaces(core, "dq-403", 3)
    sa = f"list-only-{uuid.uuid4().hex[:4]}"
    core.create_namespaced_service_account("default", {"metadata": {"name": sa}})
    rbac.create_cluster_role(
        {"metadata": {"name": sa},
         "rules": [{"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["list"]}]}
    )  # fmt: skip
    rbac.create_cluster_role_binding(
        {"metadata": {"name": sa},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": sa},
         "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": "default"}]}
    )  # fmt: skip
    token = core.create_namespaced_service_account_token(
        sa, "default", {"spec": {"expirationSeconds": 3600}}
    ).status.token
    path = _kubeconfig_via(cp, cp.server, token, tmp_path / "list-only")
    user = f"system:serviceaccount:default:{sa}"
    wait_until(
        lambda: cp.kubectl("auth", "can-i", "list", "resourcequotas", "-A", f"--as={user}")
        .strip() == "yes",
        "the list-only ClusterRole in effect",
    )  # fmt: skip
    capsys.readouterr()
    listed = len(asyncio.run(_list(cp.kubeconfig)))  # earlier tests' leftovers count too
    with pytest.raises(SystemExit) as exc:
        main(["cleanup", "--yes", "--concurrency", "1", "--kubeconfig", path])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"dynquota: error: nothing was deleted: checking the delete of {listed} managed quotas: "
        "insufficient RBAC permissions (403): "
        f'resourcequotas "dynquota" is forbidden: User "{user}" cannot delete resource '
        '"resourcequotas" in API group "" in the namespace '
    ), err
    assert {q.namespace for q in asyncio.run(_list(cp.kubeconfig))} >= set(names)
    for ns in names:
        core.delete_namespaced_resource_quota("dynquota", ns)
    api.close()


# -- all or nothing with the chart's admission policies in force (issue #22) --------------------


def _apply_chart_policies(cp: LocalControlPlane) -> None:
    """The chart's managed- and unmanaged-quota policies (release ``dynquota`` in
    ``dynquota-system``), as ``helm install`` renders them."""
    assert cp.bin_dir is not None
    chart = Path(__file__).resolve().parents[2] / "helm" / "dynquota"
    rendered = subprocess.run(
        [str(cp.bin_dir / "helm"), "template", "dynquota", str(chart), "--namespace",
         "dynquota-system", "--show-only", "templates/admission-policy.yaml"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    cp.kubectl("apply", "-f", "-", input=rendered)


def test_cleanup_is_all_or_nothing_and_a_cluster_admin_may_clean_up(
    private_cp: LocalControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the chart's managed-quota policy in force: a principal whose RBAC allows every
    delete (name-scoped) but who holds an unscoped delete in one namespace only is refused by
    the policy in the others; `cleanup --yes` checks every delete first (dry run), names the
    policy (not RBAC) in one line, and deletes nothing, not even where it was allowed. A cluster
    admin then removes every managed quota (v0.2: the first delete refused after the budget
    bindings were gone, reported as RBAC)."""
    cp = private_cp
    _apply_chart_policies(cp)
    api = kubernetes.config.new_client_from_config(config_file=cp.kubeconfig)
    core = kubernetes.client.CoreV1Api(api)
    rbac = kubernetes.client.RbacAuthorizationV1Api(api)
    names = managed_namespaces(core, "dq-aon", 3)
    sa = f"scoped-{uuid.uuid4().hex[:4]}"
    core.create_namespaced_service_account("default", {"metadata": {"name": sa}})
    subject = [{"kind": "ServiceAccount", "name": sa, "namespace": "default"}]
    rbac.create_cluster_role(
        {"metadata": {"name": sa},
         "rules": [{"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["list"]},
                   {"apiGroups": [""], "resources": ["resourcequotas"],
                    "resourceNames": ["dynquota"], "verbs": ["delete"]}]}
    )  # fmt: skip
    rbac.create_cluster_role_binding(
        {"metadata": {"name": sa}, "subjects": subject,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": sa}}
    )  # fmt: skip
    rbac.create_namespaced_role(
        names[0], {"metadata": {"name": sa}, "rules": [
            {"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["delete"]}]}
    )  # fmt: skip
    rbac.create_namespaced_role_binding(
        names[0], {"metadata": {"name": sa}, "subjects": subject,
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa}}
    )  # fmt: skip
    token = core.create_namespaced_service_account_token(
        sa, "default", {"spec": {"expirationSeconds": 3600}}
    ).status.token
    path = _kubeconfig_via(cp, cp.server, token, tmp_path / "scoped")
    user = f"system:serviceaccount:default:{sa}"
    wait_until(
        lambda: cp.kubectl("auth", "can-i", "delete", "resourcequotas", "-n", names[0],
                           f"--as={user}").strip() == "yes",
        "the namespace Role in effect",
    )  # fmt: skip
    scoped = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(path))

    def refused_by_the_policy() -> bool:
        try:
            scoped.delete_namespaced_resource_quota(
                "dynquota", names[1], body={"dryRun": ["All"]}, _request_timeout=10
            )
        except ApiException as exc:
            return exc.status == 403 and "ValidatingAdmissionPolicy" in str(exc.body)
        return False

    # the apiserver applies a new policy through its own informers, a moment later
    wait_until(refused_by_the_policy, "the managed-quota policy in force")
    before = {q.namespace: q.uid for q in asyncio.run(_list(cp.kubeconfig))}
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["cleanup", "--yes", "--kubeconfig", path])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    prefix = (
        f"dynquota: error: nothing was deleted: checking the delete of {len(before)} managed "
        "quotas: refused by an admission policy, not RBAC (403): "
    )
    assert err.startswith(prefix), err
    assert "ValidatingAdmissionPolicy 'dynquota-managed-quota'" in err
    assert {q.namespace: q.uid for q in asyncio.run(_list(cp.kubeconfig))} == before
    # a cluster admin: every managed quota removed, the unmanaged ones left
    core.create_namespaced_resource_quota(names[1], quota("team", "1"))
    assert main(["cleanup", "--yes", "--kubeconfig", cp.kubeconfig]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == (
        f"deleted {len(before)} managed quotas (0 already gone, 0 replaced meanwhile and left "
        "alone)"
    )
    assert asyncio.run(_list(cp.kubeconfig)) == []
    assert set(quotas_in(core, names[1])) == {"team"}
    api.close()
