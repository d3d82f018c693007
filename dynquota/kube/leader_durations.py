"""The leader elector's durations and the rules they must satisfy (pure).

:func:`check_durations` is what :class:`dynquota.kube.leader.LeaderGate` and the operator's
settings validate ``lease_duration``, ``renew_deadline``, ``retry_period`` and the Lease
request timeout with (client-go's ``NewLeaderElector`` checks, plus ours for the time fence).
"""

from __future__ import annotations

__all__ = ["JITTER", "SAFETY_MARGIN", "check_durations"]

JITTER = 0.2
"""A candidate waits ``retry_period * (1 + JITTER * random())`` between attempts."""
SAFETY_MARGIN = 1.0
"""Seconds leadership ends before ``send_time + lease_duration`` (clock-rate drift)."""


def check_durations(
    lease_duration: float,
    renew_deadline: float,
    retry_period: float,
    request_timeout: float,
    write_timeout: float | None = None,
) -> None:
    """Validate the elector's durations (seconds).

    Requires ``retry_period > 0``, ``request_timeout > 0``, ``renew_deadline > JITTER-scaled
    retry_period`` (client-go: ``renewDeadline > 1.2 * retryPeriod``), ``lease_duration >
    SAFETY_MARGIN`` and ``lease_duration >= renew_deadline + retry_period + request_timeout``:
    the leader's last renew, started just before the renew deadline, is answered (or timed
    out) before a candidate may take over. With ``write_timeout`` (the longest write gated by
    :meth:`LeaderGate.can_write`) also ``lease_duration > write_timeout + retry_period +
    SAFETY_MARGIN``: otherwise the window left after a renewal is never long enough for a
    write to start, and the leader never writes.

    Raises ``ValueError`` naming the violated rule and the values.
    """
    if retry_period <= 0 or request_timeout <= 0:
        raise ValueError(
            f"retry period ({retry_period:g} s) and request timeout ({request_timeout:g} s) "
            "must be positive"
        )
    if renew_deadline <= (1 + JITTER) * retry_period:
        raise ValueError(
            f"renew deadline ({renew_deadline:g} s) must be greater than "
            f"{1 + JITTER:g} x retry period ({retry_period:g} s)"
        )
    if lease_duration <= SAFETY_MARGIN:
        raise ValueError(f"lease duration ({lease_duration:g} s) must exceed {SAFETY_MARGIN:g} s")
    needed = renew_deadline + retry_period + request_timeout
    if lease_duration < needed:
        raise ValueError(
            f"lease duration ({lease_duration:g} s) must be >= renew deadline "
            f"({renew_deadline:g} s) + retry period ({retry_period:g} s) + Lease request "
            f"timeout ({request_timeout:g} s) = {needed:g} s"
        )
    if write_timeout is not None:
        shortest = write_timeout + retry_period + SAFETY_MARGIN
        if lease_duration <= shortest:
            raise ValueError(
                f"lease duration ({lease_duration:g} s) must be greater than the write timeout "
                f"({write_timeout:g} s) + retry period ({retry_period:g} s) + {SAFETY_MARGIN:g} s"
                f" = {shortest:g} s: a write starts only while the Lease stays valid for its "
                "whole timeout"
            )
