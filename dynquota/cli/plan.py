"""``dynquota plan``: what the operator would do now (read-only), with the running release's
settings; the decisions come from :mod:`dynquota.operator.plan`."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dynquota.cli.errors import UserError, connect, explain, guard
from dynquota.cli.flags import target_of
from dynquota.cli.output import OutputError, render_document
from dynquota.cli.plan_text import plan_text, stall_lines
from dynquota.cli.risk import at_risk, summary
from dynquota.settings import Settings

if TYPE_CHECKING:
    from dynquota.operator.plan_scope import Scope

__all__ = ["PLAN_API_VERSION", "cmd_plan"]


PLAN_API_VERSION = "plan.dynquota.io/v2"
"""The ``apiVersion`` of ``plan -o json|yaml``: v2 has camelCase field names (``statusUsed``,
``grantedAfter``) and this field; v1 (dynquota 0.2) had snake_case names and no version."""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _document_of(value: Any) -> Any:
    """Plain JSON values of ``value``: dataclasses as objects with camelCase field names,
    mappings with their keys as they are (resource names), sequences as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            _camel(f.name): _document_of(getattr(value, f.name)) for f in dataclasses.fields(value)
        }
    if isinstance(value, Mapping):
        return {str(k): _document_of(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_document_of(v) for v in value]
    return value


def _scope(args: argparse.Namespace) -> Scope:
    """The namespaces ``-n``, ``-l`` and ``-A`` ask for (``-A`` wins, as in kubectl)."""
    from dynquota.operator.plan_scope import Scope

    if getattr(args, "all_namespaces", False):
        return Scope()
    if args.namespace and args.selector is not None:
        raise UserError("-n and -l select namespaces both: give one of them")
    return Scope(tuple(args.namespace or ()), args.selector)


def cmd_plan(args: argparse.Namespace) -> int:
    """Print what the operator would do now (read-only), with the running release's settings.

    The settings come from the release's operator Deployment
    (:mod:`dynquota.operator.release`: found by the chart's labels, narrowed by ``--release``
    and ``--release-namespace``); with ``--local``, or when no release is found (said on the
    first line), from the local ``DYNQUOTA_*`` environment. ``--operator-namespace``
    overrides the operator's own namespace either way. Reads through the operator's own
    kubernetes_asyncio adapters, every request with a timeout; with ``-n``/``-l`` only what
    those namespaces need (:func:`dynquota.operator.plan_scope.read_scope`). ``-o``: the
    table, ``wide`` (with each key's use of its hard and its risk), ``json``/``yaml``
    (:data:`PLAN_API_VERSION`) or ``jsonpath=``; ``--at-risk``: only the keys at risk,
    sorted, and a summary line (:mod:`dynquota.cli.risk`). Returns the exit status: 0, or 1
    when a namespace named with ``-n`` does not exist (said on stderr, as ``kubectl get``).

    Raises:
        UserError: several releases match, RBAC refusal, unreachable API, CRD missing, a
            malformed ``-o`` template.
    """
    from dynquota.operator.plan import build_plan

    scope = _scope(args)
    header, source, settings, (snapshot, in_scope) = asyncio.run(_read(args, scope))
    plan = build_plan(snapshot, settings)
    if in_scope is not None:
        plan = plan.only(in_scope)
    known = {str((n.get("metadata") or {}).get("name")) for n in snapshot.namespaces}
    missing = sorted(set(scope.names) - known)
    shown = len({r.namespace for r in plan.rows} | {n.namespace for n in plan.not_managed})
    risks = at_risk(plan.rows, plan.budgets) if args.at_risk else None
    if args.output in ("table", "wide"):
        wide = args.output == "wide"
        print(plan_text(plan, [*header, ""], wide=wide, risks=risks, shown_namespaces=shown))
    else:
        document: dict[str, Any] = {
            "apiVersion": PLAN_API_VERSION,
            "kind": "Plan",
            "settings": {
                **source,
                "dryRun": settings.dry_run,
                "namespace": settings.namespace,
                "excludeNamespaces": settings.exclude_namespaces,
                "includeNamespaces": settings.include_namespaces,
                "overrideTTLSeconds": settings.override_ttl,
            },
            "rows": _document_of(plan.rows),
            "notManaged": _document_of(plan.not_managed),
            "otherQuotas": _document_of(plan.other_quotas),
            "companionLimitRanges": _document_of(plan.companions),
            "budgets": _document_of(plan.budgets),
            "tarpitted": _document_of(plan.tarpitted),
        }
        if risks is not None:
            document["atRisk"] = [
                {**_document_of(r.row), "risk": r.risk, "use": r.use} for r in risks
            ]
            document["summary"] = summary(risks, shown)
        try:
            sys.stdout.write(render_document(document, args.output))
        except OutputError as exc:
            raise UserError(str(exc)) from exc
    for name in missing:  # as kubectl get: the rest is shown, the missing ones are errors
        print(f'dynquota plan: namespace "{name}" not found', file=sys.stderr)
    return 1 if missing else 0


async def _read(
    args: argparse.Namespace, scope: Scope
) -> tuple[list[str], dict[str, Any], Settings, Any]:
    """The header lines, the settings' source (for ``-o json``), the settings and the
    cluster snapshot of ``plan``."""
    from dynquota._k8s.errors import ForbiddenError
    from dynquota.operator.plan_scope import read_scope
    from dynquota.operator.release import (
        ReleaseNotFoundError,
        describe,
        find_release,
        release_settings,
    )

    header: list[str] = []
    source: dict[str, Any] = {}
    async with connect(target_of(args)) as api:
        if args.local:
            settings = Settings()
            header.append("settings: the local environment (--local, DYNQUOTA_*)")
            source = {"from": "local"}
        else:
            try:
                deployment = await find_release(api, args.release, args.release_namespace)
            except ReleaseNotFoundError as exc:
                if args.release or args.release_namespace:
                    # a release the admin named and that is not there: a typo, not a default
                    raise UserError(f"{exc} (--release/--release-namespace as given)") from exc
                settings = Settings()
                header.append(
                    f"settings: no dynquota release found ({exc}): using the local environment "
                    "(DYNQUOTA_*) instead; --release/--release-namespace to name one"
                )
                source = {"from": "local", "why": str(exc)}
            except ValueError as exc:
                raise UserError(str(exc)) from exc
            except Exception as exc:
                error = explain(exc, "listing deployments (to find the release's settings)")
                if error is None:
                    raise
                forbidden = isinstance(exc, ForbiddenError) and exc.status == 403
                hint = " (or plan with --local settings)" if forbidden else ""
                raise UserError(f"{error}{hint}") from exc
            else:
                release = await guard(
                    "reading the release's settings", release_settings(api, deployment)
                )
                settings = release.settings
                header.append(
                    f"settings: release {release.name}, Deployment "
                    f"{release.namespace}/{release.deployment} (container {release.container}; "
                    f"{release.ready}/{release.replicas} replicas ready"
                    + ("" if release.ready else ": no operator runs now, nothing is written")
                    + ")"
                )
                header += [f"settings: {note}" for note in release.notes]
                source = {
                    "from": "release",
                    "release": release.name,
                    "deployment": f"{release.namespace}/{release.deployment}",
                    "replicas": release.replicas,
                    "readyReplicas": release.ready,
                    "notes": release.notes,
                }
        if args.operator_namespace:
            settings = settings.model_copy(update={"namespace": args.operator_namespace})
        header.append(f"settings: {describe(settings)}")
        snapshot = await guard(
            "reading the cluster (dynamicquotapolicies...)", read_scope(api, scope)
        )
        if settings.tarpit_flow_schema:
            snapshot[0].tarpit_rules, notes = await _tarpit_rules(api, settings.tarpit_flow_schema)
            header += notes
    header += stall_lines(snapshot[0].policies)
    return header, source, settings, snapshot


async def _tarpit_rules(api: Any, name: str) -> tuple[list[Any] | None, list[str]]:
    """The rules of the write-rate governor's tarpit FlowSchema ``name`` and the header lines
    to add (none; or why it could not be read: then no namespace is shown as tarpitted)."""
    from dynquota._k8s.errors import KubeError
    from dynquota.kube.flowschema import FlowSchemaClient

    try:
        return list((await FlowSchemaClient(api).read(name)).rules), []
    except KubeError as exc:
        return None, [f"settings: the tarpit FlowSchema {name} could not be read ({exc})"]
