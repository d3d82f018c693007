"""``dynquota plan``: what the operator would do now (read-only), with the running release's
settings; the decisions come from :mod:`dynquota.operator.plan`."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from typing import Any

from dynquota.cli.errors import UserError, connect, explain, guard
from dynquota.settings import Settings

__all__ = ["cmd_plan"]


def cmd_plan(args: argparse.Namespace) -> int:
    """Print what the operator would do now (read-only), with the running release's settings.

    The settings come from the release's operator Deployment
    (:mod:`dynquota.operator.release`: found by the chart's labels, narrowed by ``--release``
    and ``--release-namespace``); with ``--local``, or when no release is found (said on the
    first line), from the local ``DYNQUOTA_*`` environment. ``--operator-namespace``
    overrides the operator's own namespace either way. Reads through the operator's own
    kubernetes_asyncio adapters, every request with a timeout. Returns the exit status: 0, or
    1 when a namespace named with ``-n`` does not exist (said on stderr, as ``kubectl get``).

    Raises:
        UserError: several releases match, RBAC refusal, unreachable API, CRD missing.
    """
    from dynquota.operator.plan import build_plan, format_plan

    header, source, settings, snapshot = asyncio.run(_read(args))
    plan = build_plan(snapshot, settings)
    missing: list[str] = []
    if args.namespace:
        plan = plan.only(args.namespace)
        known = {str((n.get("metadata") or {}).get("name")) for n in snapshot.namespaces}
        missing = sorted(set(args.namespace) - known)
    if args.output == "json":
        document = {
            "settings": {
                **source,
                "dryRun": settings.dry_run,
                "namespace": settings.namespace,
                "excludeNamespaces": settings.exclude_namespaces,
                "includeNamespaces": settings.include_namespaces,
                "overrideTTLSeconds": settings.override_ttl,
            },
            "rows": [r.__dict__ for r in plan.rows],
            "notManaged": [n.__dict__ for n in plan.not_managed],
            "otherQuotas": [{**q.__dict__, "hard": dict(q.hard)} for q in plan.other_quotas],
            "companionLimitRanges": [c.__dict__ for c in plan.companions],
            "budgets": [dataclasses.asdict(b) for b in plan.budgets],
        }
        print(json.dumps(document, indent=2))
    else:
        print(format_plan(plan, [*header, ""]))
    for name in missing:  # as kubectl get: the rest is shown, the missing ones are errors
        print(f'dynquota plan: namespace "{name}" not found', file=sys.stderr)
    return 1 if missing else 0


async def _read(args: argparse.Namespace) -> tuple[list[str], dict[str, Any], Settings, Any]:
    """The header lines, the settings' source (for ``-o json``), the settings and the
    cluster snapshot of ``plan``."""
    from dynquota._k8s.errors import ForbiddenError
    from dynquota.operator.plan import read_cluster
    from dynquota.operator.release import (
        ReleaseNotFoundError,
        describe,
        find_release,
        release_settings,
    )

    header: list[str] = []
    source: dict[str, Any] = {}
    async with connect(args.kubeconfig) as api:
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
        snapshot = await guard("reading the cluster (dynamicquotapolicies...)", read_cluster(api))
    return header, source, settings, snapshot
