"""Operator settings, from ``DYNQUOTA_*`` environment variables or ``dynquota run`` flags.

Every field is read from the environment variable ``DYNQUOTA_<FIELD>`` (upper case), e.g.
``DYNQUOTA_DRY_RUN=true`` or ``DYNQUOTA_OVERRIDE_TTL=72h``; flags of ``dynquota run`` take
precedence over the environment. The Helm chart renders these variables.
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from dynquota.names import DEFAULT_OVERRIDE_TTL
from dynquota.policy.budget_guard import DEFAULT_GUARDED_KINDS
from dynquota.policy.durations import parse_duration
from dynquota.policy.selection import SYSTEM_NAMESPACES

__all__ = [
    "ENV_PREFIX",
    "RUN_FLAGS",
    "SYSTEM_NAMESPACES",
    "Settings",
    "add_run_flags",
    "flag_overrides",
    "parse_duration_seconds",
]

ENV_PREFIX = "DYNQUOTA_"
"""Prefix of the environment variables read by :class:`Settings`."""


def parse_duration_seconds(value: str | int | float) -> int:
    """Parse a duration such as ``90s``, ``5m``, ``1h30m`` or ``168h`` into whole seconds.

    A bare number (``3600`` or ``"3600"``) is taken as seconds. Raises ``ValueError`` for any
    other text (see :func:`dynquota.policy.durations.parse_duration`), or a duration of zero.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        seconds = int(value)
    elif value.strip().isdigit():
        seconds = int(value.strip())
    else:
        seconds = parse_duration(value.strip())
    if seconds <= 0:
        raise ValueError(f"duration must be positive: {value!r}")
    return seconds


def _comma_list(value: object) -> object:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


