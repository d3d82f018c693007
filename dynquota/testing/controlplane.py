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

Everything listens on 127.0.0.1 on free ports. Authentication: a static admin token (group
``system:masters``) and ServiceAccount tokens; authorization: ``Node,RBAC``; the default
admission plugins stay on, so the ResourceQuota admission plugin enforces quotas. Each
component's output goes to ``<workdir>/logs/<component>.log``.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import contextlib
import ctypes
import datetime as dt
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "helm",
)
ASSETS_ENV = "DYNQUOTA_CONTROLPLANE_ASSETS"
CONTROLLERS = (
    "resourcequota-controller",
    "replicaset-controller",
    "deployment-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "garbage-collector-controller",
    "pod-garbage-collector-controller",
    # aggregates the chart's tenant ClusterRole into admin/edit
    "clusterrole-aggregation-controller",
)
# Added with nodes: Jobs run to completion and are cleaned up, a silent node is marked
# NotReady/Unknown and tainted, and its pods are evicted after their tolerationSeconds.
NODE_CONTROLLERS = (
    "job-controller",
    "ttl-after-finished-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
)
ADMIN_USER = "dynquota-admin"
# One thread that lives as long as the process forks every component (see _die_with_parent).
_SPAWNER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="cp-spawner")


_WRITER_RULES: list[dict[str, object]] = [
    {
        "level": "Metadata",
        # the main resource only: the apiserver's own quota status writes are not logged
        "resources": [{"group": "", "resources": ["resourcequotas"]}],
        "verbs": ["create", "update", "patch", "delete", "deletecollection"],
    },
    {
        "level": "Metadata",
        "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}],
        "verbs": ["create", "update", "patch", "delete"],
    },
]
AUDIT_POLICY: dict[str, object] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [*_WRITER_RULES, {"level": "None"}],
}
"""The audit policy of ``LocalControlPlane(audit=True)``: who wrote managed quotas and
Leases, when, with which answer."""

QUOTA_AUDIT_POLICY: dict[str, object] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            # every charge of the quota admission plugin (user system:apiserver) and every
            # recount of the quota controller, with the status written (status.used)
            "level": "RequestResponse",
            "resources": [{"group": "", "resources": ["resourcequotas/status"]}],
            "verbs": ["update", "patch"],
        },
        *_WRITER_RULES,
        {
            # pod and ConfigMap creates (admitted or refused by quota) and deletes
            "level": "Metadata",
            "resources": [{"group": "", "resources": ["pods", "configmaps"]}],
            "verbs": ["create", "delete", "deletecollection"],
        },
        {"level": "None"},
    ],
}
"""An audit policy for checking quota admission itself (``LocalControlPlane(audit=True,
audit_policy=QUOTA_AUDIT_POLICY)``): :data:`AUDIT_POLICY`, plus every write of a quota's status
with its body, and the creates and deletes of pods and ConfigMaps. See
:mod:`dynquota.testing.quotaaudit`."""


@dataclass(frozen=True)
class AuditRecord:
    """One audit event (stage ``ResponseComplete`` or ``Panic``) of the local apiserver.

    Times are seconds since the epoch (float). ``user`` is the authenticated user name,
    ``extra`` its extra attributes (for a ServiceAccount token:
    ``authentication.kubernetes.io/credential-id`` = ``["JTI=<token id>"]``), ``code`` the
    HTTP status answered (``None`` if the request panicked), ``message`` the answer's status
    message (for a refusal: why), ``subresource`` e.g. ``status``, ``response`` the object
    answered (only at level RequestResponse), ``uri`` the request URI (with its query, e.g.
    ``dryRun=All``).
    """

    audit_id: str
    stage: str
    verb: str
    user: str
    extra: dict[str, list[str]]
    user_agent: str
    resource: str
    namespace: str
    name: str
    code: int | None
    received: float
    completed: float
    subresource: str = ""
    message: str = ""
    response: dict[str, Any] | None = None
    uri: str = ""

    @classmethod
    def from_json(cls, event: dict[str, Any]) -> AuditRecord:
        """Build a record from one line of the JSON audit log (``audit.k8s.io/v1`` Event).

        Raises ``KeyError``/``ValueError`` for a line that is not an audit Event."""
        ref = event.get("objectRef") or {}
        user = event.get("user") or {}
        status = event.get("responseStatus") or {}
        return cls(
            audit_id=event["auditID"],
            stage=event["stage"],
            verb=event["verb"],
            user=user.get("username", ""),
            extra={k: list(v) for k, v in (user.get("extra") or {}).items()},
            user_agent=event.get("userAgent", ""),
            resource=ref.get("resource", ""),
            namespace=ref.get("namespace", ""),
            name=ref.get("name", ""),
            code=status.get("code"),
            received=_rfc3339(event["requestReceivedTimestamp"]),
            completed=_rfc3339(event["stageTimestamp"]),
            subresource=ref.get("subresource", ""),
            message=status.get("message", ""),
            response=event.get("responseObject"),
            uri=event.get("requestURI", ""),
        )


