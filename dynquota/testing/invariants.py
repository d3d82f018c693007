"""An invariant checker for the operator under faults: samples the cluster every second.

Used by the fault tests (``tests/integration/test_faults.py``) and the chaos soak
(``tests/soak/soak.py``); never imported by the operator. It observes from the admin side
with the official sync ``kubernetes`` client (an independent path from the operator's
kubernetes_asyncio and kopf), the apiserver's audit log (:class:`AuditLog`) and the replica
processes (:class:`~dynquota.testing.replicas.Replica`). Policies are parsed with the
operator's pure validation (to know the defaults it fills in); which policy governs a
namespace is decided independently (the pure rules are in
:mod:`dynquota.testing.invariant_rules`, convergence in :mod:`dynquota.testing.convergence`).

Invariants (the names used in :class:`Violation`):

``no-delete``      (i) no managed quota deleted by the operator while a policy selects its
                   namespace (valid: it governs; invalid: it freezes), the namespace is neither
                   terminating nor opted out, and the kill switch is released -- in the samples
                   both before and after the delete (audit log; without it, a managed quota
                   seen and then gone or replaced). Also: nothing created or patched while the
                   kill switch is engaged in both samples.
``maximum``        (ii) a new ``spec.hard`` never above the governing maximum, unless not above
                   the usage (``status.used``) around it (v0.2: never below usage).
``cooldown``       (iii) a decrease of ``spec.hard`` only once ``downscaleCooldown`` passed
                   since the ``dynquota.io/last-change.<r>`` stamp before it; an increase only
                   once ``upscaleCooldown`` passed since ``dynquota.io/last-upscale.<r>``.
                   Changes explained otherwise are exempt: a new profile or governing policy
                   (``dynquota.io/profile.<r>``/``dynquota.io/policy`` changed), an override
                   granted or ended, a revert of a direct edit (``spec.hard`` differed from
                   ``dynquota.io/hard.<r>``), and a raise to no more than the usage that
                   stamps nothing (never below usage: admission admitted past hard).
``single-writer``  (iv) from the audit log: every successful managed-quota write by a replica
                   completes within ``lease_duration`` of that replica's last successful Lease
                   write received before it, and no other replica wrote the Lease successfully
                   between that Lease write and the end of the quota write: never two replicas
                   writing within one lease period.
``process``        (v) no operator process exits unless the test stopped or killed it.
``liveness``       (v) ``/healthz`` red (or unanswered within 5 s) for ``liveness_red_for``
                   seconds in a row (60 s: what makes the kubelet restart a pod with the
                   chart's probe) only within ``liveness_grace`` seconds of a fault (see
                   :meth:`InvariantChecker.note_fault`); never counted before a replica's
                   first green answer (its start-up).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import kubernetes
from kubernetes.client.exceptions import ApiException

from dynquota.names import GROUP, MANAGED_BY_SELECTOR, PLURAL, VERSION
from dynquota.testing.audit import AuditLog, AuditRecord
from dynquota.testing.convergence import unconverged
from dynquota.testing.invariant_audit import (
    OPERATOR_USER,
    audit_no_delete,
    is_operator_write,
    single_writer,
)
from dynquota.testing.invariant_rules import (
    INVARIANTS,
    ClusterSample,
    Violation,
    expected_hard,
    sample_of,
    transitions,
)
from dynquota.testing.operator import OPERATOR_NS
from dynquota.testing.replicas import Replica, replica_of

__all__ = [
    "INVARIANTS",
    "OPERATOR_USER",
    "InvariantChecker",
    "Violation",
    "expected_hard",
    "percentile",
    "single_writer",
]


class InvariantChecker:
    """Samples the cluster every ``interval`` seconds in a thread and records violations.

    Args:
        api: official sync client as cluster admin.
        replicas: operator processes to watch (exits, ``/healthz``).
        audit: the apiserver's audit log (``LocalControlPlane(audit=True)``), for
            ``no-delete`` and ``single-writer``; without it ``no-delete`` is sample-based and
            ``single-writer`` unchecked.
        jti_to_replica: token ``jti`` -> replica name (see
            :func:`~dynquota.testing.replicas.replica_of`).
        lease_duration: the replicas' Lease duration, seconds.
        liveness_grace: seconds after a fault during which a red liveness is expected.
        liveness_red_for: seconds ``/healthz`` must stay red to count (the chart's probe:
            period 20 s x failureThreshold 3: the kubelet restarts after about 60 s).
        liveness_timeout: seconds a ``/healthz`` answer may take (the chart's 5 s).
        interval: seconds between samples.
        request_timeout: per admin request, seconds (a paused etcd must not stall sampling).
    """

    def __init__(
        self,
        api: kubernetes.client.ApiClient,
        *,
        replicas: Sequence[Replica] = (),
        audit: AuditLog | None = None,
        jti_to_replica: Mapping[str, str] | None = None,
        lease_duration: float = 15.0,
        liveness_grace: float = 120.0,
        liveness_red_for: float = 60.0,
        liveness_timeout: float = 5.0,
        interval: float = 1.0,
        request_timeout: float = 5.0,
        operator_namespace: str = OPERATOR_NS,
    ) -> None:
        self.core: Any = kubernetes.client.CoreV1Api(api)
        self.custom: Any = kubernetes.client.CustomObjectsApi(api)
        self.replicas = list(replicas)
        self.audit = audit
        self.jti_to_replica: dict[str, str] = dict(jti_to_replica or {})
        self.lease_duration = lease_duration
        self.liveness_grace = liveness_grace
        self.liveness_red_for = liveness_red_for
        self.liveness_timeout = liveness_timeout
        self.interval = interval
        self.timeout = request_timeout
        self.operator_namespace = operator_namespace
        self.violations: list[Violation] = []
        self.samples = 0
        self.failed_samples = 0
        self.records: list[AuditRecord] = []
        self.red_seconds: dict[str, float] = {}
        self.faults: list[tuple[str, float, float | None]] = []
        self.last: ClusterSample | None = None
        self._history: list[tuple[float, frozenset[str], bool | None]] = []
        self._keys: set[str] = set()
        self._unbracketed: list[AuditRecord] = []
        self._green: dict[tuple[str, float], bool] = {}
        self._red_since: dict[tuple[str, float], float] = {}
        self._liveness_thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- control -----------------------------------------------------------------------------

    def start(self) -> InvariantChecker:
        """Start sampling in a daemon thread; returns self."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="invariants", daemon=True)
        self._thread.start()
        self._liveness_thread = threading.Thread(
            target=self._liveness_loop, name="invariants-liveness", daemon=True
        )
        self._liveness_thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (after the current sample) and run the audit checks once more."""
        self._stop.set()
        for thread in (self._thread, self._liveness_thread):
            if thread is not None:
                thread.join(30)
        self.check_audit()

    def __enter__(self) -> InvariantChecker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def mark(self) -> int:
        """A position in :attr:`violations`; see :meth:`since`."""
        with self._lock:
            return len(self.violations)

    def since(self, mark: int, settle: float = 5.0) -> list[Violation]:
        """Violations recorded after ``mark``. First waits (up to ``settle`` seconds) for a
        sample taken after this call, so that writes made until now are bracketed by
        samples, then runs the audit checks."""
        self.wait_sample(settle)
        self.check_audit()
        with self._lock:
            return list(self.violations[mark:])

    def wait_sample(self, timeout: float = 5.0) -> bool:
        """Wait (up to ``timeout`` seconds) for a sample begun after this call; returns
        whether one came (not while the admin reads fail)."""
        called = time.time()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._thread is not None:
            last = self.last
            if last is not None and last.t > called:
                return True
            time.sleep(0.1)
        return False

    def note_fault(self, kind: str, start: float, end: float | None = None) -> int:
        """Record a fault (``end`` None: still active); returns its index for
        :meth:`end_fault`. Liveness may be red within ``liveness_grace`` of one."""
        with self._lock:
            self.faults.append((kind, start, end))
            return len(self.faults) - 1

    def end_fault(self, index: int, end: float | None = None) -> None:
        """Mark fault ``index`` ended at ``end`` (default: now)."""
        with self._lock:
            kind, start, _ = self.faults[index]
            self.faults[index] = (kind, start, end if end is not None else time.time())

    def add_replica(self, replica: Replica, jti: str | None = None) -> None:
        """Watch ``replica`` too; ``jti``: its token's id for the audit log."""
        with self._lock:
            if replica not in self.replicas:
                self.replicas.append(replica)
            if jti:
                self.jti_to_replica[jti] = replica.name

    # -- sampling ----------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                snapshot = self.sample()
            except Exception:
                self.failed_samples += 1
                snapshot = None
            if snapshot is not None:
                self.samples += 1
                if self.last is not None:
                    for violation in transitions(self.last, snapshot, self.audit is None):
                        self._add(violation)
                self.last = snapshot
                with self._lock:
                    self._history.append((snapshot.t, snapshot.protected, snapshot.kill_switch))
            self._processes()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - began)))

    def sample(self) -> ClusterSample:
        """Read the cluster once (namespaces, policies, managed quotas, kill switch).

        Raises ``ApiException``/``OSError`` (timeouts after ``request_timeout``)."""
        t = time.time()
        timeout = self.timeout
        namespaces = self.core.list_namespace(_request_timeout=timeout).items
        raw = self.custom.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, _request_timeout=timeout
        )["items"]
        quotas = self.core.list_resource_quota_for_all_namespaces(
            label_selector=MANAGED_BY_SELECTOR, field_selector="metadata.name=dynquota",
            _request_timeout=timeout,
        ).items  # fmt: skip
        # t (taken first) orders samples; a change is judged by when the LISTs answered: at
        # load 30 they took 2 s, and a write in them looked early by that much (the soak)
        sample = sample_of(t, namespaces, raw, quotas, self.operator_namespace)
        return dataclasses.replace(sample, read_until=time.time())

    def _add(self, violation: Violation) -> None:
        with self._lock:
            key = violation.key or f"{violation.invariant}|{violation.namespace}|{violation.what}"
            if key in self._keys:
                return
            self._keys.add(key)
            self.violations.append(violation)

    def _processes(self) -> None:
        now = time.time()
        for replica in list(self.replicas):
            code = replica.exited_unexpectedly()
            if code is not None:
                self._add(
                    Violation(
                        now,
                        "process",
                        "",
                        f"replica {replica.name} exited with {code} (log {replica.log}); its "
                        f"last lines:\n{_tail(replica.log)}",
                        key=f"exit|{replica.name}|{replica.started_at}",
                    )
                )
                continue

    def _liveness_loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            self._liveness()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - began)))

    def _liveness(self) -> None:
        for replica in list(self.replicas):
            if replica.pid is None:
                continue
            status = replica.healthz(timeout=self.liveness_timeout)
            now = time.time()
            run = (replica.name, replica.started_at)
            if status == 200:
                self._green[run] = True
                self._red_since.pop(run, None)
                continue
            if not self._green.get(run):
                continue  # still starting (the startup probe's time)
            since = self._red_since.setdefault(run, now)
            self.red_seconds[replica.name] = self.red_seconds.get(replica.name, 0) + self.interval
            if now - since >= self.liveness_red_for and not self._fault_near(now):
                self._add(
                    Violation(
                        now,
                        "liveness",
                        "",
                        f"replica {replica.name} /healthz red ({status or 'no answer'}) for "
                        f"{now - since:.0f} s with no fault within {self.liveness_grace:g} s",
                        key=f"live|{replica.name}|{since}",
                    )
                )

    def _fault_near(self, now: float) -> bool:
        with self._lock:
            faults = list(self.faults)
        return any(end is None or now - end <= self.liveness_grace for _, _, end in faults)

    # -- audit ---------------------------------------------------------------------------------

    def _identify(self, record: AuditRecord) -> str | None:
        return replica_of(record, self.jti_to_replica)

    def check_audit(self) -> None:
        """Read new audit records and run ``no-delete`` (deletes) and ``single-writer``."""
        if self.audit is None:
            return
        new = self.audit.read_new()
        with self._lock:
            self.records.extend(new)
            records = list(self.records)
            history = list(self._history)
        for violation in single_writer(records, self.lease_duration, self._identify):
            self._add(violation)
        candidates = self._unbracketed + [
            r for r in new if is_operator_write(r) and r.code is not None and 200 <= r.code < 300
        ]
        found, self._unbracketed = audit_no_delete(candidates, history, self._identify)
        for violation in found:
            self._add(violation)

    # -- operator writes ---------------------------------------------------------------------

    def operator_writes(self) -> tuple[int, int]:
        """(managed-quota write requests by the operator, of which successful) so far."""
        self.check_audit()
        with self._lock:
            writes = [r for r in self.records if is_operator_write(r)]
        ok = sum(1 for r in writes if r.code is not None and 200 <= r.code < 300)
        return len(writes), ok

    # -- convergence ---------------------------------------------------------------------------

    def unconverged(self, namespaces: Iterable[str] | None = None) -> dict[str, str]:
        """Namespaces (all, or ``namespaces``) not yet where their stamps let them be, with
        why: a governed namespace (kill switch released) needs its managed quota with every
        profiled resource at ``T(U)`` (``U = max(non-terminal pods or ConfigMaps, status.used)``)
        unless a raise is still in its upscale cooldown or a lower target waits for its
        downscale window; ``maximum`` during an override; with the kill switch engaged no
        managed quota. Namespaces frozen by an invalid policy are skipped.

        Raises ``ApiException``/``OSError`` when the admin reads fail."""
        return unconverged(self.sample(), self._counts(), time.time(), namespaces)

    def _counts(self) -> dict[tuple[str, str], int]:
        counts: dict[tuple[str, str], int] = {}
        pods = self.core.list_pod_for_all_namespaces(
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
            _request_timeout=30,
        ).items
        for pod in pods:
            key = (pod.metadata.namespace, "pods")
            counts[key] = counts.get(key, 0) + 1
        for cm in self.core.list_config_map_for_all_namespaces(_request_timeout=30).items:
            key = (cm.metadata.namespace, "configmaps")
            counts[key] = counts.get(key, 0) + 1
        return counts

    def wait_converged(self, timeout: float, namespaces: Iterable[str] | None = None) -> float:
        """Wait until :meth:`unconverged` is empty; returns the seconds it took.

        Raises:
            AssertionError: still unconverged after ``timeout`` seconds (what and why).
        """
        began = time.monotonic()
        wanted = list(namespaces) if namespaces is not None else None
        last: dict[str, str] | str = {}
        while True:
            try:
                last = self.unconverged(wanted)
                if not last:
                    return time.monotonic() - began
            except (ApiException, OSError) as exc:
                last = f"admin read failed: {exc}"
            if time.monotonic() - began >= timeout:
                raise AssertionError(f"not converged within {timeout:.0f} s: {last}")
            time.sleep(0.5)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank; ``nan`` when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def _tail(path: Any, lines: int = 25) -> str:
    """The last ``lines`` lines of a replica's log (a CI run keeps no files: the violation
    must carry the cause), or why they cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as exc:
        return f"(unreadable: {exc})"
