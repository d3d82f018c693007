"""``dynquota status -n NS``: what governs one namespace, as its tenant may read it.

Without ``-n``: the kubeconfig context's namespace (``default`` when it names none), as kubectl.

Reads only the namespace's ``AppliedDynamicQuota`` ``dynquota`` (one GET, with the short
timeout of :mod:`dynquota._k8s.timeouts`), which the operator writes and the chart lets the
built-in ``view``, ``edit`` and ``admin`` roles read: no cluster-scoped read, so it works with a
tenant's rights (``docs/tenants.md``, "What governs me"). A 403 or a missing object is one
line and exit 2. ``-o json|yaml|jsonpath=`` prints the object as stored (without
``managedFields``); the default is a short text: the state, the policy's bounds and next
raises, the override rules, the budget and this namespace's slice.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping
from typing import Any

from dynquota.cli.errors import UserError, connect, context_namespace_of, guard
from dynquota.cli.flags import target_of
from dynquota.cli.output import OutputError, columns, render_document

__all__ = ["cmd_status", "status_text"]


def cmd_status(args: argparse.Namespace) -> int:
    """Print the AppliedDynamicQuota of ``-n NAMESPACE``."""
    if not args.namespace:
        args.namespace = context_namespace_of(target_of(args))
    obj = asyncio.run(_read(args))
    if args.output in ("table", "wide"):
        print(status_text(obj))
        return 0
    try:
        sys.stdout.write(render_document(obj, args.output))
    except OutputError as exc:
        raise UserError(str(exc)) from exc
    return 0


async def _read(args: argparse.Namespace) -> dict[str, Any]:
    from dynquota.kube.applied import AppliedClient
    from dynquota.names import APPLIED_KIND, APPLIED_NAME

    namespace = args.namespace
    async with connect(target_of(args)) as api:
        obj = await guard(
            f"reading {APPLIED_KIND} {APPLIED_NAME} in {namespace}",
            AppliedClient(api).get(namespace),
        )
    if obj is None:
        raise UserError(
            f"namespace {namespace} has no {APPLIED_KIND} {APPLIED_NAME}: the namespace does "
            "not exist, dynquota does not manage it (no policy selects it, or it is opted "
            "out), or the operator has not written it yet"
        )
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


def status_text(obj: Mapping[str, Any]) -> str:
    """The text of one AppliedDynamicQuota (pure): plain lines and tabwriter-style tables."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    lines = [
        f"namespace: {meta.get('namespace', '')}",
        f"state: {status.get('state', 'Unknown')} (as of {status.get('asOf', '?')})",
        f"message: {status.get('message', '')}",
    ]
    policy = status.get("policy") or {}
    lines.append(
        f"policy: {policy.get('name', '')}" + (" (dry run)" if policy.get("dryRun") else "")
    )
    resources = policy.get("resources") or {}
    if resources:
        table = [["KEY", "MINIMUM", "MAXIMUM", "BUFFER", "UP", "DOWN", "NEXT RAISE AFTER"]]
        for key, p in resources.items():
            table.append(
                [
                    key,
                    str(p.get("minimum", "")),
                    str(p.get("maximum", "")),
                    f"{p.get('bufferPercent', '')}%",
                    str(p.get("upscaleCooldown", "")),
                    str(p.get("downscaleCooldown", "")),
                    str(p.get("nextRaiseAfter", "-")),
                ]
            )
        lines.append(columns(table))
    override = policy.get("override")
    if override:
        text = (
            f"override: {'allowed' if override.get('allowed') else 'not allowed'}, ttl "
            f"{override.get('ttl', '')}, minInterval {override.get('minInterval', '')}"
        )
        if status.get("state") != "Enforced":
            text += " (the policy's rules; no effect while nothing is enforced)"
        if "activeUntil" in override:
            text += f"; active until {override['activeUntil']}"
        if "nextGrantAfter" in override:
            text += f"; next grant after {override['nextGrantAfter']}"
        lines.append(text)
    rate = status.get("writeRate")
    if rate:
        text = (
            f"writeRate: {rate.get('limit', '')} creates+deletes of pods and ConfigMaps in "
            f"{rate.get('window', '')}, quiet period {rate.get('quietPeriod', '')}; "
        )
        dry = bool((status.get("policy") or {}).get("dryRun"))
        if rate.get("tarpitted") and dry:  # the governor decided, nothing is listed
            why = str(rate.get("reason", "")).removesuffix(" (dry run: not enforced)")
            text += (
                f"WOULD BE IN THE APF TARPIT ({why}), but the policy is in dry run: nothing is "
                "throttled; once enforced, writes of pods and ConfigMaps here would run on a "
                "few seats and get 429 (Retry-After) when they are taken"
            )
        elif rate.get("tarpitted"):
            text += (
                f"IN THE APF TARPIT ({rate.get('reason', '')}): writes of pods and ConfigMaps "
                "here run on a few seats and get 429 (Retry-After) when they are taken, until "
                "the namespace stays at or below half the limit for the quiet period (why am I "
                "getting 429s: docs/tenants.md)"
            )
        else:
            text += "not in the tarpit"
        lines.append(text)
    budget = status.get("budget")
    if budget:
        lines.append(
            f"budget: {budget.get('name', '')} (used, granted and free as of "
            f"{budget.get('figuresAsOf', '?')})"
        )
        table = [["KEY", "HARD", "SLICE", "USED", "GRANTED", "FREE"]]
        for key, hard in (budget.get("hard") or {}).items():
            table.append(
                [key, str(hard)]
                + [str((budget.get(part) or {}).get(key, "-")) for part in ("slice", "used")]
                + [str((budget.get(part) or {}).get(key, "-")) for part in ("granted", "free")]
            )
        lines.append(columns(table))
    return "\n".join(lines)
