"""Cooldown durations: the Go-style subset ``90s``, ``5m``, ``1h30m`` (Pure).

Grammar (the CRD's ``pattern``): optional ``<int>h``, then optional ``<int>m``, then optional
``<int>s``, in that order, at least one present, integers only. ``0s`` is zero. Values are whole
seconds. Upper bound: :data:`MAX_DURATION_SECONDS` (one year), so that every timestamp derived
from a cooldown stays a valid RFC 3339 date.
"""

from __future__ import annotations

import math
import re
from typing import Final

__all__ = [
    "DURATION_MESSAGE",
    "DURATION_PATTERN",
    "MAX_DURATION_SECONDS",
    "format_duration",
    "parse_duration",
    "rough_duration",
]

DURATION_PATTERN: Final = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"
"""The duration pattern, as in the CRD (RE2 and Python agree on it); empty text is refused."""
MAX_DURATION_SECONDS: Final = 8760 * 3600
"""Longest accepted duration: 8760h (365 days)."""

_DURATION: Final = re.compile(r"(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?")
_DAYS: Final = re.compile(r"([0-9]{1,4})d")
DURATION_MESSAGE: Final = (
    "must be whole hours, minutes and seconds in that order, like 90s, 5m, 1h30m or 24h "
    "(no days: 1d is 24h; no decimals, spaces or signs)"
)
"""What the CRD says when a duration does not match :data:`DURATION_PATTERN` (a unit test
keeps the CRD's messages equal to it)."""


def parse_duration(text: str) -> int:
    """Whole seconds of a duration such as ``90s``, ``5m``, ``1h30m``, ``0s``.

    Raises:
        ValueError: not a string, empty, another unit or order (``1.5h``, ``5m1h``, ``1d``,
            ``300``), or longer than 8760h. The message quotes the input (and for ``<n>d``
            says the hours to write instead).
    """
    if not isinstance(text, str):
        raise ValueError(f"must be a duration string like 90s, 5m or 1h30m, not {text!r}")
    match = _DURATION.fullmatch(text)
    if not text or match is None:
        days = _DAYS.fullmatch(text)
        hint = f" (write {int(days.group(1)) * 24}h)" if days else ""
        raise ValueError(
            f"invalid duration {text!r}: expected whole hours, minutes and seconds in that "
            f"order, like 90s, 5m or 1h30m{hint}"
        )
    hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total > MAX_DURATION_SECONDS:
        raise ValueError(f"invalid duration {text!r}: longer than 8760h")
    return total


def format_duration(seconds: int) -> str:
    """Shortest text of a whole number of seconds: 3600 -> ``1h``, 5400 -> ``1h30m``, 0 -> ``0s``.

    ``parse_duration(format_duration(s)) == s`` for ``0 <= s <= MAX_DURATION_SECONDS``.
    Raises ``ValueError`` for a negative number.
    """
    if seconds < 0:
        raise ValueError(f"negative duration: {seconds}")
    if seconds == 0:
        return "0s"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{hours}h" if hours else "",
        f"{minutes}m" if minutes else "",
        f"{secs}s" if secs else "",
    ]
    return "".join(parts)


_ROUGH: Final = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800)
"""The steps of :func:`rough_duration` (seconds): few, so a text built on it changes rarely."""


def rough_duration(seconds: float) -> str:
    """A forecast's duration in coarse steps: ``under a minute``, else ``about`` the nearest
    step on a log scale (1m, 2m, 5m, 10m, 15m, 30m, 1h, 2h, 3h, 6h, 12h, 24h, 48h) or ``over
    48h``. A text that embeds it (the tenant line) changes about a dozen times in two days."""
    if seconds < 45:
        return "under a minute"
    if seconds > 1.5 * _ROUGH[-1]:
        return f"over {format_duration(_ROUGH[-1])}"
    step = min(_ROUGH, key=lambda s: abs(math.log(seconds / s)))
    return f"about {format_duration(step)}"
