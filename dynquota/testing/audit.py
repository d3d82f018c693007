"""The local apiserver's audit log: the policies it is written with, its records, a reader.

``LocalControlPlane(audit=True)`` writes the log with :data:`AUDIT_POLICY` (or another policy,
e.g. :data:`QUOTA_AUDIT_POLICY`); :class:`AuditLog` reads it incrementally into
:class:`AuditRecord` values. Used by the invariant checker, the quota-admission audit and the
tests that ask who wrote what.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["AUDIT_POLICY", "QUOTA_AUDIT_POLICY", "AuditLog", "AuditRecord"]

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
