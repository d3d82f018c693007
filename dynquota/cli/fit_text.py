"""How ``kubectl dynquota fit`` prints its answer (Pure): the text and the ``-o json|yaml``
document of a :class:`~dynquota.cli.fit_report.FitReport`.

The text: the namespace and the time of the answer; one line per quota key a workload's
replicas are charged to (``HARD``, ``USED``, ``PER POD``: what one replica charges, its pod
and the claims it may need; ``FITS NOW``: how many of them that key alone admits now,
``SIZED BY``); then per workload how many fit now (of its replicas and, rolling out, its
surge), ``N more at <RFC 3339> (raise dynquota pods to H)`` for each raise that admits some,
and what holds the rest back; then what could not be read and the notes. The document
(:data:`FIT_API_VERSION`) carries the same, camelCase.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from dynquota.cli.fit_report import FitReport, Step, WorkloadFit
from dynquota.cli.output import columns

__all__ = ["FIT_API_VERSION", "fit_document", "fit_text"]

FIT_API_VERSION: Final = "fit.dynquota.io/v1"
"""The ``apiVersion`` of ``fit -o json|yaml``."""


def _raises(step: Step | None) -> str:
    if step is None or not step.raises:
        return ""
    parts = [f"{quota} {key} to {hard}" for quota, key, hard in step.raises]
    return f" (raise {', '.join(parts)})"


def _workload_lines(fit: WorkloadFit, steps: dict[str, Step]) -> list[str]:
    surge = f" and {fit.surge} more while it rolls out (maxSurge)" if fit.surge else ""
    lines = [f"{fit.workload}: {fit.replicas} pods{surge}, {fit.fits_now} fit now"]
    if fit.refused is not None:
        lines.append(f"  none is ever admitted: {fit.refused}")
        return lines
    for later in fit.later:
        lines.append(f"  {later.pods} more at {later.at}{_raises(steps.get(later.at))}")
    if fit.later and fit.all_fit_at is not None:
        lines.append(f"  all fit at {fit.all_fit_at}")
    if fit.never:
        lines.append(f"  {fit.never} never fit under the current policy, held back by:")
        lines += [f"    {b.message}" for b in fit.blocked_by]
    if fit.next_refusal is not None:
        lines.append(f"  the next pod now: {fit.next_refusal}")
    return lines


def fit_text(report: FitReport) -> str:
    """The text of ``report`` (module docs)."""
    lines = [f"namespace: {report.namespace} (as of {report.as_of})"]
    several = len(report.workloads) > 1
    if report.rows:
        head = ["QUOTA", "KEY", "HARD", "USED", "PER POD", "FITS NOW", "SIZED BY"]
        table = [(["WORKLOAD"] if several else []) + head]
        for row in report.rows:
            cells = [row.quota, row.key, row.hard, row.used, row.per_pod]
            cells += ["-" if row.fits is None else str(row.fits)]
            cells += ["dynquota" if row.sized else "-"]
            table.append(([row.workload] if several else []) + cells)
        lines.append(columns(table))
    else:
        lines.append("no quota of the namespace limits these pods")
    steps = {s.at: s for s in report.steps}
    for fit in report.workloads:
        lines += _workload_lines(fit, steps)
    for what, why in report.not_read:
        lines.append(f"not read: {what}: {why}")
    lines += [f"note: {note}" for note in report.notes]
    return "\n".join(lines)


def _camel(value: Any, *leave: str) -> dict[str, Any]:
    """A dataclass's fields as a camelCase object, without the fields named in ``leave``."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        if f.name not in leave:
            head, *rest = f.name.split("_")
            out[head + "".join(p.title() for p in rest)] = getattr(value, f.name)
    return out


def _sized(sized: bool) -> str | None:
    return "dynquota" if sized else None


def fit_document(report: FitReport) -> dict[str, Any]:
    """The ``-o json|yaml`` document of ``report`` (module docs)."""
    total = sum(w.pods for w in report.workloads)
    now = sum(w.fits_now for w in report.workloads)
    never = sum(w.never for w in report.workloads)
    ends = [w.all_fit_at for w in report.workloads if w.all_fit_at is not None]
    complete = len(ends) == len(report.workloads)
    return {
        "apiVersion": FIT_API_VERSION,
        "kind": "Fit",
        "namespace": report.namespace,
        "asOf": report.as_of,
        "summary": {
            "replicas": sum(w.replicas for w in report.workloads),
            "surge": sum(w.surge for w in report.workloads),
            "fitsNow": now,
            "fitsLater": total - now - never,
            "never": never,
            "allFitAt": (max(ends) if ends else report.as_of) if complete else None,
        },
        "workloads": [
            {
                "workload": w.workload,
                "replicas": w.replicas,
                "surge": w.surge,
                "fitsNow": w.fits_now,
                "later": [{"at": x.at, "pods": x.pods} for x in w.later],
                "never": w.never,
                "refused": w.refused,
                "nextRefusal": w.next_refusal,
                "blockedBy": [_camel(b) for b in w.blocked_by],
                "allFitAt": w.all_fit_at,
            }
            for w in report.workloads
        ],
        "quotas": [
            {**_camel(r, "sized", "fits"), "fitsNow": r.fits, "sizedBy": _sized(r.sized)}
            for r in report.rows
        ],
        "schedule": [
            {
                "at": s.at,
                "raises": [{"quota": q, "key": k, "hard": h} for q, k, h in s.raises],
                "pods": dict(s.pods),
            }
            for s in report.steps
        ],
        "notRead": [{"what": what, "why": why} for what, why in report.not_read],
        "notes": list(report.notes),
    }