class Settings(BaseSettings):
    """All knobs of ``dynquota run``; durations are whole seconds after parsing.

    Fields (environment variable ``DYNQUOTA_<NAME>``): see each field's description. Raises
    ``pydantic.ValidationError`` on a malformed value.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    dry_run: bool = Field(
        False,
        description="enforce nothing: compute and report decisions; the only write is the "
        "release (delete, rate-limited) of managed quotas that exist",
    )
    namespace: str = Field(
        "", description="the operator's own namespace: excluded; holds the leader-election Lease"
    )
    metrics_port: int = Field(8080, ge=0, le=65535, description="Prometheus /metrics; 0: off")
    probe_port: int = Field(8081, ge=0, le=65535, description="liveness /healthz; 0: off")
    override_ttl: int = Field(
        DEFAULT_OVERRIDE_TTL,
        description="tenant override lifetime, seconds (accepts 168h, 90m, ...)",
    )
    quota_sync_period: int = Field(
        300,
        ge=1,
        description="the cluster's kube-controller-manager --resource-quota-sync-period, "
        "seconds (accepts 5m, 10s): a quota key still missing from status.used "
        "2 x (30 s + this) after status.hard shows it is removed (KeyNotCounted); status.used "
        "of pods or configmaps above the informers' count for less than this is taken as "
        "phantom charges (creates that failed after admission) and raises nothing",
    )
    tenant_help_url: str = Field(
        "",
        max_length=512,
        description="help page for tenants, appended to the line on a quota at its limit and "
        "to its QuotaAtLimit Warning; empty: none",
    )
    leader_election: bool = Field(False, description="gate every write on a Lease")
    lease_name: str = Field("dynquota", description="name of the coordination.k8s.io Lease")
    pod_name: str = Field(
        default_factory=socket.gethostname, description="holder identity in the Lease"
    )
    lease_duration_seconds: int = Field(
        15,
        ge=2,
        description="Lease duration; must be >= renew deadline + retry period + 3 s (the "
        "Lease request timeout) and > 10 s (a write's timeout) + retry period + 1 s",
    )
    lease_renew_deadline_seconds: int = Field(
        10, ge=2, description="a leader that has not renewed for this long stops leading"
    )
    lease_retry_period_seconds: int = Field(2, ge=1, description="Lease poll interval")
    watch_timeout_seconds: int = Field(300, ge=1, description="server-side watch timeout")
    liveness_margin_seconds: int = Field(
        60,
        ge=0,
        description="liveness fails after watch timeout + this with no list/watch attempt ended",
    )
    kill_switch_delete_qps: float = Field(
        20.0,
        gt=0,
        description="client-side rate limit of managed-quota deletes (kill switch, "
        "namespaces no longer managed, cleanup), per second",
    )
    wake: bool = Field(
        True,
        description="wake the controllers a quota refused once a raise makes room (the wake "
        "mark dynquota.io/wake on their ReplicaSets, StatefulSets, DaemonSets and Jobs); false: "
        "controllers retry at the end of "
        "their own backoff",
    )
    node_growth: bool = Field(
        True,
        description="give the DaemonSet pods of new nodes room at once, without waiting for "
        "the upscale cooldown (within the policy's maximum; needs wake); false: the usual steps",
    )
    wake_qps: float = Field(
        20.0, gt=0, description="wake marks per second at most, across namespaces"
    )
    unmanage_brake_share: float = Field(
        0.5,
        gt=0,
        description="largest share (0..1) of managed namespaces whose quota deletions because "
        "no policy enforces them any more (deleted, selectors edited, switched to dry run) "
        "pass within the brake window without an admin's confirmation (annotation "
        "dynquota.io/confirm-unmanage on kube-system); >= 1: off",
    )
    unmanage_brake_window_seconds: float = Field(
        600.0,
        gt=0,
        description="the brake's window: deletions passed within it count, seconds",
    )
    exclude_namespaces: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="comma list of namespaces never managed"
    )
    include_namespaces: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="comma list; when set, only these are managed"
    )
    budget_guard_kinds: Annotated[list[str] | None, NoDecode] = Field(
        None,
        description="comma list of the kinds whose CREATE the chart's budget guard holds "
        "back until a budget's slice is enforced (the chart's budgetGuard.kinds; resource or "
        "resource.group; empty: no guard): a budget with a key charging another kind gets "
        "Guarded=False; unset (the operator runs without the chart): Guarded=Unknown. The "
        f"chart's default: {','.join(DEFAULT_GUARDED_KINDS)}",
    )
    budget_guard_name: str | None = Field(
        None,
        description="the name of the chart's budget guard (its ValidatingAdmissionPolicy and "
        "binding, <fullname>-budget-guard; the chart sets it and grants get on both): read "
        "for the budgets' Guarded condition; unset: not read (Guarded is never True)",
    )
    guarded_label_prefixes: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["dynquota.io/"],
        description="comma list of Namespace label key prefixes the chart's governance-labels "
        "policy guards (a policy selecting on another key gets Guarded=False)",
    )
    guarded_label_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="comma list of exact Namespace label keys the chart's guard also covers",
    )
    tarpit_flow_schema: str = Field(
        "",
        description="the write-rate governor's FlowSchema, whose rules list the namespaces "
        "held in the APF tarpit (the chart's <fullname>-tarpit when writeRate.enabled); empty: "
        "the governor is off",
    )
    tarpit_resources: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["pods", "configmaps"],
        description="comma list of the resources the tarpit's rule names (the chart's "
        "writeRate.resources, in its order: its admission policy compares the list)",
    )
    workers: int = Field(4, ge=1, le=64, description="concurrent reconciles (distinct namespaces)")
    resync_seconds: int = Field(
        600, ge=1, description="every namespace is re-queued this often (reads only at rest)"
    )
    coalesce_seconds: float = Field(
        0.25, ge=0, le=10, description="events for a namespace within this window: one decision"
    )
    kubeconfig: str = Field(
        "", description="kubeconfig path; empty: $KUBECONFIG, ~/.kube/config or in-cluster"
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["text", "json"] = "text"

    @field_validator("override_ttl", "quota_sync_period", mode="before")
    @classmethod
    def _duration(cls, value: str | int | float) -> int:
        return parse_duration_seconds(value)

    @field_validator(
        "exclude_namespaces",
        "include_namespaces",
        "budget_guard_kinds",
        "guarded_label_prefixes",
        "guarded_label_keys",
        "tarpit_resources",
        mode="before",
    )
    @classmethod
    def _split(cls, value: object) -> object:
        return _comma_list(value)

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("log_format", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _lease_durations(self) -> Settings:
        # imported here: the elector pulls in the Kubernetes client
        from dynquota._k8s.timeouts import LEASE_REQUEST_TIMEOUT, REQUEST_TIMEOUT
        from dynquota.kube.leader_durations import check_durations

        check_durations(
            self.lease_duration_seconds,
            self.lease_renew_deadline_seconds,
            self.lease_retry_period_seconds,
            LEASE_REQUEST_TIMEOUT,
            write_timeout=REQUEST_TIMEOUT,
        )
        return self

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> tuple[Settings, list[str]]:
        """Settings from exactly the ``DYNQUOTA_*`` variables of ``env`` (e.g. a Deployment's
        container env), as the operator would read them, *without* the process environment.

        Names are matched case-insensitively, like the environment source. Returns the
        settings and the names of ``DYNQUOTA_*`` variables that are no setting (ignored; the
        operator would refuse them). Raises ``pydantic.ValidationError`` on a malformed value.
        """
        values: dict[str, str] = {}
        unknown: list[str] = []
        for name, value in env.items():
            if not name.upper().startswith(ENV_PREFIX):
                continue
            field = name[len(ENV_PREFIX) :].lower()
            if field in cls.model_fields:
                values[field] = value
            else:
                unknown.append(name)
        return _ExplicitSettings(**values), unknown  # type: ignore[arg-type]

    def excluded(self, namespace: str) -> bool:
        """Whether ``namespace`` is never managed (system, own, excluded or not included)."""
        if namespace in SYSTEM_NAMESPACES or namespace in self.exclude_namespaces:
            return True
        if self.namespace and namespace == self.namespace:
            return True
        return bool(self.include_namespaces) and namespace not in self.include_namespaces


class _ExplicitSettings(Settings):
    """:class:`Settings` read from the constructor's arguments only (no environment)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


