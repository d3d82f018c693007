"""What quota admission did, read back from the apiserver's audit log.

With ``LocalControlPlane(audit=True, audit_policy=QUOTA_AUDIT_POLICY)`` the audit log holds
every write of a quota's status with its body: each charge of the ResourceQuota admission
plugin (user ``system:apiserver``: it adds the new object to ``status.used`` before admitting
it) and each recount of the quota controller (:func:`by_quota_controller`: its ServiceAccount
``kube-system:resourcequota-controller``, or a user agent ending in
``/resourcequota-controller``), plus every create of a pod or ConfigMap with its answer.

:class:`QuotaLedger` replays them for one quota and one resource. Its use: telling apart what
dynquota decides (``spec.hard``) from what Kubernetes itself admits against it. Upstream, the
quota controller recounts usage from its informer cache and writes it with the resourceVersion
of its (newer) copy of the quota; when its pod informer lags, that recount overwrites a charge
the admission plugin just made, and one more object than ``hard`` is admitted
(kubernetes/kubernetes#123434, pkg/controller/resourcequota/resource_quota_controller.go
``syncResourceQuota``). The ledger names those writes, so a test can assert exact counts and
still say precisely where an extra object came from.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from dynquota.quantity import QuantityError, parse_quantity
from dynquota.testing.audit import AuditLog, AuditRecord

APISERVER_USER = "system:apiserver"
CONTROLLER_AGENT_SUFFIX = "/resourcequota-controller"
"""How the quota controller's user agent ends when kube-controller-manager runs the controllers
with its own credentials (``LocalControlPlane(component_identities=False)``)."""
CONTROLLER_USER = "system:serviceaccount:kube-system:resourcequota-controller"
"""The quota controller's user with ``--use-service-account-credentials`` (the test bed's
default since issue 32; its user agent then ends in ``...:resourcequota-controller``)."""


def by_quota_controller(record: AuditRecord) -> bool:
    """Whether kube-controller-manager's quota controller sent ``record``, with either way of
    running it (its own ServiceAccount or the controller manager's user)."""
    return record.user == CONTROLLER_USER or record.user_agent.endswith(CONTROLLER_AGENT_SUFFIX)


_REFUSED = re.compile(
    r"exceeded quota: [\w.-]+, requested: [\w./-]+=1, used: [\w./-]+=(\d+), "
    r"limited: [\w./-]+=(\d+)"
)


def refused_at(message: str) -> tuple[int, int] | None:
    """``(used, limited)`` from a quota refusal of one object (the ResourceQuota admission
    plugin's "exceeded quota: NAME, requested: R=1, used: R=U, limited: R=L"); None when
    ``message`` holds none."""
    match = _REFUSED.search(message)
    return (int(match.group(1)), int(match.group(2))) if match else None


@dataclass(frozen=True)
class StatusWrite:
    """One successful write of the quota's status.

    ``by`` is ``"admission"`` (a charge of the admission plugin), ``"controller"`` (a recount
    of the quota controller) or ``"other"``; ``hard``/``used`` are ``status.hard``/``status.used``
    of ``resource`` as written (``None`` when absent); times are seconds since the epoch.
    """

    resource_version: int
    by: str
    received: float
    completed: float
    hard: int | None
    used: int | None


@dataclass(frozen=True)
class Create:
    """One create of an object of ``resource`` in the namespace: ``admitted`` (HTTP 201) or not,
    with the apiserver's message (a quota refusal says ``exceeded quota``)."""

    name: str
    received: float
    completed: float
    admitted: bool
    message: str


@dataclass(frozen=True)
class Recount:
    """A quota-controller write that lowered ``status.used`` in a namespace where objects are
    only ever created: ``before`` is the value it overwrote (every charge so far), ``existing``
    the objects whose create had completed when it was received."""

    write: StatusWrite
    before: int
    existing: int

    @property
    def erased(self) -> int:
        """Charges the recount erased: ``before - written`` (> 0); each lets one more object
        in than ``hard`` until a later recount counts it again."""
        return self.before - (self.write.used or 0)


def _int(value: object) -> int | None:
    if value is None:
        return None
    text = str(value)
    return int(text) if text.isdigit() else None


class QuotaLedger:
    """The status writes of one quota and the creates of one resource in one namespace.

    Args:
        records: audit records (any order, others ignored), from
            :class:`~dynquota.testing.audit.AuditLog` with :data:`QUOTA_AUDIT_POLICY`.
        namespace: the namespace.
        resource: the quota key and the API resource, ``"pods"`` or ``"configmaps"``.
        quota: the quota's name.
    """

    def __init__(
        self,
        records: Iterable[AuditRecord],
        namespace: str,
        resource: str = "pods",
        quota: str = "dynquota",
    ) -> None:
        self.namespace = namespace
        self.resource = resource
        writes: list[StatusWrite] = []
        creates: list[Create] = []
        deletes: list[float] = []
        for r in records:
            if r.namespace != namespace or r.stage != "ResponseComplete":
                continue
            if r.resource == "resourcequotas" and r.subresource == "status" and r.name == quota:
                if not _is_status_write(r, namespace, quota):
                    continue
                assert r.response is not None
                status = r.response.get("status") or {}
                if r.user == APISERVER_USER:
                    by = "admission"
                elif by_quota_controller(r):
                    by = "controller"
                else:
                    by = "other"
                writes.append(
                    StatusWrite(
                        resource_version=int(r.response["metadata"]["resourceVersion"]),
                        by=by,
                        received=r.received,
                        completed=r.completed,
                        hard=_int((status.get("hard") or {}).get(resource)),
                        used=_int((status.get("used") or {}).get(resource)),
                    )
                )
            elif "dryRun=" in r.uri:
                continue  # admitted or not, a dry run creates nothing and charges nothing
            elif r.resource == resource and r.verb == "create" and not r.subresource:
                creates.append(Create(r.name, r.received, r.completed, r.code == 201, r.message))
            elif r.resource == resource and r.verb == "delete" and r.code == 200:
                deletes.append(r.completed)
        self.writes = sorted(writes, key=lambda w: w.resource_version)
        self.creates = sorted(creates, key=lambda c: c.received)
        self._deletes = sorted(deletes)

    def admitted(self, until: float = float("inf")) -> int:
        """Creates admitted (answered 201) that completed before ``until``."""
        return sum(1 for c in self.creates if c.admitted and c.completed < until)

    def refused(self) -> list[Create]:
        """Creates refused because the quota was exceeded, in order."""
        return [c for c in self.creates if not c.admitted and "exceeded quota" in c.message]

    def over_hard(self) -> list[StatusWrite]:
        """Admission charges that wrote ``used`` above ``hard`` (the plugin must never)."""
        return [
            w
            for w in self.writes
            if w.by == "admission" and w.used is not None and w.hard is not None and w.used > w.hard
        ]

    def stale_recounts(self) -> list[Recount]:
        """Quota-controller writes that lowered ``used`` (kubernetes/kubernetes#123434), in
        resourceVersion order.

        Raises:
            ValueError: an object of the resource was deleted in the namespace: a lower count
                may then be right, and this replay cannot tell.
        """
        if self._deletes:
            raise ValueError(f"{self.resource} were deleted in {self.namespace}")
        found = []
        before: int | None = None
        for w in self.writes:
            if (
                w.by == "controller"
                and w.used is not None
                and before is not None
                and w.used < before
            ):
                found.append(Recount(w, before, self.admitted(w.received)))
            if w.used is not None:
                before = w.used
        return found

    def uncounted(self, until: float = float("inf")) -> int:
        """Objects that exist but are not in ``status.used`` after the controller writes
        received before ``until``: the net of what each one took off (``before - used``; a later
        correct recount gives it back). Every admission charge adds the object it admits, so in
        a namespace where objects are only created, ``objects == status.used + uncounted()`` at
        any moment, and a quota that refuses at ``hard`` holds ``hard + uncounted()`` objects.

        Raises:
            ValueError: as :meth:`stale_recounts`.
        """
        if self._deletes:
            raise ValueError(f"{self.resource} were deleted in {self.namespace}")
        net = 0
        # the quota's first status (written by the controller when the quota is created) is
        # compared with the creates that had completed: objects made before the quota
        before: int | None = self.admitted(self.writes[0].received) if self.writes else None
        for w in self.writes:
            if w.received >= until:
                break
            if w.by == "controller" and w.used is not None and before is not None:
                net += before - w.used
            if w.used is not None:
                before = w.used
        return net

    def describe(self) -> str:
        """The ledger as text, one line per write or create, for a failure message."""
        lines = []
        events: list[tuple[float, str]] = [
            (
                w.received,
                f"status rv={w.resource_version} by={w.by} hard={w.hard} used={w.used}",
            )
            for w in self.writes
        ]
        events += [
            (c.received, f"create {c.name} {'201' if c.admitted else c.message[:100]}")
            for c in self.creates
        ]
        for at, text in sorted(events):
            lines.append(f"{at:.3f} {text}")
        return "\n".join(lines)


class UpstreamQuotaRaceError(AssertionError):
    """A test's exact assertion failed in a namespace where the quota controller's recount
    lowered ``status.used`` of a key the test counts (kubernetes/kubernetes#123434): quota
    admission then admitted past ``hard``, so the exact values no longer follow from what
    dynquota did. The message holds the failure and the lowering writes. ``make test`` reruns a
    test that raised it (pytest-rerunfailures, ``only_rerun``); any other failure fails."""


@dataclass(frozen=True)
class LoweredUsed:
    """A quota-controller write of ``status.used[key]`` below the value before it (quantities
    as written, e.g. ``"800m"`` after ``"1"``); ``received`` in seconds since the epoch."""

    resource_version: int
    key: str
    before: str
    written: str
    received: float


def lowered_used(
    records: Iterable[AuditRecord],
    namespace: str,
    keys: Iterable[str],
    quota: str = "dynquota",
    since: float = 0.0,
) -> list[LoweredUsed]:
    """The quota controller's status writes received at or after ``since`` (seconds since the
    epoch) that lowered ``status.used`` of any of ``keys`` in ``namespace``, in resourceVersion
    order, compared as quantities (``800m < 1``).

    Where objects are also deleted, a lower recount can be right (replenishment); the caller
    decides what that means. Values that do not parse as quantities are skipped.
    """
    wanted = set(keys)
    writes: list[tuple[int, bool, float, dict[str, str]]] = []
    for r in records:
        if not _is_status_write(r, namespace, quota):
            continue
        assert r.response is not None
        used = (r.response.get("status") or {}).get("used") or {}
        writes.append(
            (
                int(r.response["metadata"]["resourceVersion"]),
                by_quota_controller(r),
                r.received,
                {k: str(v) for k, v in used.items() if k in wanted},
            )
        )
    found: list[LoweredUsed] = []
    last: dict[str, str] = {}
    for rv, by_controller, received, used in sorted(writes, key=lambda w: w[0]):
        for key, value in used.items():
            before = last.get(key)
            if by_controller and received >= since and before is not None and _below(value, before):
                found.append(LoweredUsed(rv, key, before, value, received))
            last[key] = value
    return found


def _is_status_write(r: AuditRecord, namespace: str, quota: str) -> bool:
    """Whether ``r`` is a successful write of quota ``namespace/quota``'s status, with the
    status written (``RequestResponse``)."""
    return (
        r.namespace == namespace
        and r.stage == "ResponseComplete"
        and r.resource == "resourcequotas"
        and r.subresource == "status"
        and r.name == quota
        and r.code == 200
        and bool(r.response)
    )


def _below(value: str, before: str) -> bool:
    try:
        return parse_quantity(value) < parse_quantity(before)
    except QuantityError:
        return False


@contextlib.contextmanager
def upstream_race_explains(
    audit_log: Path, namespace: str, keys: Iterable[str], quota: str = "dynquota"
) -> Iterator[None]:
    """Runs the block; an ``AssertionError`` (a failed assert, a
    :class:`~dynquota.testing.wait.WaitTimeoutError`) raised in it becomes
    :class:`UpstreamQuotaRaceError` when the audit log ``audit_log`` shows the quota controller
    lowering ``status.used`` of any of ``keys`` in ``namespace`` since the block began
    (:func:`lowered_used`); otherwise it propagates unchanged. Only for blocks that create and
    never delete objects charged to ``keys``.
    """
    keys = list(keys)
    since = time.time()
    try:
        yield
    except AssertionError as exc:
        lowered = lowered_used(AuditLog(audit_log).read_new(), namespace, keys, quota, since)
        if not lowered:
            raise
        raise UpstreamQuotaRaceError(
            f"{exc}\n-- the quota controller lowered status.used in {namespace} meanwhile "
            f"(kubernetes#123434): {lowered}"
        ) from exc
