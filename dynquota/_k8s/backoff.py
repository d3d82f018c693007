"""Exponential backoff with jitter for retrying Kubernetes API calls."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["Backoff"]


@dataclass
class Backoff:
    """Delays (seconds) for consecutive failures: ``initial * factor**(n-1)``, capped at
    ``maximum``, then jittered to a uniform value in ``[d * (1 - jitter), d]``.

    Call :meth:`next_delay` after each failure and :meth:`reset` after a success.
    ``failures`` counts consecutive failures since the last reset.
    """

    initial: float = 0.5
    maximum: float = 30.0
    factor: float = 2.0
    jitter: float = 0.5
    failures: int = 0
    _random: random.Random = field(default_factory=random.Random, repr=False)

    def next_delay(self) -> float:
        """Record one more failure and return how long to wait before retrying (seconds)."""
        self.failures += 1
        delay = min(self.maximum, self.initial * self.factor ** (self.failures - 1))
        return delay * (1.0 - self.jitter * self._random.random())

    def reset(self) -> None:
        """Forget past failures (the next delay is ``initial`` again)."""
        self.failures = 0
