"""Operator replicas as processes (``python -m dynquota.cli run``), each with its own token.

Used by the fault tests and the chaos soak; never imported by the operator. Each replica
runs with leader election on, as the chart's ServiceAccount (a TokenRequest token of its own,
in a kubeconfig that may point through a Toxiproxy proxy), with a distinct ``--pod-name``.

Telling replicas apart in the apiserver's audit log: both authenticate as the same
ServiceAccount with the same field manager, so :func:`replica_of` uses, in this order, the
User-Agent ``dynquota/<version> (<pod name>)`` when the operator sends it, then the token's
``jti`` (every TokenRequest token has its own, and the apiserver logs it as the user's extra
``authentication.kubernetes.io/credential-id: JTI=<jti>``).
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import kubernetes

from dynquota.testing import credentials, processes
from dynquota.testing.audit import AuditRecord
from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.operator import OPERATOR_NS, OPERATOR_SA

__all__ = ["Replica", "ReplicaToken", "operator_token", "replica_of"]

CREDENTIAL_ID: Final = "authentication.kubernetes.io/credential-id"
_USER_AGENT = re.compile(r"^dynquota/\S+ \((?P<pod>[^)]+)\)")


@dataclass(frozen=True)
class ReplicaToken:
    """A TokenRequest token of the operator's ServiceAccount and its ``jti`` claim."""

    token: str
    jti: str


def operator_token(api: kubernetes.client.ApiClient, hours: int = 6) -> ReplicaToken:
    """A new token of ``dynquota-system/dynquota`` (TokenRequest, ``hours`` long).

    Raises ``kubernetes.client.exceptions.ApiException`` if the request fails."""
    core: Any = kubernetes.client.CoreV1Api(api)
    answer = core.create_namespaced_service_account_token(
        OPERATOR_SA, OPERATOR_NS, {"spec": {"expirationSeconds": hours * 3600}}
    )
    token: str = answer.status.token
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return ReplicaToken(token, str(claims.get("jti", "")))


def write_kubeconfig(cp: LocalControlPlane, server: str, token: str, path: Path) -> str:
    """Write a kubeconfig for ``server`` (e.g. a Toxiproxy URL; the apiserver's certificate
    covers 127.0.0.1) with ``token`` and the control plane's CA; returns the path."""
    return credentials.write_kubeconfig(
        path, server=server, ca_file=cp.ca_file, user=OPERATOR_SA, token=token, context="op"
    )


def replica_of(record: AuditRecord, jti_to_replica: Mapping[str, str]) -> str | None:
    """Which replica made the audited request: the pod name in a ``dynquota/<v> (<pod>)``
    User-Agent, else the replica whose token ``jti`` the request carried, else ``None``."""
    match = _USER_AGENT.match(record.user_agent)
    if match:
        return match.group("pod")
    for value in record.extra.get(CREDENTIAL_ID, []):
        if value.startswith("JTI="):
            name = jti_to_replica.get(value[4:])
            if name is not None:
                return name
    return None


@dataclass
class Replica:
    """``python -m dynquota.cli run`` as a child process with leader election on.

    Args:
        name: ``--pod-name`` (the Lease holder identity).
        kubeconfig: the replica's kubeconfig (see :func:`write_kubeconfig`).
        log: file receiving its output (appended across restarts).
        env: extra environment (``DYNQUOTA_*`` settings such as the Lease timings).
        args: extra ``dynquota run`` flags.
    """

    name: str
    kubeconfig: str
    log: Path
    env: Mapping[str, str] = field(default_factory=dict)
    args: Sequence[str] = ()
    metrics_port: int = field(init=False, default=0)
    probe_port: int = field(init=False, default=0)
    started_at: float = field(init=False, default=0.0)
    expected_exit: bool = field(init=False, default=True)
    proc: subprocess.Popen[bytes] | None = field(init=False, default=None)

    def start(self) -> Replica:
        """Start the process (new ports each time); returns self at once (not waiting)."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.metrics_port, self.probe_port = processes.free_port(), processes.free_port()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        env["DYNQUOTA_POD_NAME"] = self.name
        with self.log.open("ab") as out:
            out.write(f"\n=== start {time.strftime('%H:%M:%S')} ===\n".encode())
            out.flush()
            self.proc = processes.spawn(
                [
                    sys.executable, "-m", "dynquota.cli", "run",
                    "--kubeconfig", self.kubeconfig,
                    "--leader-election",
                    "--namespace", OPERATOR_NS,
                    "--pod-name", self.name,
                    "--metrics-port", str(self.metrics_port),
                    "--probe-port", str(self.probe_port),
                    *self.args,
                ],
                out,
                env,
            )  # fmt: skip
        self.started_at = time.time()
        self.expected_exit = False
        return self

    @property
    def pid(self) -> int | None:
        """The running process' id, or ``None``."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def exited_unexpectedly(self) -> int | None:
        """The exit code if the process ended without :meth:`kill`/:meth:`stop`, else None."""
        if self.proc is None or self.expected_exit:
            return None
        return self.proc.poll()

    def kill(self) -> None:
        """SIGKILL (no cleanup, the Lease is not given up) and reap."""
        self.expected_exit = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; idempotent."""
        self.expected_exit = True
        processes.stop(self.proc, timeout)

    def metrics_text(self) -> str | None:
        """The ``/metrics`` page, or ``None`` when it does not answer within 2 s."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2
            ) as answer:
                text: str = answer.read().decode()
                return text
        except OSError:
            return None

    def metric(self, name: str, labels: str = "") -> float | None:
        """Sum of the samples of ``name`` whose series contains ``labels`` (e.g.
        ``result="ok"``); ``None`` when absent or the endpoint does not answer."""
        text = self.metrics_text()
        if text is None:
            return None
        total, found = 0.0, False
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            series, value = line.rsplit(" ", 1)
            if series.split("{", 1)[0] == name and labels in series:
                total += float(value)
                found = True
        return total if found else None

    def healthz(self, timeout: float = 2.0) -> int:
        """HTTP status of ``/healthz`` on the probe port; 0 when it does not answer."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.probe_port}/healthz", timeout=timeout
            ) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return 0

    def rss_kib(self) -> int | None:
        """Resident set size of the running process in KiB (``/proc``), or ``None``."""
        pid = self.pid
        if pid is None:
            return None
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            return None
        return None
