"""``dynquota override`` and ``dynquota kill-switch``: an admin's annotations, written through
the operator's own kubernetes_asyncio adapters (every request with the short timeout of
:mod:`dynquota._k8s.timeouts`; merge-patches sent with ``fieldManager=dynquota-cli``)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from dynquota.cli.errors import FIELD_MANAGER, UserError, connect, guard
from dynquota.cli.flags import target_of
from dynquota.cli.output import OutputError, render_document

__all__ = ["KILL_SWITCH_API_VERSION", "cmd_kill_switch", "cmd_override"]

KILL_SWITCH_API_VERSION = "killswitch.dynquota.io/v1"
"""The ``apiVersion`` of ``kill-switch status -o json|yaml``."""

_MERGE_PATCH = "application/merge-patch+json"


async def _patch_annotations(
    api: Any, resource: str, namespace: str | None, name: str, annotations: dict[str, Any]
) -> None:
    """Merge-patch ``metadata.annotations`` of a ResourceQuota (``namespace``) or a Namespace
    (``namespace`` ``None``); a ``None`` value removes the key. Raises ``ApiError``,
    ``TransportError``."""
    from kubernetes_asyncio import client

    from dynquota._k8s.request import call_api

    core: Any = client.CoreV1Api(api)
    body = {"metadata": {"annotations": annotations}}
    options = {"field_manager": FIELD_MANAGER, "_content_type": _MERGE_PATCH}
    if namespace is None:
        await call_api(
            "patch",
            resource,
            lambda t: core.patch_namespace(name, body, _request_timeout=t, **options),
        )
    else:
        await call_api(
            "patch",
            resource,
            lambda t: core.patch_namespaced_resource_quota(
                name, namespace, body, _request_timeout=t, **options
            ),
        )


def cmd_override(args: argparse.Namespace) -> int:
    """Request (or with --off cancel) the tenant override on NAMESPACE's managed quota."""
    from dynquota.names import MANAGED_QUOTA_NAME

    expires = asyncio.run(_override(args))
    if args.off:
        print(f"override cancelled in {args.namespace}: sizing resumes from peak usage")
    else:
        note = f" (already granted until {expires})" if expires else ""
        print(
            f"override requested in {args.namespace}: every tracked resource to its maximum{note}"
            f" for the configured TTL; the grant (or why not) is an Event: kubectl -n "
            f"{args.namespace} get events --field-selector involvedObject.name="
            f"{MANAGED_QUOTA_NAME}"
        )
    return 0


async def _override(args: argparse.Namespace) -> str | None:
    """Annotate the managed quota; returns the grant's expiry already on it (or ``None``)."""
    from dynquota.kube.quotas import QuotaClient
    from dynquota.names import MANAGED_QUOTA_NAME
    from dynquota.policy import OVERRIDE, OVERRIDE_EXPIRES_AT

    async with connect(target_of(args)) as api:
        quota = await guard(
            f"reading quota in {args.namespace}", QuotaClient(api).get(args.namespace)
        )
        if quota is None:
            raise UserError(
                f"namespace {args.namespace} has no managed quota {MANAGED_QUOTA_NAME} "
                "(not managed, or the kill switch is engaged)"
            )
        if not quota.managed:
            raise UserError(
                f"the quota {MANAGED_QUOTA_NAME} in {args.namespace} is not managed by dynquota"
            )
        await guard(
            f"annotating quota {MANAGED_QUOTA_NAME} in {args.namespace}",
            _patch_annotations(
                api,
                "resourcequotas",
                args.namespace,
                MANAGED_QUOTA_NAME,
                {OVERRIDE: None if args.off else "max"},
            ),
        )
    return quota.annotations.get(OVERRIDE_EXPIRES_AT)


def cmd_kill_switch(args: argparse.Namespace) -> int:
    """Engage, release or show the kill switch (``-o`` applies to ``status`` only)."""
    if args.state != "status" and args.output != "table":
        raise UserError(f"-o {args.output} applies to `kill-switch status` only")
    asyncio.run(_kill_switch(args))
    if args.state == "on":
        print("kill switch ENGAGED: the operator deletes every managed quota and creates none")
    elif args.state == "off":
        print("kill switch released: the operator re-creates quotas for every managed namespace")
    return 0


async def _kill_switch(args: argparse.Namespace) -> None:
    from dynquota.kube.cleanup import list_managed_quotas
    from dynquota.kube.cluster import ClusterClient
    from dynquota.policy import KILL_SWITCH, parse_kill_switch
    from dynquota.policy.state import quoted

    async with connect(target_of(args)) as api:
        if args.state == "status":
            namespace = await guard(
                "reading namespace kube-system", ClusterClient(api).read_namespace("kube-system")
            )
            raw = ((namespace.get("metadata") or {}).get("annotations") or {}).get(KILL_SWITCH)
            reading = parse_kill_switch(raw)
            quotas = await guard("listing managed quotas", list_managed_quotas(api))
            state = {True: "ENGAGED", False: "released", None: "INVALID"}[reading.engaged]
            if args.output in ("table", "wide"):
                where = f"{KILL_SWITCH}={quoted(raw)}" if raw is not None else f"no {KILL_SWITCH}"
                print(f"kill switch: {state} ({where} on kube-system)")
                if reading.warning:
                    print(f"warning: {reading.warning}")
                print(f"managed quotas in the cluster: {len(quotas)}")
            else:
                document = {
                    "apiVersion": KILL_SWITCH_API_VERSION,
                    "kind": "KillSwitch",
                    "state": state,
                    "annotation": raw,
                    "warning": reading.warning or None,
                    "managedQuotas": len(quotas),
                }
                try:
                    sys.stdout.write(render_document(document, args.output))
                except OutputError as exc:
                    raise UserError(str(exc)) from exc
            return
        await guard(
            "annotating namespace kube-system",
            _patch_annotations(
                api,
                "namespaces",
                None,
                "kube-system",
                {KILL_SWITCH: "true" if args.state == "on" else None},
            ),
        )
