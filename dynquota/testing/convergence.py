"""Where the operator should have brought each namespace by now (pure).

:func:`unconverged` compares one :class:`~dynquota.testing.invariant_rules.ClusterSample` with
the counted objects; :meth:`dynquota.testing.invariants.InvariantChecker.wait_converged` waits
until it is empty.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from dynquota.policy.state import OVERRIDE_EXPIRES_AT, last_upscale_key
from dynquota.testing.invariant_rules import ClusterSample, expected_hard, stamp_of

__all__ = ["unconverged"]


def unconverged(
    sample: ClusterSample,
    counts: Mapping[tuple[str, str], int],
    now: float,
    namespaces: Iterable[str] | None = None,
) -> dict[str, str]:
    """Namespaces of ``sample`` (all, or ``namespaces``) not yet where their stamps let them
    be at ``now`` (seconds since the epoch), with why; ``counts`` maps ``(namespace,
    resource)`` to the objects counted (non-terminal pods, ConfigMaps). See
    :meth:`dynquota.testing.invariants.InvariantChecker.unconverged`."""
    wanted = set(namespaces) if namespaces is not None else None
    out: dict[str, str] = {}
    for ns in sample.labels:
        if wanted is not None and ns not in wanted:
            continue
        quota = sample.quotas.get(ns)
        if sample.kill_switch is True:
            if quota is not None:
                out[ns] = "kill switch engaged but the managed quota exists"
            continue
        if ns not in sample.governing or sample.kill_switch is None:
            continue
        policy = sample.governing[ns]
        if policy is None or policy.spec is None:
            continue  # frozen
        if quota is None:
            out[ns] = "no managed quota"
            continue
        override = stamp_of(quota.annotations, OVERRIDE_EXPIRES_AT)
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
                upscaled = stamp_of(quota.annotations, last_upscale_key(r)) or 0
                if override is not None or now >= upscaled + profile.upscale_cooldown:
                    out[ns] = f"{r} hard {hard} < target {target} (usage {usage})"
    return out
