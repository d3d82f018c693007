"""``dynquota cleanup``: delete every managed quota (the chart's uninstall hook), optionally
stopping the operator first and, with ``--limit-ranges``, the companion LimitRanges too; the
deletes are :mod:`dynquota.kube.cleanup`'s."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dynquota.cli.errors import FIELD_MANAGER, UserError, connect, explain, guard
from dynquota.cli.flags import target_of
from dynquota.settings import Settings

if TYPE_CHECKING:
    from dynquota.kube.cleanup import ListedQuota, Resource

__all__ = ["CLEANUP_ROUNDS", "cmd_cleanup"]

CLEANUP_ROUNDS = 3
"""``dynquota cleanup --yes`` lists and deletes at most this many times until a list of
managed quotas comes back empty (a quota re-created meanwhile is found by the next list)."""

_STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


@dataclass(frozen=True)
class _Kind:
    """What one part of the cleanup deletes: ``noun`` in messages (``managed quotas``),
    ``kind`` in per-object lines (``resourcequota``), the API ``resource`` and the ``lister``
    of the owned objects (name ``dynquota`` and the managed-by label)."""

    noun: str
    kind: str
    resource: Resource
    lister: Callable[[Any], Awaitable[list[ListedQuota]]]
    quiet: bool = False
    """Say nothing when there is none (the tenant projections: absent before 0.2.0)."""


def _quotas() -> _Kind:
    from dynquota.kube.cleanup import list_managed_quotas

    return _Kind("managed quotas", "resourcequota", "resourcequotas", list_managed_quotas)


def _limit_ranges() -> _Kind:
    from dynquota.kube.cleanup import list_companion_limit_ranges

    return _Kind("companion LimitRanges", "limitrange", "limitranges", list_companion_limit_ranges)


def _projections() -> _Kind:
    from dynquota.kube.cleanup import list_tenant_projections

    return _Kind(
        "tenant projections",
        "applieddynamicquota",
        "applieddynamicquotas",
        list_tenant_projections,
        quiet=True,
    )


def _selector_string(selector: Mapping[str, Any]) -> str:
    """A ``LabelSelector`` (decoded JSON) as label-selector text (``a=b,c in (d,e),!f``)."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for requirement in selector.get("matchExpressions") or []:
        key = requirement["key"]
        values = ",".join(requirement.get("values") or [])
        parts.append(
            {
                "In": f"{key} in ({values})",
                "NotIn": f"{key} notin ({values})",
                "Exists": key,
                "DoesNotExist": f"!{key}",
            }[requirement["operator"]]
        )
    return ",".join(parts)


