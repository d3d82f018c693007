"""The companion LimitRanges of ``dynquota plan`` (pure): what the reconcile does with a
namespace's LimitRanges before adding a compute key, by the same rules
(:mod:`dynquota.policy.companion`, which :class:`~dynquota.operator.companion.Companions`
follows).

:func:`companion_of` is the state of a namespace's companion LimitRange ``dynquota`` (in
place, would be created or patched, foreign, dry run, left over);
:func:`missing_defaults` the compute keys the operator holds (``NeedsDefaultRequests``) for
want of a LimitRange default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dynquota.kube.quotas import QuotaSnapshot
from dynquota.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE, MANAGED_LIMIT_RANGE_NAME
from dynquota.operator.plan_model import Companion
from dynquota.policy import Governance
from dynquota.policy.companion import CompanionStep, companion_step, trapped_keys
from dynquota.policy.companion import missing_defaults as uncovered
from dynquota.policy.limitrange import ContainerDefaults

__all__ = ["companion_of", "missing_defaults"]


def missing_defaults(
    governance: Governance,
    quota: QuotaSnapshot | None,
    items: Sequence[Mapping[str, Any]],
    companion: Companion | None,
) -> frozenset[str]:
    """The policy's compute keys (the compute trap) not in the quota yet that no LimitRange
    of the namespace (``items``) gives a default for, counting the companion as the
    reconcile does once it is in place or written (``Companions.missing_defaults``)."""
    if governance.kind != "managed":
        return frozenset()
    trapped = trapped_keys(governance.profiles, quota.spec_hard if quota is not None else {})
    in_place = companion is not None and companion.state in ("in place", "create", "patch")
    return uncovered(trapped, items, governance.container_defaults if in_place else None)


def companion_of(
    namespace: str,
    defaults: ContainerDefaults | None,
    items: Sequence[Mapping[str, Any]],
    *,
    dry_run: bool,
    kill_switch: bool | None,
) -> Companion | None:
    """The state of ``namespace``'s companion LimitRange given the ``defaults`` its managing
    policy asks for (``None``: not managed), as ``Companions`` would find and write it
    (:func:`~dynquota.policy.companion.companion_step`, the write allowed while the kill switch
    is released); ``None`` when there is none and none is asked for."""
    step = companion_step(defaults, items, dry_run=dry_run, may_write=kill_switch is False)
    return _shown(namespace, defaults, step)


def _shown(
    namespace: str, defaults: ContainerDefaults | None, step: CompanionStep
) -> Companion | None:
    """How the plan says ``step``."""
    found = step.found
    if step.step == "none":
        return None
    if step.step == "left over":
        assert found is not None
        stored = _limits_text((found.get("spec") or {}).get("limits"))
        return Companion(
            namespace,
            "left over",
            stored,
            "dynquota's, but no policy asks for defaults here; dynquota never deletes it "
            "(dynquota cleanup --limit-ranges removes it)",
        )
    assert defaults is not None
    text = _limits_text([defaults.limits_item()])
    action = "create" if found is None else "patch"
    if step.step == "foreign":
        return Companion(
            namespace,
            "foreign",
            text,
            f"a LimitRange {MANAGED_LIMIT_RANGE_NAME} without the label {MANAGED_BY_LABEL}="
            f"{MANAGED_BY_VALUE} exists: never written (Warning ForeignLimitRange); the "
            "compute keys its own defaults do not cover stay held",
        )
    if step.step == "in place":
        return Companion(namespace, "in place", text, "holds the policy's defaults")
    if step.step == "dry run":
        return Companion(
            namespace, "not written", text, f"dry run: would {action} it; compute keys held"
        )
    if step.step == "held":
        return Companion(
            namespace, "not written", text, f"kill switch engaged: would {action} it once released"
        )
    return Companion(
        namespace,
        action,
        text,
        "the operator writes it, then adds the compute keys it covers"
        if found is None
        else "its defaults differ from the policy's: patched in place",
    )


def _limits_text(limits: object) -> str:
    """A LimitRange's ``spec.limits`` (Container items) as ``defaultRequest cpu=100m;
    default cpu=1``."""
    parts: list[str] = []
    for item in limits if isinstance(limits, list) else []:
        if not isinstance(item, Mapping) or item.get("type") != "Container":
            continue
        for field_name in ("defaultRequest", "default"):
            values = item.get(field_name) or {}
            if isinstance(values, Mapping) and values:
                parts.append(
                    f"{field_name} " + ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
                )
    return "; ".join(parts) or "-"