def _rfc3339(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class AuditLog:
    """Incremental reader of a JSON-lines audit log: :meth:`read_new` returns the records
    appended since the last call (complete lines only).

    Args:
        path: the log file (it may not exist yet).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def read_new(self) -> list[AuditRecord]:
        """Records completed since the last call, oldest first; malformed lines skipped."""
        try:
            with self.path.open("rb") as stream:
                stream.seek(self._offset)
                chunk = stream.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        records = []
        for line in lines:
            if not line.strip():
                continue
            try:
                records.append(AuditRecord.from_json(json.loads(line)))
            except (KeyError, ValueError, TypeError):
                continue
        return records


class ControlPlaneError(RuntimeError):
    """A component failed to build, start or become ready; the message names it and its log."""


def find_binaries() -> Path:
    """Return the directory holding the control-plane binaries, building them when missing.

    Uses ``$DYNQUOTA_CONTROLPLANE_ASSETS`` when it holds every binary; otherwise runs
    ``hack/controlplane/build.sh`` from this source tree (a cold build takes tens of minutes).

    Raises:
        ControlPlaneError: no binaries and no build script, or the build failed.
    """
    assets = os.environ.get(ASSETS_ENV)
    if assets and all(os.access(Path(assets, b), os.X_OK) for b in BINARIES):
        return Path(assets)
    script = Path(__file__).resolve().parents[2] / "hack" / "controlplane" / "build.sh"
    if not script.exists():
        raise ControlPlaneError(
            f"control-plane binaries not found: set {ASSETS_ENV} to a directory holding "
            f"{', '.join(BINARIES)}, or run from a dynquota source checkout"
        )
    done = subprocess.run([str(script)], stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise ControlPlaneError(f"{script} failed with exit code {done.returncode}")
    return Path(done.stdout.strip().splitlines()[-1])


# --- simulated nodes (kwok) ------------------------------------------------------------------
KWOK_ASSETS_ENV = "DYNQUOTA_KWOK_ASSETS"
# kwok manages the Nodes carrying this annotation; removing it makes a node fall silent.
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
NODE_PREFIX = "kwok-node-"
# Pod IPs kwok hands out: far from the Service range (10.0.0.0/24), room for millions of pods.
KWOK_POD_CIDR = "10.64.0.0/10"


def find_kwok() -> Path:
    """Return the directory holding ``kwok`` and ``stages.yaml``, building them when missing.

    Uses ``$DYNQUOTA_KWOK_ASSETS`` when it holds both; otherwise runs ``hack/kwok/build.sh``
    (``go install sigs.k8s.io/kwok/cmd/kwok@<version>``, a few minutes cold).

    Raises:
        ControlPlaneError: no kwok and no build script, or the build failed.
    """
    assets = os.environ.get(KWOK_ASSETS_ENV)
    if assets and os.access(Path(assets, "kwok"), os.X_OK) and Path(assets, "stages.yaml").exists():
        return Path(assets)
    script = Path(__file__).resolve().parents[2] / "hack" / "kwok" / "build.sh"
    if not script.exists():
        raise ControlPlaneError(
            f"kwok not found: set {KWOK_ASSETS_ENV} to a directory holding kwok and "
            "stages.yaml, or run from a dynquota source checkout"
        )
    done = subprocess.run([str(script)], stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise ControlPlaneError(f"{script} failed with exit code {done.returncode}")
    return Path(done.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG = 1: the child gets SIGKILL when the launching process dies, so a
    # crashed or killed test run leaves nothing listening. The signal fires when the *thread*
    # that forked exits, so every child is forked from _SPAWNER's one long-lived thread.
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


@dataclass
class _Pki:
    ca_pem: bytes
    serving_cert_pem: bytes
    serving_key_pem: bytes
    sa_key_pem: bytes
    sa_pub_pem: bytes


def _make_pki() -> _Pki:
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dynquota-local-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    sa_key = ec.generate_private_key(ec.SECP256R1())
    pem = serialization.Encoding.PEM
    return _Pki(
        ca_pem=ca.public_bytes(pem),
        serving_cert_pem=cert.public_bytes(pem),
        serving_key_pem=key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        sa_key_pem=sa_key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        sa_pub_pem=sa_key.public_key().public_bytes(
            pem, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )


@dataclass
class LocalControlPlane:
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

    kubeconfig: str = field(init=False, default="")
    server: str = field(init=False, default="")
    etcd_url: str = field(init=False, default="")
    admin_token: str = field(init=False, default="")
    _procs: dict[str, subprocess.Popen[bytes]] = field(init=False, default_factory=dict)
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
            self._apiserver_port = _free_port()
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
        pki = self.workdir / "pki"
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self._apiserver_port}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                *self._audit_args(),
                *self.extra_apiserver_args,
            ],
        )
        self._wait_ready()

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver (SIGTERM, then SIGKILL after 10 s); etcd keeps running."""
        self._stop("kube-apiserver")

    def restart_apiserver(self) -> None:
        """Stop and start kube-apiserver on the same port; waits for ``/readyz``."""
        self.stop_apiserver()
        self.start_apiserver()

    # -- simulated nodes -------------------------------------------------------------------

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
        key, value = KWOK_NODE_ANNOTATION
        resources = {"cpu": "32", "memory": "256Gi", "pods": str(self.node_pods)}
        items = [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    # a losable node is left to its own kwok, not the shared one's selector
                    "annotations": {} if losable else {key: value},
                    "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
                },
                # kwok's node-initialize stage keeps allocatable/capacity given at create
                "status": {"allocatable": resources, "capacity": resources},
            }
            for name in names
        ]
        self.kubectl(
            "create",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
        )
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
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log_path}",
            "--audit-log-format=json",
            # written as each request completes: readers see it at once
            "--audit-log-mode=blocking",
            "--audit-log-maxbackup=0",
            "--audit-log-maxsize=0",
        ]

    def _write_pki(self) -> None:
        assert self.workdir is not None
        pki = _make_pki()
        d = self.workdir / "pki"
        (d / "ca.crt").write_bytes(pki.ca_pem)
        (d / "apiserver.crt").write_bytes(pki.serving_cert_pem)
        (d / "apiserver.key").write_bytes(pki.serving_key_pem)
        (d / "sa.key").write_bytes(pki.sa_key_pem)
        (d / "sa.pub").write_bytes(pki.sa_pub_pem)
        self.admin_token = secrets.token_hex(24)
        (d / "tokens.csv").write_text(f'{self.admin_token},{ADMIN_USER},0,"system:masters"\n')

    def _write_kubeconfig(self) -> None:
        assert self.workdir is not None
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": base64.b64encode(
                            self.ca_file.read_bytes()
                        ).decode(),
                    },
                }
            ],
            "users": [{"name": ADMIN_USER, "user": {"token": self.admin_token}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": ADMIN_USER}}],
            "current-context": "local",
        }
        path = self.workdir / "kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        self.kubeconfig = str(path)

    def _start_etcd(self) -> None:
        assert self.workdir is not None
        client, peer = _free_port(), _free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        self._spawn(
            "etcd",
            [
                "--name=default",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                # test data only: losing it on a crash is fine, and fsync dominates on CI disks
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait("etcd", lambda: self._http_ok(f"{self.etcd_url}/health"), "etcd /health not ok")

    def _start_controller_manager(self) -> None:
        assert self.workdir is not None
        pki = self.workdir / "pki"
        controllers = CONTROLLERS + (NODE_CONTROLLERS if self.nodes else ())
        self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={self.kubeconfig}",
                f"--controllers={','.join(controllers)}",
                "--leader-elect=false",
                "--secure-port=0",
                f"--resource-quota-sync-period={self.resource_quota_sync_period}s",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=false",
                *self._node_controller_args(),
                *self._client_rate_args(),
            ],
        )
        # Ready once its serviceaccount controller has made `default` in `default`.
        self._wait(
            "kube-controller-manager",
            lambda: self._api_get("/api/v1/namespaces/default/serviceaccounts/default"),
            "no default ServiceAccount in namespace default",
        )

    def _node_controller_args(self) -> list[str]:
        if not self.nodes:
            return []
        return [
            f"--node-monitor-grace-period={self.node_monitor_grace_period}s",
            "--node-monitor-period=2s",
        ]

    def _client_rate_args(self) -> list[str]:
        if self.client_qps is None:
            return []
        return [f"--kube-api-qps={self.client_qps}", f"--kube-api-burst={2 * self.client_qps}"]

    def _start_scheduler(self) -> None:
        assert self.workdir is not None
        port = _free_port()
        config = self.workdir / "kube-scheduler.yaml"
        connection: dict[str, object] = {"kubeconfig": self.kubeconfig}
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
            lambda: self._http_ok(f"https://127.0.0.1:{port}/healthz", verify=False),
            "/healthz not ok",
        )

    def _start_kwok(self, manage: str = "", proc: str = "kwok") -> None:
        if self.kwok_dir is None:
            self.kwok_dir = find_kwok()
        key, value = KWOK_NODE_ANNOTATION
        self._spawn(
            proc,
            [
                f"--kubeconfig={self.kubeconfig}",
                f"--config={self.kwok_dir / 'stages.yaml'}",
                "--manage-all-nodes=false",
                manage or f"--manage-nodes-with-annotation-selector={key}={value}",
                f"--cidr={KWOK_POD_CIDR}",
                "--node-ip=10.0.1.1",
                f"--node-lease-duration-seconds={self.node_lease_seconds}",
                f"--server-address=127.0.0.1:{_free_port()}",
            ],
            binary=self.kwok_dir / "kwok",
        )

    def _spawn(self, name: str, args: list[str], binary: Path | None = None) -> None:
        assert self.bin_dir is not None
        log = (self.log_dir / f"{name}.log").open("ab")
        log.write(f"\n=== start {time.strftime('%H:%M:%S')} ===\n".encode())
        log.flush()
        self._procs[name] = _SPAWNER.submit(
            subprocess.Popen,
            [str(binary or self.bin_dir / name), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        ).result()
        log.close()

    def _stop(self, name: str) -> None:
        proc = self._procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

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

    def _wait(self, name: str, check: object, what: str, timeout: float | None = None) -> None:
        assert callable(check)
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

    def _http_ok(self, url: str, verify: bool = True) -> bool:
        # verify=False only for a component's self-signed loopback health endpoint
        ctx = None if verify else ssl._create_unverified_context()
        try:
            with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _etcd_call(self, path: str, body: dict[str, object]) -> dict[str, object]:
        req = urllib.request.Request(
            f"{self.etcd_url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            result: dict[str, object] = json.loads(resp.read())
            return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dynquota.testing.controlplane``: start, print the kubeconfig, wait.

    SIGINT/SIGTERM stop everything; SIGHUP restarts kube-apiserver alone (etcd keeps its
    data), which is how an apiserver restart is staged by hand.
    """
    parser = argparse.ArgumentParser(
        prog="python -m dynquota.testing.controlplane",
        description="Run etcd, kube-apiserver and kube-controller-manager on 127.0.0.1 until "
        "Ctrl-C. `kill -HUP <pid>` restarts kube-apiserver alone.",
    )
    parser.add_argument(
        "--resource-quota-sync-period",
        type=int,
        default=10,
        metavar="SECONDS",
        help="the quota controller's full resync period (default: 10)",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        default=0,
        metavar="N",
        help="start kube-scheduler and kwok with N simulated nodes (default: 0, pods stay Pending)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory (data, logs) on exit"
    )
    args = parser.parse_args(argv)
    signals = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    with LocalControlPlane(
        resource_quota_sync_period=args.resource_quota_sync_period,
        keep_workdir=args.keep,
        nodes=args.nodes,
    ) as cp:
        print(f"export KUBECONFIG={cp.kubeconfig}", flush=True)
        print(
            f"kubectl, helm: {cp.bin_dir}; logs: {cp.log_dir}; pid {os.getpid()}: "
            "Ctrl-C stops everything, kill -HUP restarts kube-apiserver",
            file=sys.stderr,
            flush=True,
        )
        while signal.sigwait(signals) == signal.SIGHUP:
            cp.restart_apiserver()
            print("kube-apiserver restarted", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
