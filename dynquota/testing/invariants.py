"""An invariant checker for the operator under faults: samples the cluster every second.

Used by the fault tests (``tests/integration/test_faults.py``) and the chaos soak
(``tests/soak/soak.py``); never imported by the operator. It observes from the admin side
with the official sync ``kubernetes`` client (an independent path from the operator's
kubernetes_asyncio and kopf), the apiserver's audit log (:class:`AuditLog`) and the replica
processes (:class:`~dynquota.testing.replicas.Replica`). Policies are parsed with the
operator's pure validation (to know the defaults it fills in); which policy governs a
namespace is decided here, independently.

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
                   ``dynquota.io/hard.<r>``).
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

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import kubernetes
from kubernetes.client.exceptions import ApiException

from dynquota.names import GROUP, MANAGED_BY_SELECTOR, PLURAL, VERSION
from dynquota.policy.models import PolicyInfo, ResourceProfile, validate_policy
from dynquota.policy.state import (
    KILL_SWITCH,
    OVERRIDE_EXPIRES_AT,
    OVERRIDE_GRANTED_AT,
    POLICY,
    hard_key,
    last_change_key,
    last_upscale_key,
    parse_time,
    profile_key,
)
from dynquota.quantity import QuantityError, parse_quantity
from dynquota.testing.audit import AuditLog, AuditRecord
from dynquota.testing.operator import OPERATOR_NS, OPERATOR_SA
from dynquota.testing.replicas import Replica, replica_of

__all__ = ["INVARIANTS", "InvariantChecker", "Violation", "expected_hard", "single_writer"]

INVARIANTS: Final = ("no-delete", "maximum", "cooldown", "single-writer", "process", "liveness")
MANAGED_BY: Final = MANAGED_BY_SELECTOR
SYSTEM: Final = frozenset({"kube-system", "kube-public", "kube-node-lease"})
OPERATOR_USER: Final = f"system:serviceaccount:{OPERATOR_NS}:{OPERATOR_SA}"
WRITE_VERBS: Final = frozenset({"create", "update", "patch", "delete"})


@dataclass(frozen=True)
class Violation:
    """One broken invariant: ``time`` (seconds since the epoch), ``invariant`` (one of
    :data:`INVARIANTS`), ``namespace`` ("" when cluster-wide) and the evidence ``what``."""

    time: float
    invariant: str
    namespace: str
    what: str
    key: str = ""

    def __str__(self) -> str:
        stamp = (
            time.strftime("%H:%M:%S", time.gmtime(self.time)) + f".{int(self.time % 1 * 1000):03d}Z"
        )
        return f"{stamp} [{self.invariant}] {self.namespace or '-'}: {self.what}"


@dataclass(frozen=True)
class _Quota:
    uid: str
    hard: dict[str, int]
    used: dict[str, int]
    annotations: dict[str, str]


@dataclass
class _Snapshot:
    t: float
    kill_switch: bool | None  # None: an invalid value
    labels: dict[str, dict[str, str]]
    terminating: frozenset[str]
    policies: list[PolicyInfo]
    quotas: dict[str, _Quota]
    protected: frozenset[str] = frozenset()
    governing: dict[str, PolicyInfo | None] = field(default_factory=dict)
    """namespace -> the valid policy governing it; ``None``: frozen by an invalid one."""


def _count(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return parse_quantity(str(text)).ceil()
    except (QuantityError, ValueError):
        return None


def _kill_switch(value: str | None) -> bool | None:
    if value is None or value.lower() == "false":
        return False
    return True if value.lower() == "true" else None


def _stamp(annotations: Mapping[str, str], key: str) -> int | None:
    try:
        return parse_time(annotations[key])
    except (KeyError, ValueError):
        return None


def _selector_matches(info: PolicyInfo, labels: Mapping[str, str]) -> bool:
    # an unreadable selector may match anything (the operator freezes on it too)
    return info.selector is None or info.selector.matches(labels)


def _govern(labels: Mapping[str, str], policies: Iterable[PolicyInfo]) -> tuple[bool, Any]:
    """(selected by any policy, governing valid policy or None when frozen/none)."""
    matching = [p for p in policies if _selector_matches(p, labels)]
    if not matching:
        return False, None
    ranked = sorted(
        matching, key=lambda p: (-(p.priority if p.priority is not None else 2**31), p.name)
    )
    top = ranked[0]
    return True, top if top.valid else None


def expected_hard(profile: ResourceProfile, usage: int) -> int:
    """``T(U) = min(maximum, max(minimum, ceil(U * (100 + bufferPercent) / 100)))``, in integers:
    the target is usage plus the buffer, rounded up, clamped to the profile's bounds
    (``docs/sizing.md``)."""
    grown = -(-usage * (100 + profile.buffer_percent) // 100)
    return min(profile.maximum, max(profile.minimum, grown))


def single_writer(
    records: Sequence[AuditRecord],
    lease_duration: float,
    identify: Callable[[AuditRecord], str | None],
    *,
    lease_namespace: str = OPERATOR_NS,
    lease_name: str = "dynquota",
) -> list[Violation]:
    """Invariant (iv) over audit records (any order): see the module docs. Quota writes
    whose replica cannot be identified are reported too (they cannot be checked)."""
    ordered = sorted(records, key=lambda r: r.received)
    leases: list[tuple[float, str]] = []
    writes: list[tuple[AuditRecord, str]] = []
    found: list[Violation] = []
    for record in ordered:
        if record.user != OPERATOR_USER or record.code is None or not 200 <= record.code < 300:
            continue
        if (
            record.resource == "leases"
            and record.namespace == lease_namespace
            and record.name == lease_name
            and record.verb in ("create", "update", "patch")
        ):
            who = identify(record)
            if who is not None:
                leases.append((record.received, who))
        elif record.resource == "resourcequotas" and record.verb in WRITE_VERBS:
            who = identify(record)
            if who is None:
                found.append(
                    Violation(
                        record.received,
                        "single-writer",
                        record.namespace,
                        f"{record.verb} of quota {record.name} by an unidentified replica "
                        f"(user agent {record.user_agent!r})",
                        key=f"sw-unknown-{record.audit_id}",
                    )
                )
                continue
            writes.append((record, who))
    for record, who in writes:
        own = [t for t, w in leases if w == who and t <= record.received]
        what = f"{record.verb} of {record.namespace}/{record.name} by {who}"
        if not own:
            found.append(
                Violation(
                    record.received,
                    "single-writer",
                    record.namespace,
                    f"{what}: no successful Lease write by {who} before it",
                    key=f"sw-{record.audit_id}",
                )
            )
            continue
        renewed = own[-1]
        if record.completed > renewed + lease_duration:
            found.append(
                Violation(
                    record.received,
                    "single-writer",
                    record.namespace,
                    f"{what} completed {record.completed - renewed:.1f} s after its last Lease "
                    f"write (lease duration {lease_duration:g} s)",
                    key=f"sw-{record.audit_id}",
                )
            )
            continue
        others = [(t, w) for t, w in leases if w != who and renewed < t <= record.completed]
        if others:
            t, other = others[0]
            found.append(
                Violation(
                    record.received,
                    "single-writer",
                    record.namespace,
                    f"{what} (received {record.received:.3f}, completed "
                    f"{record.completed:.3f}) while {other} wrote the Lease at {t:.3f}",
                    key=f"sw-{record.audit_id}",
                )
            )
    return found


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
        self.last: _Snapshot | None = None
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
                    self._transitions(self.last, snapshot)
                self.last = snapshot
                with self._lock:
                    self._history.append((snapshot.t, snapshot.protected, snapshot.kill_switch))
            self._processes()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - began)))

    def sample(self) -> _Snapshot:
        """Read the cluster once (namespaces, policies, managed quotas, kill switch).

        Raises ``ApiException``/``OSError`` (timeouts after ``request_timeout``)."""
        t = time.time()
        timeout = self.timeout
        namespaces = self.core.list_namespace(_request_timeout=timeout).items
        raw = self.custom.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, _request_timeout=timeout
        )["items"]
        quotas = self.core.list_resource_quota_for_all_namespaces(
            label_selector=MANAGED_BY, field_selector="metadata.name=dynquota",
            _request_timeout=timeout,
        ).items  # fmt: skip
        labels: dict[str, dict[str, str]] = {}
        terminating: set[str] = set()
        kill_switch: bool | None = False
        for ns in namespaces:
            name = ns.metadata.name
            labels[name] = dict(ns.metadata.labels or {})
            if ns.metadata.deletion_timestamp is not None:
                terminating.add(name)
            if name == "kube-system":
                kill_switch = _kill_switch((ns.metadata.annotations or {}).get(KILL_SWITCH))
        policies = [validate_policy(p) for p in raw]
        views = {
            q.metadata.namespace: _Quota(
                uid=q.metadata.uid,
                hard={k: c for k, v in (q.spec.hard or {}).items() if (c := _count(v)) is not None},
                used={
                    k: c
                    for k, v in ((q.status and q.status.used) or {}).items()
                    if (c := _count(v)) is not None
                },
                annotations=dict(q.metadata.annotations or {}),
            )
            for q in quotas
        }
        snapshot = _Snapshot(t, kill_switch, labels, frozenset(terminating), policies, views)
        protected = set()
        for name, ns_labels in labels.items():
            if name in SYSTEM or name == self.operator_namespace:
                continue
            selected, governing = _govern(ns_labels, policies)
            if selected and governing is not None and governing.spec.dry_run:
                selected = False
            opted_out = ns_labels.get("dynquota.io/managed", "").lower() == "false"
            if selected and not opted_out and name not in terminating:
                snapshot.governing[name] = governing
                if kill_switch is False:
                    protected.add(name)
        snapshot.protected = frozenset(protected)
        return snapshot

    def _add(self, violation: Violation) -> None:
        with self._lock:
            key = violation.key or f"{violation.invariant}|{violation.namespace}|{violation.what}"
            if key in self._keys:
                return
            self._keys.add(key)
            self.violations.append(violation)

    def _transitions(self, prev: _Snapshot, cur: _Snapshot) -> None:
        for ns, quota in cur.quotas.items():
            before = prev.quotas.get(ns)
            policy = cur.governing.get(ns)
            profiles = policy.spec.resources if policy is not None and policy.spec else {}
            if before is None or before.uid != quota.uid:
                # a new quota: its hard is bounded too
                for r, value in quota.hard.items():
                    self._check_maximum(cur, ns, r, value, profiles.get(r), quota, None)
                if before is not None and self.audit is None:
                    self._check_gone(prev, cur, ns, "replaced (a new uid)")
                continue
            for r, value in quota.hard.items():
                old = before.hard.get(r)
                if old is None or old == value:
                    continue
                profile = profiles.get(r)
                self._check_maximum(cur, ns, r, value, profile, quota, before)
                if profile is None or self._explained(before, quota, r):
                    continue
                self._check_cooldown(cur, ns, r, old, value, profile, before, quota)
        if self.audit is None:
            for ns in prev.quotas.keys() - cur.quotas.keys():
                self._check_gone(prev, cur, ns, "deleted")

    def _check_gone(self, prev: _Snapshot, cur: _Snapshot, ns: str, how: str) -> None:
        if ns in prev.protected and ns in cur.protected:
            self._add(
                Violation(
                    cur.t,
                    "no-delete",
                    ns,
                    f"managed quota {how} between samples at {prev.t:.1f} and {cur.t:.1f} "
                    "while a policy selected the namespace and the kill switch was released",
                )
            )

    def _check_maximum(
        self,
        cur: _Snapshot,
        ns: str,
        r: str,
        value: int,
        profile: ResourceProfile | None,
        quota: _Quota,
        before: _Quota | None,
    ) -> None:
        if profile is None or value <= profile.maximum:
            return
        usage = max(quota.used.get(r, 0), before.used.get(r, 0) if before else 0)
        if value <= usage:
            return
        self._add(
            Violation(
                cur.t,
                "maximum",
                ns,
                f"spec.hard {r}={value} above the maximum {profile.maximum} (status.used {usage})",
                key=f"max|{ns}|{quota.uid}|{r}|{value}",
            )
        )

    @staticmethod
    def _explained(before: _Quota, quota: _Quota, r: str) -> bool:
        a, b = before.annotations, quota.annotations
        if a.get(profile_key(r)) != b.get(profile_key(r)) or a.get(POLICY) != b.get(POLICY):
            return True  # a policy change applies at once
        if a.get(OVERRIDE_GRANTED_AT) != b.get(OVERRIDE_GRANTED_AT):
            return True  # granted, expired or cancelled
        if a.get(OVERRIDE_EXPIRES_AT) != b.get(OVERRIDE_EXPIRES_AT):
            return True
        written = _count(a.get(hard_key(r)))
        return written is not None and written != before.hard.get(r)  # a direct edit reverted

    def _check_cooldown(
        self,
        cur: _Snapshot,
        ns: str,
        r: str,
        old: int,
        new: int,
        profile: ResourceProfile,
        before: _Quota,
        quota: _Quota,
    ) -> None:
        if new < old:
            key, window, what = last_change_key(r), profile.downscale_cooldown, "downscale"
        else:
            key, window, what = last_upscale_key(r), profile.upscale_cooldown, "upscale"
        stamp = _stamp(before.annotations, key)
        if stamp is None:
            return
        after = _stamp(quota.annotations, key)
        early = cur.t < stamp + window - 1 or (after is not None and after < stamp + window)
        if early:
            self._add(
                Violation(
                    cur.t,
                    "cooldown",
                    ns,
                    f"{what} {r} {old}->{new} seen at {cur.t:.1f}, {key} was {stamp} "
                    f"(+{window} s = {stamp + window}), new stamp {after}",
                    key=f"cd|{ns}|{quota.uid}|{r}|{old}|{new}|{stamp}",
                )
            )

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
                        f"replica {replica.name} exited with {code} (log {replica.log})",
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
            r
            for r in new
            if r.user == OPERATOR_USER
            and r.resource == "resourcequotas"
            and r.verb in WRITE_VERBS
            and r.code is not None
            and 200 <= r.code < 300
        ]
        self._unbracketed = []
        for record in candidates:
            before = next((h for h in reversed(history) if h[0] <= record.received), None)
            after = next((h for h in history if h[0] >= record.completed), None)
            if after is None:
                self._unbracketed.append(record)  # looked at again once sampled after it
                continue
            if before is None:
                continue
            ns = record.namespace
            if record.verb == "delete" and ns in before[1] and ns in after[1]:
                self._add(
                    Violation(
                        record.received,
                        "no-delete",
                        ns,
                        f"delete of quota {record.name} by {self._identify(record)} while a "
                        "policy selected the namespace and the kill switch was released "
                        f"(samples at {before[0]:.1f} and {after[0]:.1f})",
                        key=f"del-{record.audit_id}",
                    )
                )
            elif record.verb != "delete" and before[2] is True and after[2] is True:
                self._add(
                    Violation(
                        record.received,
                        "no-delete",
                        ns,
                        f"{record.verb} of quota {record.name} by {self._identify(record)} "
                        "while the kill switch was engaged",
                        key=f"ks-{record.audit_id}",
                    )
                )

    # -- operator writes ---------------------------------------------------------------------

    def operator_writes(self) -> tuple[int, int]:
        """(managed-quota write requests by the operator, of which successful) so far."""
        self.check_audit()
        with self._lock:
            writes = [
                r
                for r in self.records
                if r.user == OPERATOR_USER
                and r.resource == "resourcequotas"
                and r.verb in WRITE_VERBS
            ]
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
        snapshot = self.sample()
        counts = self._counts()
        now = time.time()
        wanted = set(namespaces) if namespaces is not None else None
        out: dict[str, str] = {}
        for ns in snapshot.labels:
            if wanted is not None and ns not in wanted:
                continue
            quota = snapshot.quotas.get(ns)
            if snapshot.kill_switch is True:
                if quota is not None:
                    out[ns] = "kill switch engaged but the managed quota exists"
                continue
            if ns not in snapshot.governing or snapshot.kill_switch is None:
                continue
            policy = snapshot.governing[ns]
            if policy is None or policy.spec is None:
                continue  # frozen
            if quota is None:
                out[ns] = "no managed quota"
                continue
            override = _stamp(quota.annotations, OVERRIDE_EXPIRES_AT)
            for r, profile in policy.spec.resources.items():
                hard = quota.hard.get(r)
                usage = max(counts.get((ns, r), 0), quota.used.get(r, 0))
                target = expected_hard(profile, usage)
                if override is not None and override > now:
                    target = profile.maximum
                if hard is None:
                    out[ns] = f"{r} missing from spec.hard"
                elif hard > profile.maximum and hard > usage:
                    out[ns] = f"{r} hard {hard} above maximum {profile.maximum}"
                elif target > hard:
                    upscaled = _stamp(quota.annotations, last_upscale_key(r)) or 0
                    if override is not None or now >= upscaled + profile.upscale_cooldown:
                        out[ns] = f"{r} hard {hard} < target {target} (usage {usage})"
        return out

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
