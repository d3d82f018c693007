"""The ``dynquota`` command line against a real control plane, and two operator processes
with leader election (``dynquota run``: the leader killed with SIGKILL, then a rolling
handover on SIGTERM)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from cli_run import run_cli  # same directory

from dynquota.testing.operator import OPERATOR_NS, OperatorCluster, OperatorThread
from dynquota.testing.wait import wait_until

StartOperator = Callable[..., OperatorThread]
PROFILE = {
    "bufferPercent": 40,
    "minimum": 10,
    "maximum": 100,
    "upscaleCooldown": "2s",
    "downscaleCooldown": "1h",
}
CONFIGMAPS = {**PROFILE, "minimum": 20, "maximum": 200}


def test_plan_override_and_kill_switch_commands(
    op_cluster: OperatorCluster,
    scope: dict[str, str],
    start_operator: StartOperator,
    capsys: pytest.CaptureFixture[str],
) -> None:
    admin = op_cluster.cp.kubeconfig
    ns = op_cluster.new_namespace(scope)
    op_cluster.create_pods(ns, 14)
    op_cluster.policy("p-cli", scope, pods=PROFILE, configmaps=CONFIGMAPS)
    # before the operator runs, plan says what it will do
    code, out, _ = run_cli(["plan", "--kubeconfig", admin, "-n", ns], capsys)
    assert code == 0
    # no chart Deployment here: plan says it uses the local environment, then the table
    lines = out.splitlines()
    assert lines[0].startswith("settings: no dynquota release found")
    lines = lines[lines.index("") + 1 :]
    assert lines[0].split() == [
        "NAMESPACE", "RESOURCE", "TALLY", "STATUS.USED", "HARD", "TARGET", "NEXT", "WHY"
    ]  # fmt: skip
    assert lines[1].split()[:7] == [ns, "pods", "14", "-", "-", "20", "create"]
    assert lines[1].endswith("create pods 20: usage 14, buffer 40%")
    start_operator()
    op_cluster.wait_hard(ns, {"pods": "20", "configmaps": "20"})
    wait_until(lambda: (op_cluster.quota(ns).status.used or {}).get("pods") == "14", "status.used")
    code, out, _ = run_cli(["plan", "--kubeconfig", admin, "-n", ns], capsys)
    lines = out.splitlines()
    assert lines[lines.index("") + 2].split()[:7] == [ns, "pods", "14", "14", "20", "20", "nothing"]
    # a namespace that does not exist: the others are shown, the missing one is an error
    code, out, err = run_cli(["plan", "--kubeconfig", admin, "-n", ns, "-n", "no-such"], capsys)
    assert code == 1
    assert err == 'dynquota plan: namespace "no-such" not found\n'
    assert f"{ns}  " in out

    code, out, _ = run_cli(["override", ns, "--kubeconfig", admin], capsys)
    assert code == 0
    assert out.strip() == (
        f"override requested in {ns}: every tracked resource to its maximum for the configured "
        f"TTL; the grant (or why not) is an Event: kubectl -n {ns} get events "
        "--field-selector involvedObject.name=dynquota"
    )
    op_cluster.wait_hard(ns, {"pods": "100", "configmaps": "200"})
    code, out, _ = run_cli(["override", ns, "--off", "--kubeconfig", admin], capsys)
    assert code == 0
    op_cluster.wait_hard(ns, {"pods": "20", "configmaps": "20"})

    code, out, _ = run_cli(["kill-switch", "on", "--kubeconfig", admin], capsys)
    assert code == 0
    wait_until(lambda: op_cluster.quota(ns) is None, "quota deleted by the kill switch")
    # the count is cluster-wide: a quota in a namespace an earlier test deleted goes with it
    # (the namespace terminates a moment later; its quota was never this operator's to sweep)
    engaged = [
        "kill switch: ENGAGED (dynquota.io/kill-switch='true' on kube-system)",
        "managed quotas in the cluster: 0",
    ]
    wait_until(
        lambda: (
            run_cli(["kill-switch", "status", "--kubeconfig", admin], capsys)[1].splitlines()
            == engaged
        ),
        "kill-switch status: engaged, no managed quota in the cluster",
        timeout=60,
    )
    code, out, err = run_cli(["override", ns, "--kubeconfig", admin], capsys)
    assert code == 2
    assert f"namespace {ns} has no managed quota dynquota" in err
    code, out, _ = run_cli(["kill-switch", "off", "--kubeconfig", admin], capsys)
    assert code == 0
    op_cluster.wait_hard(ns, {"pods": "20", "configmaps": "20"})


def test_cli_reports_insufficient_rbac(
    op_cluster: OperatorCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    core = op_cluster.core
    if not any(
        sa.metadata.name == "nobody"
        for sa in core.list_namespaced_service_account(OPERATOR_NS).items
    ):
        core.create_namespaced_service_account(OPERATOR_NS, {"metadata": {"name": "nobody"}})
    token = core.create_namespaced_service_account_token(
        "nobody", OPERATOR_NS, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    config = yaml.safe_load(Path(op_cluster.sa_kubeconfig).read_text())
    config["users"][0]["user"]["token"] = token
    path = tmp_path / "nobody.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    code, _, err = run_cli(["kill-switch", "status", "--kubeconfig", str(path)], capsys)
    assert code == 2
    assert err.startswith(
        "dynquota: error: reading namespace kube-system: insufficient RBAC permissions (403): "
    )
    assert "system:serviceaccount:dynquota-system:nobody" in err
    code, _, err = run_cli(["plan", "--kubeconfig", str(path)], capsys)
    assert code == 2
    assert "insufficient RBAC permissions (403)" in err


# -- two replicas -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


LEASE_SECONDS = 13


class Replica:
    """``python -m dynquota.cli run`` as a child process with its own metrics port."""

    def __init__(self, name: str, kubeconfig: str, log: Path, env: dict[str, str]) -> None:
        self.name = name
        self.env = env
        self.metrics_port = _free_port()
        self.probe_port = _free_port()
        self.log = log
        self._out = log.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "dynquota.cli", "run",
                "--kubeconfig", kubeconfig,
                "--leader-election",
                "--namespace", OPERATOR_NS,
                "--pod-name", name,
                "--metrics-port", str(self.metrics_port),
                "--probe-port", str(self.probe_port),
                "--resync-seconds", "5",
                "--watch-timeout-seconds", "30",
            ],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=env,
        )  # fmt: skip

    def metric(self, name: str, labels: str = "") -> float | None:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2
            ) as answer:
                text = answer.read().decode()
        except OSError:
            return None
        total = 0.0
        found = False
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            series, value = line.rsplit(" ", 1)
            if series.split("{", 1)[0] == name and labels in series:
                total += float(value)
                found = True
        return total if found else None

    def writes(self) -> float:
        return self.metric("dynquota_quota_writes_total") or 0.0

    def healthz(self) -> int:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.probe_port}/healthz", timeout=5
            ) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return 0

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._out.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._out.close()


@pytest.fixture
def replicas(op_cluster: OperatorCluster, tmp_path: Path) -> Iterator[list[Replica]]:
    env = dict(os.environ)
    env.update(
        {
            "PYTHONUNBUFFERED": "1",
            # the shortest lease the operator accepts with a 1 s retry period: longer than a
            # 10 s write + the retry period + 1 s, and >= renew deadline + retry + 3 s
            "DYNQUOTA_LEASE_DURATION_SECONDS": str(LEASE_SECONDS),
            "DYNQUOTA_LEASE_RENEW_DEADLINE_SECONDS": "8",
            "DYNQUOTA_LEASE_RETRY_PERIOD_SECONDS": "1",
        }
    )
    started = [
        Replica(name, op_cluster.sa_kubeconfig, tmp_path / f"{name}.log", env)
        for name in ("replica-a", "replica-b")
    ]
    yield started
    for replica in started:
        replica.stop()
    for replica in started:
        print(f"==> {replica.log} <==\n" + replica.log.read_text(errors="replace")[-3000:])


def test_two_replicas_one_writes_and_the_other_takes_over(
    op_cluster: OperatorCluster, scope: dict[str, str], replicas: list[Replica]
) -> None:
    a, b = replicas
    op_cluster.policy("p-leader", scope, pods=PROFILE, configmaps=CONFIGMAPS)
    wait_until(
        lambda: a.metric("dynquota_leader") is not None and b.metric("dynquota_leader") is not None,
        "both replicas serve /metrics",
        timeout=60,
    )
    leader_name = wait_until(lambda: _lease_holder(op_cluster), "a Lease holder", timeout=30)
    leader, follower = (a, b) if leader_name == a.name else (b, a)
    wait_until(lambda: leader.metric("dynquota_leader") == 1, "leader metric 1")
    assert follower.metric("dynquota_leader") == 0
    assert leader.healthz() == 200
    # liveness is false until a replica's informers have synced (the startup probe covers
    # that): under load the follower may still be listing here
    wait_until(lambda: follower.healthz() == 200, "the follower's informers synced", timeout=60)
    standby = 'result="standby"'
    decided = follower.metric("dynquota_reconciles_total", standby) or 0.0
    first = op_cluster.new_namespace(scope)
    op_cluster.wait_hard(first, {"pods": "10", "configmaps": "20"})
    # the follower decided too (the new namespace reached it) and was gated: it wrote nothing
    wait_until(
        lambda: (follower.metric("dynquota_reconciles_total", standby) or 0.0) > decided,
        "a standby decision on the follower",
        timeout=30,
    )
    assert leader.writes() >= 1
    assert follower.writes() == 0
    assert follower.metric("dynquota_events_total") is None  # nothing posted

    leader.kill()
    killed = time.monotonic()
    wait_until(lambda: _lease_holder(op_cluster) == follower.name, "takeover", timeout=30)
    took = time.monotonic() - killed
    # lease duration + the follower's observation lag and poll (two retry periods), plus 3 s
    # for two Python processes on a loaded 2-core machine
    assert took <= LEASE_SECONDS + 2 * 1 + 3, took
    wait_until(lambda: follower.metric("dynquota_leader") == 1, "follower leads")
    second = op_cluster.new_namespace(scope)
    op_cluster.wait_hard(second, {"pods": "10", "configmaps": "20"})
    assert follower.writes() >= 1

    # A rolling update (the chart's strategy with leader election): the new pod starts beside
    # the leader and stands by; once it is ready the old one gets SIGTERM and releases the
    # Lease, so the new one takes over at its next retry, not a lease duration later.
    new = Replica(
        "replica-new", op_cluster.sa_kubeconfig, leader.log.with_name("replica-new.log"), leader.env
    )
    replicas.append(new)  # stopped by the fixture
    wait_until(lambda: new.healthz() == 200, "the new replica ready (standby)", timeout=60)
    assert new.metric("dynquota_leader") == 0
    assert _lease_holder(op_cluster) == follower.name
    follower.proc.send_signal(signal.SIGTERM)
    terminated = time.monotonic()
    wait_until(lambda: _lease_holder(op_cluster) == new.name, "handover on SIGTERM", timeout=30)
    took = time.monotonic() - terminated
    print(f"\nrolling handover: SIGTERM to the new holder {took:.1f} s")
    # Without the release the new replica would wait a whole lease duration.
    assert took < LEASE_SECONDS, took
    assert follower.proc.wait(20) == 0
    third = op_cluster.new_namespace(scope)
    op_cluster.wait_hard(third, {"pods": "10", "configmaps": "20"})
    assert new.writes() >= 1


def _lease_holder(op_cluster: OperatorCluster) -> str | None:
    coordination: Any = kubernetes.client.CoordinationV1Api(op_cluster.api)
    try:
        lease = coordination.read_namespaced_lease("dynquota", OPERATOR_NS)
    except kubernetes.client.exceptions.ApiException:
        return None
    holder: str | None = lease.spec.holder_identity
    return holder


def test_cleanup_stops_the_operator_and_deletes_managed_quotas_only(
    op_cluster: OperatorCluster,
    scope: dict[str, str],
    start_operator: StartOperator,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    admin = op_cluster.cp.kubeconfig
    a, b = op_cluster.new_namespace(scope), op_cluster.new_namespace(scope)
    op_cluster.policy("p-cleanup", scope, pods=PROFILE, configmaps=CONFIGMAPS)
    op = start_operator()
    op_cluster.wait_hard(a, {"pods": "10", "configmaps": "20"})
    op_cluster.wait_hard(b, {"pods": "10", "configmaps": "20"})
    op.stop()
    foreign = op_cluster.new_namespace(scope)
    op_cluster.core.create_namespaced_resource_quota(
        foreign, {"metadata": {"name": "dynquota"}, "spec": {"hard": {"pods": "1"}}}
    )
    op_cluster.core.create_namespaced_resource_quota(
        a,
        {
            "metadata": {"name": "team", "labels": {"app.kubernetes.io/managed-by": "dynquota"}},
            "spec": {"hard": {"pods": "1"}},
        },
    )
    # a stand-in for the operator's Deployment (its pods stay Pending: no kubelet)
    labels = {"app": "fake-operator"}
    op_cluster.apps.create_namespaced_deployment(
        OPERATOR_NS,
        {
            "metadata": {"name": "fake-operator"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
                },
            },
        },
    )
    # a pod with the same labels but not the Deployment's (like the hook's own pod)
    op_cluster.core.create_namespaced_pod(
        OPERATOR_NS,
        {
            "metadata": {"name": "fake-hook", "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
        },
    )
    try:
        wait_until(
            lambda: (
                len(
                    op_cluster.core.list_namespaced_pod(
                        OPERATOR_NS, label_selector="app=fake-operator"
                    ).items
                )
                == 3
            ),
            "2 fake operator pods and the hook's",
        )
        monkeypatch.setenv("DYNQUOTA_NAMESPACE", OPERATOR_NS)
        code, out, _ = run_cli(["cleanup", "--kubeconfig", admin], capsys)
        assert code == 0
        assert f"would delete resourcequota {a}/dynquota" in out
        assert f"would delete resourcequota {b}/dynquota" in out
        assert foreign not in out
        assert op_cluster.quota(a) is not None
        code, out, err = run_cli(
            ["cleanup", "--yes", "--scale-down", "fake-operator", "--kubeconfig", admin], capsys
        )
        assert code == 0, err
        assert out.splitlines()[:2] == [
            f"scaled deployment {OPERATOR_NS}/fake-operator to 0; waiting for its pods",
            "operator pods gone (app=fake-operator)",
        ]
        assert out.splitlines()[-1].startswith("deleted ")
        assert op_cluster.quota(a) is None
        assert op_cluster.quota(b) is None
        assert op_cluster.quota(foreign) is not None
        assert op_cluster.quota(a, "team") is not None
    finally:
        op_cluster.apps.delete_namespaced_deployment("fake-operator", OPERATOR_NS)
        op_cluster.core.delete_namespaced_pod("fake-hook", OPERATOR_NS)
