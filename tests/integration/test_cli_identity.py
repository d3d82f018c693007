"""The CLI acts as the kubeconfig's identity (its user's ``as``/``as-groups``/``as-uid``/
``as-user-extra``, or ``--as``, ``--as-group``, ``--context``) and is refused exactly where the
test bed's kubectl is, on the real apiserver; as a kubectl plugin too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from cli_run import run_cli  # same directory
from kubernetes_asyncio import client as async_client

from dynquota.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from dynquota.testing.operator import OperatorCluster


def kubectl(op_cluster: OperatorCluster, kubeconfig: str, *args: str) -> tuple[int, str]:
    """kubectl (the test bed's build) with ``kubeconfig``: exit code and stderr."""
    assert op_cluster.cp.bin_dir is not None
    done = subprocess.run(
        [str(op_cluster.cp.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig}", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return done.returncode, done.stderr


@pytest.fixture
def tenants(op_cluster: OperatorCluster, scope: dict[str, str]) -> tuple[str, str]:
    """Two namespaces with a managed quota each; user alice (and group team-a-admins, and
    members of both g1 and g2) may get and patch quotas in the first only."""
    rbac: Any = kubernetes.client.RbacAuthorizationV1Api(op_cluster.api)
    a, b = op_cluster.new_namespace(scope), op_cluster.new_namespace(scope)
    for ns in (a, b):
        op_cluster.core.create_namespaced_resource_quota(
            ns,
            {
                "metadata": {"name": "dynquota", "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}},
                "spec": {"hard": {"pods": "10"}},
            },
        )
    role = f"quota-patcher-{uuid.uuid4().hex[:6]}"
    rbac.create_namespaced_role(
        a,
        {
            "metadata": {"name": role},
            "rules": [
                {"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["get", "patch"]}
            ],
        },
    )
    subjects: list[dict[str, str]] = [
        {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"},
        {"kind": "Group", "name": "team-a-admins", "apiGroup": "rbac.authorization.k8s.io"},
    ]
    rbac.create_namespaced_role_binding(
        a,
        {
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": subjects,
        },
    )
    return a, b


def _kubeconfig(op_cluster: OperatorCluster, tmp_path: Path, **user: Any) -> str:
    """The admin kubeconfig with context ``as-alice`` (current; its user has ``user``'s
    fields: ``as``, ``as-groups``) and the admin's own context ``admin``."""
    config = yaml.safe_load(Path(op_cluster.cp.kubeconfig).read_text())
    (context,) = config["contexts"]
    (admin,) = config["users"]
    config["users"].append({"name": "impersonating", "user": {**admin["user"], **user}})
    config["contexts"] = [
        {**context, "name": "admin"},
        {"name": "as-alice", "context": {**context["context"], "user": "impersonating"}},
    ]
    config["current-context"] = "as-alice"
    path = tmp_path / f"kubeconfig-{uuid.uuid4().hex[:6]}"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _forbidden(stderr: str) -> str:
    """kubectl's refusal without its prefix: the apiserver's message."""
    prefix = "Error from server (Forbidden): "
    assert stderr.startswith(prefix), stderr
    return stderr.removeprefix(prefix).strip()


async def test_the_apiserver_sees_the_kubeconfig_users_impersonation(
    op_cluster: OperatorCluster, tmp_path: Path
) -> None:
    """What the apiserver authenticated, as a SelfSubjectReview reports it: the user, every
    group (two headers), the uid and the extra values (an escaped key)."""
    from dynquota._k8s.request import call_api
    from dynquota.kube.client import new_api_client

    fields = {
        "as": "alice",
        "as-uid": "uid-7",
        "as-groups": ["devs", "team-a-admins"],
        "as-user-extra": {"reason": ["on call", "ticket 7"], "example.org/scope": ["s"]},
    }
    path = _kubeconfig(op_cluster, tmp_path, **fields)
    async with await new_api_client(path) as api:
        auth: Any = async_client.AuthenticationV1Api(api)
        review = await call_api(
            "create",
            "selfsubjectreviews",
            lambda t: auth.create_self_subject_review(
                {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
                _request_timeout=t,
            ),
        )
    user = review.status.user_info
    assert (user.username, user.uid) == ("alice", "uid-7")
    assert user.groups == ["devs", "team-a-admins", "system:authenticated"]
    assert user.extra == {"reason": ["on call", "ticket 7"], "example.org/scope": ["s"]}
    # --context admin: the admin itself
    async with await new_api_client(path, "admin") as api:
        auth = async_client.AuthenticationV1Api(api)
        review = await call_api(
            "create",
            "selfsubjectreviews",
            lambda t: auth.create_self_subject_review(
                {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
                _request_timeout=t,
            ),
        )
    assert review.status.user_info.username != "alice"


def test_override_and_kill_switch_are_refused_where_kubectl_is(
    op_cluster: OperatorCluster,
    tenants: tuple[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = tenants
    as_alice = _kubeconfig(op_cluster, tmp_path, **{"as": "alice"})
    patch = ["patch", "resourcequota", "dynquota", "--type=merge", "-p", '{"metadata":{}}']
    # kubectl as alice (the kubeconfig's `as`): allowed in a, refused in b and on kube-system
    assert kubectl(op_cluster, as_alice, "-n", a, *patch) == (0, "")
    code, err = kubectl(op_cluster, as_alice, "-n", b, "get", "resourcequota", "dynquota")
    assert code == 1
    refused_b = _forbidden(err)
    assert refused_b == (
        f'resourcequotas "dynquota" is forbidden: User "alice" cannot get resource '
        f'"resourcequotas" in API group "" in the namespace "{b}"'
    )
    code, err = kubectl(
        op_cluster, as_alice, "patch", "namespace", "kube-system", "--type=merge", "-p", "{}"
    )
    assert code == 1
    refused_ks = _forbidden(err)
    # kubectl patch reads the object first: refused at its GET
    assert refused_ks == (
        'namespaces "kube-system" is forbidden: User "alice" cannot get resource "namespaces" '
        'in API group "" in the namespace "kube-system"'
    )
    # the CLI, through the same kubeconfig: the same answers
    code, out, err = run_cli(["override", a, "--kubeconfig", as_alice], capsys)
    assert (code, err) == (0, "")
    assert out.startswith(f"override requested in {a}:")
    assert op_cluster.quota(a).metadata.annotations["dynquota.io/override"] == "max"
    assert run_cli(["override", b, "--kubeconfig", as_alice], capsys) == (
        2,
        "",
        f"dynquota: error: reading quota in {b}: insufficient RBAC permissions (403): "
        f"{refused_b}\n",
    )
    code, out, err = run_cli(["kill-switch", "on", "--kubeconfig", as_alice], capsys)
    assert (code, out) == (2, "")
    assert err == (
        "dynquota: error: annotating namespace kube-system: insufficient RBAC permissions "
        f"(403): {refused_ks.replace('cannot get', 'cannot patch')}\n"
    )
    assert "dynquota.io/kill-switch" not in (
        op_cluster.core.read_namespace("kube-system").metadata.annotations or {}
    )
    # --context admin: the admin's own user, no impersonation: allowed
    code, out, err = run_cli(
        ["kill-switch", "status", "--kubeconfig", as_alice, "--context", "admin", "-o", "json"],
        capsys,
    )
    assert (code, err) == (0, "")
    assert json.loads(out)["state"] == "released"
    # the flags on the admin's kubeconfig: refused the same way, before or after the command
    admin = op_cluster.cp.kubeconfig
    for argv in (
        ["override", b, "--kubeconfig", admin, "--as", "alice"],
        ["--as", "alice", "--kubeconfig", admin, "override", b],
    ):
        assert run_cli(argv, capsys)[0] == 2, argv


def test_groups_are_each_sent_and_refused_like_kubectl(
    op_cluster: OperatorCluster,
    tenants: tuple[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = tenants
    admin = op_cluster.cp.kubeconfig
    get = ["-n", a, "get", "resourcequota", "dynquota"]
    # bob is allowed only through the group team-a-admins, given second
    groups = ["--as-group", "devs", "--as-group", "team-a-admins"]
    assert kubectl(op_cluster, admin, "--as", "bob", *groups, *get)[0] == 0
    assert kubectl(op_cluster, admin, "--as", "bob", "--as-group", "devs", *get)[0] == 1
    code, _, err = run_cli(["override", a, "--kubeconfig", admin, "--as", "bob", *groups], capsys)
    assert (code, err) == (0, "")
    code, _, err = run_cli(
        ["override", a, "--kubeconfig", admin, "--as", "bob", "--as-group", "devs"], capsys
    )
    assert code == 2
    assert err.startswith(f"dynquota: error: reading quota in {a}: insufficient RBAC ")
    # the same groups from the kubeconfig user's as-groups
    as_bob = _kubeconfig(
        op_cluster, tmp_path, **{"as": "bob", "as-groups": ["devs", "team-a-admins"]}
    )
    assert kubectl(op_cluster, as_bob, *get)[0] == 0
    assert run_cli(["override", a, "--kubeconfig", as_bob, "--off"], capsys)[0] == 0
    assert run_cli(["override", b, "--kubeconfig", as_bob], capsys)[0] == 2
    # groups without a user: kubectl refuses before sending, and so does the CLI
    code, err = kubectl(op_cluster, admin, "--as-group", "devs", *get)
    assert code == 1
    code, out, err = run_cli(["override", a, "--kubeconfig", admin, "--as-group", "devs"], capsys)
    assert (code, out) == (2, "")
    assert err == (
        "dynquota: error: connecting: impersonating groups needs a user to impersonate (--as, "
        "or `as` in the kubeconfig user)\n"
    )


def test_the_kubectl_plugin_parses_the_identity_flags_itself_and_completes(
    op_cluster: OperatorCluster,
    tenants: tuple[str, str],
    tmp_path: Path,
) -> None:
    """Through kubectl itself (the test bed's build, the plugin found on ``$PATH``)."""
    a, b = tenants
    assert op_cluster.cp.bin_dir is not None
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    def run(*args: str) -> tuple[int, str, str]:
        assert op_cluster.cp.bin_dir is not None
        done = subprocess.run(
            [str(op_cluster.cp.bin_dir / "kubectl"), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
            env=env,
        )
        return done.returncode, done.stdout, done.stderr

    admin = op_cluster.cp.kubeconfig
    # kubectl refuses its global flags before a plugin's name; after it, the plugin reads them
    code, _, err = run("--as", "alice", "dynquota", "override", b)
    assert (code, err) == (1, "Error: flags cannot be placed before plugin name: --as\n")
    code, out, err = run("dynquota", "--kubeconfig", admin, "--as", "alice", "override", b)
    assert (code, out) == (2, "")
    assert err.startswith(f"dynquota: error: reading quota in {b}: insufficient RBAC ")
    code, out, err = run("dynquota", "override", a, "--kubeconfig", admin, "--as", "alice")
    assert (code, err) == (0, "")
    # kubectl's plugin completion runs kubectl_complete-dynquota
    code, out, _ = run("__complete", "dynquota", "kill-switch", "s")
    assert (code, out) == (0, "status\n:4\n")
