"""The invariant checker's rules over the apiserver's audit log (pure): invariant (iv), one
writer at a time under the Lease, and invariant (i) for writes the samples alone cannot see
(see :mod:`dynquota.testing.invariants`). The sample rules are in
:mod:`dynquota.testing.invariant_rules`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final

from dynquota.testing.audit import AuditRecord
from dynquota.testing.invariant_rules import Violation
from dynquota.testing.operator import OPERATOR_NS, OPERATOR_SA

__all__ = ["OPERATOR_USER", "History", "audit_no_delete", "is_operator_write", "single_writer"]

OPERATOR_USER: Final = f"system:serviceaccount:{OPERATOR_NS}:{OPERATOR_SA}"
WRITE_VERBS: Final = frozenset({"create", "update", "patch", "delete"})


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


def is_operator_write(record: AuditRecord) -> bool:
    """Whether ``record`` is a managed-quota write request by the operator (any answer)."""
    return (
        record.user == OPERATOR_USER
        and record.resource == "resourcequotas"
        and record.verb in WRITE_VERBS
    )


History = Sequence[tuple[float, frozenset[str], bool | None]]
"""The samples so far: (time, protected namespaces, kill switch), oldest first."""


def audit_no_delete(
    candidates: Iterable[AuditRecord],
    history: History,
    identify: Callable[[AuditRecord], str | None],
) -> tuple[list[Violation], list[AuditRecord]]:
    """Invariant (i) from the audit log: the successful operator writes among ``candidates``
    bracketed by samples of ``history``, a delete of a quota protected in both samples, or any
    other write while the kill switch was engaged in both. Returns the violations and the
    records no sample follows yet (to look at again later)."""
    found: list[Violation] = []
    unbracketed: list[AuditRecord] = []
    for record in candidates:
        before = next((h for h in reversed(history) if h[0] <= record.received), None)
        after = next((h for h in history if h[0] >= record.completed), None)
        if after is None:
            unbracketed.append(record)  # looked at again once sampled after it
            continue
        if before is None:
            continue
        ns = record.namespace
        if record.verb == "delete" and ns in before[1] and ns in after[1]:
            found.append(
                Violation(
                    record.received,
                    "no-delete",
                    ns,
                    f"delete of quota {record.name} by {identify(record)} while a "
                    "policy selected the namespace and the kill switch was released "
                    f"(samples at {before[0]:.1f} and {after[0]:.1f})",
                    key=f"del-{record.audit_id}",
                )
            )
        elif record.verb != "delete" and before[2] is True and after[2] is True:
            found.append(
                Violation(
                    record.received,
                    "no-delete",
                    ns,
                    f"{record.verb} of quota {record.name} by {identify(record)} "
                    "while the kill switch was engaged",
                    key=f"ks-{record.audit_id}",
                )
            )
    return found, unbracketed
