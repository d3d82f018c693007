"""A real local Kubernetes control plane: etcd, kube-apiserver and kube-controller-manager,
and on request kube-scheduler with KWOK-simulated nodes.

Used by the integration tests, the benchmarks and ``dynquota demo``; never imported by the
operator. The binaries come from ``hack/controlplane/build.sh`` (built from Go modules, cached
outside the repository by version) or from ``$DYNQUOTA_CONTROLPLANE_ASSETS``; kwok and its
stages from ``hack/kwok/build.sh`` or ``$DYNQUOTA_KWOK_ASSETS``.

With ``nodes=N`` the cluster behaves like one with kubelets: kube-scheduler binds pods, kwok
(``sigs.k8s.io/kwok``) keeps N fake Nodes Ready with Lease heartbeats and drives pod lifecycles
without a container runtime (a bound pod becomes Running, a Job's pod Succeeded, a deleted pod
goes away), and the controller manager adds the job, ttl-after-finished, node-lifecycle and
taint-eviction controllers, so Jobs finish and a lost node's pods are evicted.

Everything listens on 127.0.0.1 on free ports. Authentication: static tokens (the admin's, in
group ``system:masters``; each component's own, non-exempt identity, see
:data:`~dynquota.testing.components.COMPONENT_USERS`) and ServiceAccount tokens;
authorization: ``Node,RBAC``; the default admission plugins stay on, so the ResourceQuota
admission plugin enforces quotas. Output: ``<workdir>/logs/<component>.log``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from dynquota.testing import processes
from dynquota.testing.audit import AUDIT_POLICY
from dynquota.testing.components import (
    ADMIN_USER,
    COMPONENT_USERS,
    ControlPlaneError,
    apiserver_args,
    audit_args,
    controller_manager_args,
    etcd_args,
    find_binaries,
)
from dynquota.testing.credentials import make_pki, token_auth_file, write_kubeconfig
from dynquota.testing.nodes import SimulatedNodes

__all__ = ["ControlPlaneError", "LocalControlPlane", "find_binaries", "main"]


@dataclass
class LocalControlPlane(SimulatedNodes):
    """etcd + kube-apiserver + kube-controller-manager on loopback, as separate processes.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. After start:
    ``kubeconfig`` is the path of an admin kubeconfig (static token in ``system:masters``),
    ``server`` the apiserver URL, ``etcd_url`` etcd's client URL, ``log_dir`` the component logs.

    Args:
        bin_dir: directory of the binaries (default: :func:`find_binaries`).
        workdir: where data, certificates and logs go (default: a new temporary directory,
            removed by :meth:`stop` unless ``keep_workdir``).
        resource_quota_sync_period: seconds between the quota controller's full resyncs.
        extra_apiserver_args: appended to kube-apiserver's command line.
        nodes: number of kwok-simulated Nodes (``kwok-node-0`` ...); 0 (the default, for
            fast tests) starts no scheduler, no kwok and no node controllers, so pods stay
            Pending.
        node_pods: allocatable ``pods`` of each simulated Node (cpu 32, memory 256Gi).
        node_monitor_grace_period: seconds without a Lease renewal before the node-lifecycle
            controller marks a Node ``Unknown`` and taints it (upstream default 50).
        node_lease_seconds: the Lease duration kwok renews each node's Lease for (it renews
            at a quarter of it, like the kubelet).
        client_qps: client-side QPS of the controller manager and the scheduler (burst twice
            that); None keeps their defaults (20 and 50).
        kwok_dir: directory of ``kwok`` and ``stages.yaml`` (default: :func:`find_kwok`).
        audit: write an audit log (:data:`AUDIT_POLICY`: Metadata level for writes of
            ResourceQuotas and Leases) to ``audit_log_path``; read it with :class:`AuditLog`.
        audit_policy: the audit policy to use instead of :data:`AUDIT_POLICY` (with
            ``audit``), e.g. :data:`QUOTA_AUDIT_POLICY`.
        component_identities: kube-controller-manager (each controller as its own
            ServiceAccount in kube-system), kube-scheduler and kwok act as their own users
            (:data:`COMPONENT_USERS`), classified by API Priority and Fairness as on a kubeadm
            cluster; False: all three as the admin (``system:masters``, exempt from APF).
    """

    bin_dir: Path | None = None
    workdir: Path | None = None
    resource_quota_sync_period: int = 10
    extra_apiserver_args: Sequence[str] = ()
    keep_workdir: bool = False
    ready_timeout: float = 120.0
    # -- nodes (scheduler + kwok) --
    nodes: int = 0
    node_pods: int = 110
    node_monitor_grace_period: int = 50
    node_lease_seconds: int = 40
    client_qps: int | None = None
    kwok_dir: Path | None = None
    audit: bool = False
    audit_policy: dict[str, object] | None = None
    component_identities: bool = True

    kubeconfig: str = field(init=False, default="")
    server: str = field(init=False, default="")
    etcd_url: str = field(init=False, default="")
    admin_token: str = field(init=False, default="")
    _procs: dict[str, subprocess.Popen[bytes]] = field(init=False, default_factory=dict)
    _component_tokens: dict[str, str] = field(init=False, default_factory=dict)
    _owns_workdir: bool = field(init=False, default=False)
    _apiserver_port: int = field(init=False, default=0)

    @property
    def log_dir(self) -> Path:
        """Directory of ``etcd.log``, ``kube-apiserver.log``, ``kube-controller-manager.log``."""
        assert self.workdir is not None
        return self.workdir / "logs"

    @property
    def audit_log_path(self) -> Path:
        """The apiserver's audit log (JSON lines; written only with ``audit=True``)."""
        assert self.workdir is not None
        return self.workdir / "logs" / "audit.log"

    @property
    def ca_file(self) -> Path:
        """PEM file of the CA that signed the apiserver's serving certificate."""
        assert self.workdir is not None
        return self.workdir / "pki" / "ca.crt"

    def __enter__(self) -> LocalControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Start all three components and wait until the apiserver answers ``/readyz``.

        Raises:
            ControlPlaneError: a component exited or did not become ready within
                ``ready_timeout`` seconds; the message includes the tail of its log.
        """
        if self.bin_dir is None:
            self.bin_dir = find_binaries()
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="dynquota-cp-"))
            self._owns_workdir = True
        for sub in ("pki", "logs", "etcd"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        try:
            self._write_pki()
            self._start_etcd()
            self._apiserver_port = processes.free_port()
            self.server = f"https://127.0.0.1:{self._apiserver_port}"
            self._write_kubeconfig()
            self.start_apiserver()
            self._start_controller_manager()
            if self.nodes:
                self._start_scheduler()
                self._start_kwok()
                self.add_nodes(self.nodes)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every component (SIGTERM, then SIGKILL after 10 s); idempotent."""
        self.resume_etcd()  # a frozen etcd would ignore SIGTERM
        kwoks = [name for name in self._procs if name.startswith("kwok")]
        for name in (*kwoks, "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            self._stop(name)
        if self._owns_workdir and not self.keep_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def start_apiserver(self) -> None:
        """Start kube-apiserver on its port and wait for ``/readyz``.

        Raises:
            ControlPlaneError: it exited or was not ready within ``ready_timeout`` seconds.
        """
        assert self.workdir is not None
        extra = [*self._audit_args(), *self.extra_apiserver_args]
        self._spawn(
            "kube-apiserver",
            apiserver_args(self.etcd_url, self._apiserver_port, self.workdir / "pki", extra),
        )
        self._wait_ready()

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver (SIGTERM, then SIGKILL after 10 s); etcd keeps running."""
        self._stop("kube-apiserver")

    def restart_apiserver(self) -> None:
        """Stop and start kube-apiserver on the same port; waits for ``/readyz``."""
        self.stop_apiserver()
        self.start_apiserver()

    def stop_controller_manager(self) -> None:
        """Stop kube-controller-manager (SIGTERM, then kill): no quota recount, no copy of
        ``spec.hard`` into ``status.hard`` until :meth:`start_controller_manager`."""
        self._stop("kube-controller-manager")

    def start_controller_manager(self) -> None:
        """Start kube-controller-manager again with its original flags; returns once ready."""
        self._start_controller_manager()

    def wait_controller_manager_working(self, timeout: float = 180.0) -> None:
        """Wait until a restarted controller manager makes ``default`` in a new namespace (a
        restart's check sees the first start's). Raises :class:`ControlPlaneError`."""
        probe = f"kcm-ready-{secrets.token_hex(3)}"
        self.kubectl("create", "namespace", probe)
        sa = f"/api/v1/namespaces/{probe}/serviceaccounts/default"
        try:
            self._wait("kube-controller-manager", lambda: self._api_get(sa), f"no {sa}", timeout)
        finally:
            self.kubectl("delete", "namespace", probe, "--wait=false")

    def pid(self, name: str) -> int:
        """The process id of component ``name`` (``kube-apiserver``, ``etcd``, ...)."""
        return self._procs[name].pid

    @property
    def apiserver_port(self) -> int:
        """The port kube-apiserver listens on (on 127.0.0.1); kept across restarts."""
        return self._apiserver_port

    # -- helpers for tests ---------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None) -> str:
        """Run kubectl with the admin kubeconfig and return its stdout.

        Raises:
            subprocess.CalledProcessError: kubectl exited non-zero (stderr attached).
        """
        assert self.bin_dir is not None
        done = subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout

    def etcd_revision(self) -> int:
        """Current etcd revision (the apiserver's resourceVersion space), via etcd's gateway."""
        answer = self._etcd_call("/v3/kv/range", {"key": base64.b64encode(b"\0").decode()})
        header = answer["header"]
        assert isinstance(header, dict)
        return int(header["revision"])

    def compact_etcd(self, revision: int | None = None) -> int:
        """Compact etcd at ``revision`` (default: the current one); returns the revision.

        Watches and lists from an older resourceVersion then fail with ``410 Gone`` once the
        apiserver's watch cache no longer holds it (restart the apiserver to drop the cache).
        """
        rev = self.etcd_revision() if revision is None else revision
        self._etcd_call("/v3/kv/compaction", {"revision": str(rev), "physical": True})
        return rev

    def pause_etcd(self) -> None:
        """Freeze etcd (SIGSTOP): the apiserver's storage requests hang, then time out or fail
        (5xx), as during an etcd outage; nothing is lost. Undo with :meth:`resume_etcd`."""
        proc = self._procs.get("etcd")
        if proc is None or proc.poll() is not None:
            raise ControlPlaneError("etcd is not running")
        proc.send_signal(signal.SIGSTOP)

    def resume_etcd(self) -> None:
        """Let a paused etcd run again (SIGCONT); a no-op if it runs."""
        proc = self._procs.get("etcd")
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)

    @contextlib.contextmanager
    def etcd_paused(self) -> Iterator[None]:
        """``with cp.etcd_paused():`` etcd is frozen inside the block, resumed after it
        (also when the block raises)."""
        self.pause_etcd()
        try:
            yield
        finally:
            self.resume_etcd()

    def log_tails(self, lines: int = 40) -> str:
        """The last ``lines`` lines of each component's log, for a failing test's report."""
        parts = []
        for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"):
            path = self.log_dir / f"{name}.log"
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"==> {path} <==\n" + "\n".join(tail))
        return "\n".join(parts)

    # -- internals -----------------------------------------------------------------------

    def _audit_args(self) -> list[str]:
        if not self.audit:
            return []
        assert self.workdir is not None
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(self.audit_policy or AUDIT_POLICY))
        return audit_args(policy, self.audit_log_path)

    def _write_pki(self) -> None:
        assert self.workdir is not None
        pki = make_pki()
        d = self.workdir / "pki"
        (d / "ca.crt").write_bytes(pki.ca_pem)
        (d / "apiserver.crt").write_bytes(pki.serving_cert_pem)
        (d / "apiserver.key").write_bytes(pki.serving_key_pem)
        (d / "sa.key").write_bytes(pki.sa_key_pem)
        (d / "sa.pub").write_bytes(pki.sa_pub_pem)
        self.admin_token = secrets.token_hex(24)
        users: list[tuple[str, str, tuple[str, ...]]] = [
            (self.admin_token, ADMIN_USER, ("system:masters",))
        ]
        if self.component_identities:
            self._component_tokens = {name: secrets.token_hex(24) for name in COMPONENT_USERS}
            users += [
                (self._component_tokens[name], user, groups)
                for name, (user, groups) in COMPONENT_USERS.items()
            ]
        (d / "tokens.csv").write_text(token_auth_file(users))

    def _write_kubeconfig(self) -> None:
        assert self.workdir is not None
        self.kubeconfig = write_kubeconfig(
            self.workdir / "kubeconfig",
            server=self.server,
            ca_file=self.ca_file,
            user=ADMIN_USER,
            token=self.admin_token,
        )
        for name, token in self._component_tokens.items():
            write_kubeconfig(
                self.workdir / f"kubeconfig-{name}",
                server=self.server,
                ca_file=self.ca_file,
                user=COMPONENT_USERS[name][0],
                token=token,
            )

    def component_kubeconfig(self, name: str) -> str:
        """The kubeconfig ``name`` (a key of :data:`COMPONENT_USERS`) runs with: its own
        identity's, or the admin's without ``component_identities``."""
        if not self._component_tokens:
            return self.kubeconfig
        assert self.workdir is not None
        return str(self.workdir / f"kubeconfig-{name}")

    def _start_etcd(self) -> None:
        assert self.workdir is not None
        client, peer = processes.free_port(), processes.free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        self._spawn("etcd", etcd_args(self.workdir / "etcd", self.etcd_url, peer_url))
        self._wait(
            "etcd", lambda: processes.http_ok(f"{self.etcd_url}/health"), "etcd /health not ok"
        )

    def _start_controller_manager(self) -> None:
        assert self.workdir is not None
        args = controller_manager_args(
            self.component_kubeconfig("kube-controller-manager"),
            self.workdir / "pki",
            self.resource_quota_sync_period,
            self.node_monitor_grace_period if self.nodes else None,
            self.client_qps,
            service_account_credentials=self.component_identities,
        )
        self._spawn("kube-controller-manager", args)
        # Ready once its serviceaccount controller has made `default` in `default`.
        self._wait(
            "kube-controller-manager",
            lambda: self._api_get("/api/v1/namespaces/default/serviceaccounts/default"),
            "no default ServiceAccount in namespace default",
        )

    def _spawn(self, name: str, args: list[str], binary: Path | None = None) -> None:
        assert self.bin_dir is not None
        log = (self.log_dir / f"{name}.log").open("ab")
        log.write(f"\n=== start {time.strftime('%H:%M:%S')} ===\n".encode())
        log.flush()
        self._procs[name] = processes.spawn([str(binary or self.bin_dir / name), *args], log)
        log.close()

    def _stop(self, name: str) -> None:
        processes.stop(self._procs.pop(name, None))

    def _api_get(self, path: str) -> bool:
        """True when the apiserver answers 200 to GET ``path`` as admin."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        req = urllib.request.Request(
            f"{self.server}{path}", headers={"Authorization": f"Bearer {self.admin_token}"}
        )
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _wait_ready(self) -> None:
        self._wait("kube-apiserver", lambda: self._api_get("/readyz"), "/readyz not ok")

    def _wait(
        self, name: str, check: Callable[[], bool], what: str, timeout: float | None = None
    ) -> None:
        timeout = self.ready_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = self._procs.get(name)
            if proc is None or proc.poll() is not None:
                raise ControlPlaneError(f"{name} exited early\n{self.log_tails()}")
            if check():
                return
            time.sleep(0.2)
        raise ControlPlaneError(f"{name}: {what} after {timeout:.0f} s\n{self.log_tails()}")

    def _etcd_call(self, path: str, body: dict[str, object]) -> dict[str, object]:
        req = urllib.request.Request(
            f"{self.etcd_url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            result: dict[str, object] = json.loads(resp.read())
            return result


if __name__ == "__main__":
    from dynquota.testing.controlplane_cli import main

    raise SystemExit(main())