_TRUE: dict[str, Any] = {"action": "store_true", "default": None}

RUN_FLAGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--kubeconfig", {"help": "kubeconfig path (default: $KUBECONFIG or in-cluster)"}),
    (
        "--dry-run",
        {
            **_TRUE,
            "help": "enforce nothing: release (delete) the managed quotas and only report "
            "what would be sized; to preview without any write use `dynquota plan`",
        },
    ),
    ("--namespace", {"help": "the operator's own namespace (excluded; Lease home)"}),
    ("--exclude-namespaces", {"help": "comma list of namespaces never managed"}),
    ("--include-namespaces", {"help": "comma list: manage only these"}),
    ("--metrics-port", {"type": int, "help": "Prometheus /metrics port (0: off)"}),
    ("--probe-port", {"type": int, "help": "liveness /healthz port (0: off)"}),
    ("--override-ttl", {"help": "tenant override lifetime, e.g. 168h"}),
    ("--leader-election", {**_TRUE, "help": "gate writes on a Lease"}),
    ("--lease-name", {"help": "name of the Lease"}),
    ("--pod-name", {"help": "identity in the Lease (default: hostname)"}),
    ("--watch-timeout-seconds", {"type": int, "help": "server-side watch timeout"}),
    ("--kill-switch-delete-qps", {"type": float, "help": "kill-switch delete rate"}),
    ("--resync-seconds", {"type": int, "help": "re-queue every namespace this often"}),
    ("--log-level", {"help": "DEBUG, INFO, WARNING or ERROR"}),
    ("--log-format", {"help": "text or json"}),
)
"""The flags of ``dynquota run``: ``(flag, argparse keyword arguments)``; each flag is the
:class:`Settings` field of its name (``--dry-run`` -> ``dry_run``). Defined here, below the
CLI, so that ``dynquota plan`` (:mod:`dynquota.operator.release`) reads a running release's
container ``args`` with the very parser ``dynquota run`` uses. Not generated by
pydantic-settings' CLI source: see docs/architecture.md ("The run flags")."""


def add_run_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add :data:`RUN_FLAGS` to ``parser`` (the ``run`` subcommand's); returns it. Every
    flag defaults to ``None`` (not given: the environment decides)."""
    for flag, options in RUN_FLAGS:
        parser.add_argument(flag, **options)
    return parser


def flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`Settings` fields the parsed ``run`` flags ``args`` set (flags not given,
    ``None``, left out), as ``{field: value}``."""
    return {
        key: value
        for key, value in vars(args).items()
        if key in Settings.model_fields and value is not None
    }
