"""Simulated Nodes of the local control plane: kube-scheduler and kwok.

With ``LocalControlPlane(nodes=N)`` the cluster behaves like one with kubelets: kube-scheduler
binds pods, kwok (``sigs.k8s.io/kwok``) keeps the Nodes Ready with Lease heartbeats and drives
pod lifecycles without a container runtime. :class:`SimulatedNodes` is the part of
:class:`~dynquota.testing.controlplane.LocalControlPlane` that starts them and adds, lists and
loses Nodes; the control plane provides the processes, ``kubectl`` and the waits.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import yaml

from dynquota.testing import processes
from dynquota.testing.components import (
    NODE_PREFIX,
    ControlPlaneError,
    find_kwok,
    kwok_args,
    kwok_nodes,
    kwok_rbac,
)

__all__ = ["SimulatedNodes"]


class SimulatedNodes:
    """Nodes simulated by kwok (a base of ``LocalControlPlane``, which provides the
    attributes and methods declared here)."""

    workdir: Path | None
    kubeconfig: str
    node_pods: int
    node_lease_seconds: int
    client_qps: int | None
    kwok_dir: Path | None
    _procs: dict[str, subprocess.Popen[bytes]]

    def kubectl(self, *args: str, input: str | None = None) -> str:
        """Run kubectl as admin (provided by ``LocalControlPlane``)."""
        raise NotImplementedError

    def component_kubeconfig(self, name: str) -> str:
        """The kubeconfig of component ``name`` (provided by ``LocalControlPlane``)."""
        raise NotImplementedError

    def _spawn(self, name: str, args: list[str], binary: Path | None = None) -> None:
        raise NotImplementedError

    def _wait(
        self, name: str, check: Callable[[], bool], what: str, timeout: float | None = None
    ) -> None:
        raise NotImplementedError

    def add_nodes(
        self, count: int, losable: bool = False, timeout: float | None = None
    ) -> list[str]:
        """Create ``count`` more kwok-managed Nodes and wait until each is ``Ready``.

        Names continue ``kwok-node-<i>`` after the existing ones. Returns the new names.
        ``losable``: each node gets its own kwok process (``--manage-single-node``) instead
        of the shared one, so :meth:`lose_node` can silence it.

        Raises:
            ControlPlaneError: kwok is not running (``nodes=0``) or a node was not Ready
                within ``timeout`` seconds (default ``ready_timeout``).
        """
        if "kwok" not in self._procs:
            raise ControlPlaneError("add_nodes needs kwok: start with nodes=N (N > 0)")
        existing = self.node_names()
        first = 1 + max((int(n.removeprefix(NODE_PREFIX)) for n in existing), default=-1)
        names = [f"{NODE_PREFIX}{i}" for i in range(first, first + count)]
        nodes = kwok_nodes(names, self.node_pods, losable)
        self.kubectl("create", "-f", "-", input=json.dumps(nodes))
        if losable:
            for name in names:
                self._start_kwok(f"--manage-single-node={name}", proc=f"kwok-{name}")
        want = set(names)
        self._wait(
            "kwok",
            lambda: want <= self.ready_nodes(),
            f"nodes {names[0]}..{names[-1]} not Ready",
            timeout,
        )
        return names

    def node_names(self) -> list[str]:
        """Names of the kwok Nodes that exist (managed or lost), in creation order."""
        out = self.kubectl("get", "nodes", "-l", "type=kwok", "-o", "name")
        names = [line.removeprefix("node/") for line in out.split()]
        return sorted(names, key=lambda n: int(n.removeprefix(NODE_PREFIX)))

    def ready_nodes(self) -> set[str]:
        """Names of the Nodes whose ``Ready`` condition is ``True`` now."""
        nodes = json.loads(self.kubectl("get", "nodes", "-o", "json"))["items"]
        return {
            n["metadata"]["name"]
            for n in nodes
            for c in (n.get("status") or {}).get("conditions") or []
            if c["type"] == "Ready" and c["status"] == "True"
        }

    def lose_node(self, name: str) -> None:
        """Make a node added with ``losable=True`` fall silent, as when its kubelet dies: its
        kwok process is killed, so its Lease is no longer renewed and its pods never change.

        (Taking a node out of the shared kwok's annotation selector is not enough: kwok
        v0.8.0 keeps renewing the Lease of a node until the Node is deleted.) NotReady alone
        terminates nothing: after ``node_monitor_grace_period`` the node-lifecycle
        controller marks it ``Unknown`` and taints it ``node.kubernetes.io/unreachable``
        (NoExecute); the taint-eviction controller deletes its pods after their
        ``tolerationSeconds`` (300 s by default), and with nobody to confirm, they stay
        Terminating.

        Raises:
            ControlPlaneError: ``name`` was not added with ``losable=True``.
        """
        proc = self._procs.pop(f"kwok-{name}", None)
        if proc is None:
            raise ControlPlaneError(f"{name} has no kwok of its own: add it with losable=True")
        proc.kill()
        proc.wait(timeout=10)

    def _start_scheduler(self) -> None:
        assert self.workdir is not None
        port = processes.free_port()
        config = self.workdir / "kube-scheduler.yaml"
        connection: dict[str, object] = {"kubeconfig": self.component_kubeconfig("kube-scheduler")}
        if self.client_qps is not None:
            connection |= {"qps": self.client_qps, "burst": 2 * self.client_qps}
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": connection,
                    "leaderElection": {"leaderElect": False},
                }
            )
        )
        self._spawn(
            "kube-scheduler",
            [f"--config={config}", "--bind-address=127.0.0.1", f"--secure-port={port}"],
        )
        self._wait(
            "kube-scheduler",
            lambda: processes.http_ok(f"https://127.0.0.1:{port}/healthz", verify=False),
            "/healthz not ok",
        )

    def _start_kwok(self, manage: str = "", proc: str = "kwok") -> None:
        if self.kwok_dir is None:
            self.kwok_dir = find_kwok()
        kubeconfig = self.component_kubeconfig("kwok")
        if kubeconfig != self.kubeconfig:  # its own identity, kwok's own RBAC
            self.kubectl("apply", "-f", "-", input=json.dumps(kwok_rbac()))
        args = kwok_args(
            kubeconfig, self.kwok_dir, manage, self.node_lease_seconds, processes.free_port()
        )
        self._spawn(proc, args, binary=self.kwok_dir / "kwok")