def _owned_by(pod: Mapping[str, Any], deployment: str) -> bool:
    """Whether ``pod`` (decoded JSON) is controlled by a ReplicaSet of ``deployment``
    (``<deployment>-<pod-template-hash>``)."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if (
            ref.get("kind") == "ReplicaSet"
            and ref.get("controller")
            and str(ref.get("name") or "").startswith(f"{deployment}-")
        ):
            return True
    return False


def cmd_cleanup(args: argparse.Namespace) -> int:
    """Delete every managed quota (the chart's uninstall hook); optionally stop the operator
    first. Without --yes only lists what it would delete.

    All or nothing: with ``--yes``, before deleting anything, every listed quota (and
    LimitRange with ``--limit-ranges``) gets a server-side dry-run delete, which RBAC and the
    admission policies judge as the delete itself; one refusal ends the command with one line
    saying what refused (``refused by an admission policy, not RBAC`` and the policy's
    message, or RBAC) and nothing deleted (``_check_deletes``). The chart's managed-quota
    policy lets a principal with ``delete`` on resourcequotas in the namespace (no
    resourceNames: a cluster admin) delete the managed quota.

    ``--scale-down`` patches the Deployment to ``replicas: 0`` *and* a RollingUpdate strategy
    (maxSurge 0, maxUnavailable 100%): a Recreate Deployment caught with two active ReplicaSets
    (an unfinished rollout that was reverted) ignores ``replicas`` — upstream
    ``pkg/controller/deployment/sync.go`` ``scale()`` scales several active ReplicaSets
    proportionally only for RollingUpdate — so a plain scale to 0 would never remove its pods.
    It then waits at most ``--timeout`` seconds for the pods of the Deployment's ReplicaSets;
    every API call has the short request timeout of :mod:`dynquota._k8s.timeouts` (10 s), so
    the command never hangs.

    Quotas: lists the managed ones by label and name
    (:func:`dynquota.kube.cleanup.list_managed_quotas`) and deletes them in parallel (at most
    ``--concurrency`` in flight), rate-limited (``--qps``, default
    ``$DYNQUOTA_KILL_SWITCH_DELETE_QPS``), each with a ``uid`` precondition (one replaced
    meanwhile by another object is left alone), within a deadline derived from the count
    (``ceil(count / qps) + 30`` s, or ``--deadline``), printing a progress line every
    ``--progress-interval`` seconds (:func:`dynquota.kube.cleanup.delete_managed_quotas`).
    Lists again until a list comes back empty, at most :data:`CLEANUP_ROUNDS` times.

    ``--limit-ranges``: then, the same way, the companion LimitRanges (named ``dynquota`` and
    labelled managed-by=dynquota: one without the label is never listed), only once every
    managed quota is gone (a compute key still enforced without its default request would
    refuse every pod that declares none). Without ``--yes`` they are listed too.

    Raises:
        UserError: RBAC refusal (401/403), unreachable API, pods left at the deadline, the
            delete deadline passed, or managed quotas still present after the last round
            (exit 2).
    """
    settings = Settings()
    qps = args.qps if args.qps is not None else settings.kill_switch_delete_qps
    if qps <= 0:
        raise UserError(f"--qps must be positive: {qps:g}")
    if args.concurrency < 1:
        raise UserError(f"--concurrency must be at least 1: {args.concurrency}")
    return asyncio.run(_cleanup(args, settings, qps))


async def _cleanup(args: argparse.Namespace, settings: Settings, qps: float) -> int:
    async with connect(target_of(args)) as api:
        if args.scale_down:
            namespace = settings.namespace
            if not namespace:
                raise UserError("--scale-down needs DYNQUOTA_NAMESPACE (the operator's namespace)")
            if args.yes:
                await _scale_down(api, namespace, args.scale_down, args.timeout)
            else:
                print(f"would scale deployment {namespace}/{args.scale_down} to 0")
        kinds = [_quotas(), _projections()]
        kinds += [_limit_ranges()] if getattr(args, "limit_ranges", False) else []
        if args.yes:
            for what in kinds:  # all or nothing: every delete is judged before any is made
                await _check_deletes(api, args, qps, what)
        code = 0
        for what in kinds:
            # the worst outcome wins: quotas that failed are not hidden by LimitRanges that did not
            code = max(code, await _cleanup_kind(api, args, qps, what))
        return code


async def _check_deletes(api: Any, args: argparse.Namespace, qps: float, what: _Kind) -> None:
    """Send a server-side dry-run delete (``dryRun: [All]`` in the DeleteOptions) of every
    listed object of ``what``: RBAC and every admission policy judge it as they would the
    delete, and nothing is deleted.

    Raises:
        UserError: one line naming what refused (RBAC, or the admission policy and its
            message) and where, before anything was deleted.
    """
    from dynquota._k8s.errors import ApiError
    from dynquota.kube.cleanup import deadline_for, delete_managed_quotas

    listed = await guard(f"listing {what.noun}", what.lister(api))
    if not listed:
        return
    nothing = f"nothing was deleted: checking the delete of {len(listed)} {what.noun}"
    try:
        report = await delete_managed_quotas(
            api, listed, qps=max(qps, 50.0), concurrency=args.concurrency,
            deadline=args.deadline or deadline_for(len(listed), max(qps, 50.0)),
            resource=what.resource, dry_run=True,
        )  # fmt: skip
    except ApiError as exc:
        error = explain(exc, nothing)
        raise (error or UserError(f"{nothing}: {exc}")) from exc
    if report.failed:
        ns, why = sorted(report.failed.items())[0]
        raise UserError(f"{nothing}: refused in {ns} ({len(report.failed)} refused in all): {why}")
    if report.left:
        raise UserError(f"{nothing}: the check did not finish within its deadline")


async def _scale_down(api: Any, namespace: str, name: str, timeout: float) -> None:
    """Scale Deployment ``namespace/name`` to 0 (see :func:`cmd_cleanup`) and wait at most
    ``timeout`` seconds for the pods of its ReplicaSets to be gone."""
    from kubernetes_asyncio import client

    from dynquota._k8s.request import call_api

    apps: Any = client.AppsV1Api(api)
    core: Any = client.CoreV1Api(api)
    where = f"{namespace}/{name}"
    deployment = await guard(
        f"reading deployment {where}",
        call_api(
            "get",
            "deployments",
            lambda t: apps.read_namespaced_deployment(name, namespace, _request_timeout=t),
        ),
    )
    stop = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "100%"}}
    await guard(
        f"scaling deployment {where}",
        call_api(
            "patch",
            "deployments",
            lambda t: apps.patch_namespaced_deployment(
                name,
                namespace,
                {"spec": {"replicas": 0, "strategy": stop}},
                field_manager=FIELD_MANAGER,
                _content_type=_STRATEGIC_MERGE_PATCH,  # `strategy` has retainKeys
                _request_timeout=t,
            ),
        ),
    )
    spec = api.sanitize_for_serialization(deployment).get("spec") or {}
    selector = _selector_string(spec.get("selector") or {})
    print(f"scaled deployment {where} to 0; waiting for its pods")
    deadline = time.monotonic() + timeout
    while True:
        listed = await guard(
            f"listing pods in {namespace}",
            call_api(
                "list",
                "pods",
                lambda t: core.list_namespaced_pod(
                    namespace, label_selector=selector, _request_timeout=t
                ),
            ),
        )
        # other pods of the release carry the same labels (this hook's own pod, a `helm
        # test` pod): only pods of the Deployment's ReplicaSets count
        items = api.sanitize_for_serialization(listed).get("items") or []
        pods = [p for p in items if _owned_by(p, name)]
        if not pods:
            break
        if time.monotonic() > deadline:
            names = ", ".join(sorted(str(p["metadata"]["name"]) for p in pods))
            raise UserError(
                f"{len(pods)} pods of deployment {where} still present after {timeout:.0f} s "
                f"({names}); is kube-controller-manager running?"
            )
        await asyncio.sleep(1)  # poll: the pods' deletion has no event to wait for here
    print(f"operator pods gone ({selector})")


async def _cleanup_kind(api: Any, args: argparse.Namespace, qps: float, what: _Kind) -> int:
    """One part of ``cleanup`` (the managed quotas, or the companion LimitRanges): list, then
    (with ``--yes``) delete in rounds."""
    from dynquota.kube.cleanup import (
        CleanupReport,
        Outcome,
        deadline_for,
        delete_managed_quotas,
    )
    from dynquota.names import MANAGED_QUOTA_NAME

    noun = what.noun

    async def listed() -> list[ListedQuota]:
        return await guard(f"listing {noun}", what.lister(api))

    def on_result(quota: ListedQuota, outcome: Outcome, detail: str) -> None:
        where = f"{what.kind} {quota.namespace}/{MANAGED_QUOTA_NAME}"
        if outcome == "deleted" and args.verbose:
            print(f"deleted {where} (uid {quota.uid})")
        elif outcome == "gone":
            print(f"{where} already gone")
        elif outcome == "replaced":
            print(f"{where} left alone: replaced since it was listed (uid {quota.uid} is gone)")
        elif outcome == "failed":
            print(f"{where} not deleted: {detail}")

    def on_progress(report: CleanupReport, total: int) -> None:
        rate = report.done / report.seconds if report.seconds > 0 else 0.0
        print(
            f"progress: {report.done}/{total} in {report.seconds:.1f} s ({rate:.1f}/s): "
            f"{len(report.deleted)} deleted, {len(report.gone)} already gone, "
            f"{len(report.replaced)} replaced, {len(report.failed)} failed"
            + (f" ({report.retries} retries)" if report.retries else ""),
            flush=True,
        )

    if what.quiet and not await listed():
        return 0
    if not args.yes:
        quotas = await listed()
        for quota in quotas:
            print(f"would delete {what.kind} {quota.namespace}/{MANAGED_QUOTA_NAME}")
        print(
            f"{len(quotas)} {noun}; run with --yes to delete them (at {qps:g}/s: "
            f"deadline {deadline_for(len(quotas), qps):.0f} s)"
        )
        return 0
    total = CleanupReport()
    for _ in range(CLEANUP_ROUNDS):
        quotas = await listed()
        if not quotas:
            break
        deadline = args.deadline or deadline_for(len(quotas), qps)
        print(
            f"deleting {len(quotas)} {noun} at {qps:g}/s, {args.concurrency} in "
            f"parallel; deadline {deadline:.0f} s",
            flush=True,
        )
        report = await guard(
            f"deleting {noun}",
            delete_managed_quotas(
                api,
                quotas,
                qps=qps,
                concurrency=args.concurrency,
                deadline=deadline,
                on_result=on_result,
                on_progress=on_progress,
                progress_interval=args.progress_interval,
                resource=what.resource,
            ),
        )
        total.add(report)
        if report.left:
            raise UserError(
                f"deadline of {deadline:.0f} s passed with {len(report.left)} of "
                f"{len(quotas)} {noun} not deleted (rate {qps:g}/s); deleted so "
                f"far: {len(total.deleted)}. Run `dynquota cleanup --yes` again (it "
                "continues), or give more time with --deadline"
            )
    else:
        left = sorted(q.namespace for q in await listed())
        if left:
            failed = "".join(f"; {ns}: {total.failed[ns]}" for ns in left[:3] if ns in total.failed)
            raise UserError(
                f"{len(left)} {noun} still present after {CLEANUP_ROUNDS} rounds "
                f"(in {', '.join(left[:10])}{', ...' if len(left) > 10 else ''}): "
                f"something keeps creating them (is an operator still running?) or "
                f"their deletes fail{failed}"
            )
    print(
        f"deleted {len(total.deleted)} {noun}"
        f" ({len(total.gone)} already gone, {len(total.replaced)} replaced meanwhile and "
        "left alone)"
    )
    return 0
