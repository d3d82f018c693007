"""What ``kubectl dynquota fit`` answers: the report's types (Pure: plain values).

:func:`dynquota.cli.fit_model.evaluate` fills a :class:`FitReport`;
:mod:`dynquota.cli.fit_text` prints it. Quantities are texts as printed
(:func:`dynquota.cli.fit_model.shown`), times RFC 3339 UTC.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Block", "FitReport", "Later", "Row", "Step", "WorkloadFit"]


@dataclass(frozen=True)
class Row:
    """One quota key that one workload's pods are charged to: quantity texts, ``fits`` (how
    many of its pods this key alone admits now; ``None``: no bound) and ``sized`` (dynquota
    sizes the key)."""

    workload: str
    quota: str
    key: str
    hard: str
    used: str
    per_pod: str
    fits: int | None
    sized: bool


@dataclass(frozen=True)
class Later:
    """``pods`` more of a workload fit at ``at`` (RFC 3339)."""

    at: str
    pods: int


@dataclass(frozen=True)
class Block:
    """What holds a workload's remaining pods back: ``quota``, ``key``, the ``reason``
    (:data:`dynquota.policy.fit.BlockReason`), the key's final ``hard`` and ``used`` and the
    ``per_pod`` charge (quantity texts) and a ``message`` for people."""

    quota: str
    key: str
    reason: str
    hard: str
    used: str
    per_pod: str
    message: str


@dataclass(frozen=True)
class WorkloadFit:
    """The answer for one workload: of ``replicas``, ``fits_now``, ``later`` (what each raise
    admits), ``never`` (never under the current policy), ``refused`` (refused whatever the
    room), ``next_refusal`` (the apiserver's answer to its first pod, or claim, that does not
    fit now, from the evaluator), ``blocked_by`` and ``all_fit_at`` (RFC 3339: when its last
    pod fits, the time of the answer when all fit now; ``None``: some never fit); ``surge``:
    the pods its rollout runs above ``replicas``, counted in ``fits_now``, ``later`` and
    ``never``."""

    workload: str
    replicas: int
    fits_now: int
    later: tuple[Later, ...] = ()
    never: int = 0
    refused: str | None = None
    next_refusal: str | None = None
    blocked_by: tuple[Block, ...] = ()
    all_fit_at: str | None = None
    surge: int = 0

    @property
    def pods(self) -> int:
        """The pods asked for: the replicas and a rollout's surge."""
        return self.replicas + self.surge


@dataclass(frozen=True)
class Step:
    """A raise to come: ``at`` (RFC 3339), ``raises`` (``(quota, key, new hard)`` texts) and
    the ``pods`` of each workload it admits."""

    at: str
    raises: tuple[tuple[str, str, str], ...]
    pods: Mapping[str, int]


@dataclass(frozen=True)
class FitReport:
    """Everything ``fit`` prints; :attr:`exit_code` 0 when every pod fits now, else 1."""

    namespace: str
    as_of: str
    workloads: tuple[WorkloadFit, ...]
    rows: tuple[Row, ...]
    steps: tuple[Step, ...]
    not_read: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        """0: every pod of every workload fits now; 1: some fit only later or never."""
        return 0 if all(w.fits_now == w.pods for w in self.workloads) else 1
