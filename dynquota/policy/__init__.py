"""Policies, policy selection and sizing decisions (Pure: no I/O, ``now`` passed in).

- :mod:`~dynquota.policy.models`: pydantic models of the DynamicQuotaPolicy spec, label
  selectors, :func:`validate_policy`;
- :mod:`~dynquota.policy.selection`: excluded namespaces and which policy governs a namespace;
- :mod:`~dynquota.policy.state`: annotation names, RFC 3339 times, the kill switch;
- :mod:`~dynquota.policy.decide`: :func:`decide`, the one sizing function;
- :mod:`~dynquota.policy.keys` and :mod:`~dynquota.policy.units`: which quota keys are counted,
  and the integer unit each is sized in;
- :mod:`~dynquota.policy.durations`: ``90s``/``5m``/``1h30m`` durations.

The rules as implemented, and how their open points were settled: ``docs/sizing.md``.
"""

from dynquota.names import DEFAULT_OVERRIDE_TTL
from dynquota.policy.decide import decide
from dynquota.policy.decision import (
    RECURRING_REASONS,
    Action,
    Change,
    ChangeKind,
    Decision,
    Event,
    QuotaState,
    apply_decision,
    ceil_div,
    hard_text,
    observed_usage,
    target,
)
from dynquota.policy.durations import (
    DURATION_PATTERN,
    MAX_DURATION_SECONDS,
    format_duration,
    parse_duration,
)
from dynquota.policy.keyrules import DEFAULT_NOT_COUNTED_AFTER, not_counted_after
from dynquota.policy.keys import KeyInfo, QuotaKeyError, classify, classify_static
from dynquota.policy.limitrange import CONTAINER_RESOURCES, ContainerDefaults
from dynquota.policy.models import (
    CONFIGMAPS,
    DEFAULT_PROFILES,
    PODS,
    TRACKED_RESOURCES,
    DynamicQuotaPolicySpec,
    LabelSelector,
    LabelSelectorRequirement,
    OverrideSettings,
    PolicyInfo,
    ResourceProfile,
    describe_validation_error,
    validate_label_key,
    validate_label_value,
    validate_policy,
)
from dynquota.policy.override import reject_unmanaged_override
from dynquota.policy.profiles import resource_order
from dynquota.policy.selection import (
    MANAGED_LABEL,
    SYSTEM_NAMESPACES,
    Exclusion,
    Governance,
    GovernanceKind,
    NamespaceInfo,
    govern,
    managed_label_warning,
    namespace_exclusion,
    policy_rank,
)
from dynquota.policy.state import (
    ANNOTATION_PREFIX,
    KILL_SWITCH,
    OVERRIDE,
    OVERRIDE_ENDED_AT,
    OVERRIDE_EXPIRES_AT,
    OVERRIDE_GRANTED_AT,
    POLICY,
    TENANT_MESSAGE,
    KillSwitchReading,
    KillSwitchState,
    format_time,
    hard_key,
    last_change_key,
    last_upscale_key,
    parse_kill_switch,
    parse_time,
    profile_key,
    resolve_kill_switch,
    resource_keys,
)
from dynquota.policy.units import KeyUnit, unit_for

__all__ = [
    "ANNOTATION_PREFIX",
    "CONFIGMAPS",
    "CONTAINER_RESOURCES",
    "DEFAULT_NOT_COUNTED_AFTER",
    "DEFAULT_OVERRIDE_TTL",
    "DEFAULT_PROFILES",
    "DURATION_PATTERN",
    "KILL_SWITCH",
    "MANAGED_LABEL",
    "MAX_DURATION_SECONDS",
    "OVERRIDE",
    "OVERRIDE_ENDED_AT",
    "OVERRIDE_EXPIRES_AT",
    "OVERRIDE_GRANTED_AT",
    "PODS",
    "POLICY",
    "RECURRING_REASONS",
    "SYSTEM_NAMESPACES",
    "TENANT_MESSAGE",
    "TRACKED_RESOURCES",
    "Action",
    "Change",
    "ChangeKind",
    "ContainerDefaults",
    "Decision",
    "DynamicQuotaPolicySpec",
    "Event",
    "Exclusion",
    "Governance",
    "GovernanceKind",
    "KeyInfo",
    "KeyUnit",
    "KillSwitchReading",
    "KillSwitchState",
    "LabelSelector",
    "LabelSelectorRequirement",
    "NamespaceInfo",
    "OverrideSettings",
    "PolicyInfo",
    "QuotaKeyError",
    "QuotaState",
    "ResourceProfile",
    "apply_decision",
    "ceil_div",
    "classify",
    "classify_static",
    "decide",
    "describe_validation_error",
    "format_duration",
    "format_time",
    "govern",
    "hard_key",
    "hard_text",
    "last_change_key",
    "last_upscale_key",
    "managed_label_warning",
    "namespace_exclusion",
    "not_counted_after",
    "observed_usage",
    "parse_duration",
    "parse_kill_switch",
    "parse_time",
    "policy_rank",
    "profile_key",
    "reject_unmanaged_override",
    "resolve_kill_switch",
    "resource_keys",
    "resource_order",
    "target",
    "unit_for",
    "validate_label_key",
    "validate_label_value",
    "validate_policy",
]
