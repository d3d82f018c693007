"""``dynquota fit -f MANIFEST``: will a workload fit the namespace's quotas, and when.

For each Deployment, ReplicaSet, StatefulSet, Job or Pod of the manifest
(:mod:`dynquota.cli.fit_manifest`), with the caller's own rights (a tenant's ``admin`` or
``edit`` in the namespace suffices; ``view`` too, with less):

1. one server-side dry-run create (``dryRun=All``, ``generateName``) of the pod its
   controller would create: the apiserver answers the pod as it would store it (LimitRange
   defaults, mutating webhooks) and runs every admission check without charging anything
   (Pod Security, validating policies and webhooks, the quota check). A refusal other than
   quota's is what blocks the workload whatever the room; a refusal by quota or by the budget
   guard (for seconds, until a new hard is enforced), or no right to create pods, leaves the
   manifest's pod with the namespace's LimitRange defaults applied here, and the LimitRanges'
   ``min``/``max``/``maxLimitRequestRatio`` checked here, a refusal naming the LimitRange
   (:mod:`dynquota.admission.limitranger`);
2. one LIST of the namespace's ResourceQuotas and one of its LimitRanges, and one GET of its
   ``AppliedDynamicQuota`` ``dynquota`` (the policy's bounds and cooldowns, ``nextRaiseAfter``,
   the override, the budget's slice and free room); one GET of each workload as it exists
   and, when one does, one LIST of the namespace's pods (and ReplicaSets, for a Deployment):
   its own pods are no other usage, and a rollout's surge is asked for too; for a
   StatefulSet's ``volumeClaimTemplates``, one LIST of the namespace's claims (a replica
   whose claim exists needs no new one). Every LIST is read in pages of :data:`PAGE`;
3. the arithmetic (:mod:`dynquota.cli.fit_model`): the bundled evaluator over N pods against
   every quota of the namespace, and the raise schedule of the keys dynquota sizes.

What it cannot read (a 403) is named in the output, and it answers with what it has. Every
request has the short timeout of :mod:`dynquota._k8s.timeouts`. Exit status: 0 when every
pod fits now, 1 when some fit only later or never, 2 for an error (a manifest that cannot be
read, the cluster unreachable, an RBAC refusal of every read).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Final, TypeVar

from dynquota.cli.errors import UserError, connect, context_namespace_of, explain
from dynquota.cli.fit_manifest import Manifest, ManifestError, Workload, read_manifest
from dynquota.cli.fit_model import Candidate, evaluate
from dynquota.cli.fit_report import FitReport
from dynquota.cli.fit_text import fit_document, fit_text
from dynquota.cli.flags import target_of
from dynquota.cli.output import OutputError, render_document

__all__ = ["cmd_fit", "fit_report"]

T = TypeVar("T")

BUDGET_GUARD = "dynquota budget guard:"
"""How the chart's budget guard starts its refusals (docs/budgets.md, "The budget guard"): a
namespace's creates wait until its budget's slice is enforced and marked, and after each
change of its quota's ``spec.hard`` until ``status.hard`` shows it — a matter of seconds, not
a reason the workload never fits."""


def cmd_fit(args: argparse.Namespace) -> int:
    """Print whether and when the manifest's pods fit; returns the exit status (module docs).

    Raises:
        UserError: the manifest cannot be read or names another namespace than ``-n``, the
            cluster cannot be reached, a malformed ``-o`` template.
    """
    if args.replicas is not None and args.replicas < 0:
        raise UserError(f"--replicas must be 0 or more, not {args.replicas}")
    source = "stdin" if args.filename == "-" else args.filename
    try:
        text = sys.stdin.read() if args.filename == "-" else Path(args.filename).read_text()
    except OSError as exc:
        raise UserError(f"reading {source}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise UserError(
            f"reading {source}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at "
            f"offset {exc.start}); YAML and JSON manifests are UTF-8"
        ) from exc
    try:
        manifest = read_manifest(text, source, args.replicas)
    except ManifestError as exc:
        raise UserError(str(exc)) from exc
    namespace = _namespace(args, manifest)
    report = asyncio.run(fit_report(args, namespace, manifest))
    if args.output in ("table", "wide"):
        print(fit_text(report))
    else:
        try:
            sys.stdout.write(render_document(fit_document(report), args.output))
        except OutputError as exc:
            raise UserError(str(exc)) from exc
    return report.exit_code


def _namespace(args: argparse.Namespace, manifest: Manifest) -> str:
    """``-n``; else the manifest's (one namespace); else the kubeconfig context's."""
    written = sorted({w.namespace for w in manifest.workloads if w.namespace})
    if args.namespace:
        other = [n for n in written if n != args.namespace]
        if other:
            raise UserError(
                f"the manifest's namespace {other[0]!r} does not match -n {args.namespace!r}"
            )
        return str(args.namespace)
    if len(written) > 1:
        raise UserError(f"the manifest names several namespaces ({', '.join(written)}): give -n")
    if written:
        return written[0]
    return context_namespace_of(target_of(args))


async def fit_report(args: argparse.Namespace, namespace: str, manifest: Manifest) -> FitReport:
    """The answer for ``manifest`` in ``namespace``, read with the identity ``args`` name
    (the connection flags of :func:`~dynquota.cli.flags.target_of`); ``now`` is taken after
    the reads. Raises :class:`UserError` as :func:`cmd_fit` says."""
    from kubernetes_asyncio import client

    from dynquota.kube.applied import AppliedClient

    not_read: list[tuple[str, str]] = []
    notes = [f"skipped {name}: creates no pod fit can evaluate" for name in manifest.skipped]
    async with connect(target_of(args)) as api:
        core: Any = client.CoreV1Api(api)
        quotas = await _read(
            f"resourcequotas in {namespace}",
            core.list_namespaced_resource_quota,
            not_read,
            "the counts ignore every quota",
        )
        ranges = await _read(
            f"limitranges in {namespace}",
            core.list_namespaced_limit_range,
            not_read,
            "LimitRange defaults come from the dry run only",
        )
        applied = await _applied(AppliedClient(api).get(namespace), namespace, not_read)
        if applied is None and not any(n[0].startswith("applieddynamicquotas") for n in not_read):
            notes.append(
                f"namespace {namespace} has no AppliedDynamicQuota: dynquota does not size its "
                "quotas now (any quota is taken as fixed)"
            )
        candidates = []
        for workload in manifest.workloads:
            candidates.append(
                await _candidate(core, namespace, workload, ranges or [], not_read, notes)
            )
        candidates = await _existing(api, namespace, candidates, not_read)
    if quotas is None:
        dry_runs = [n for n in not_read if n[0].startswith("a dry-run create")]
        if len(dry_runs) == len(manifest.workloads):  # nothing to answer with
            raise UserError(
                f"insufficient RBAC permissions (403): may neither list resourcequotas in "
                f"{namespace} nor create pods there (dry run): {not_read[0][1]}"
            )
        quotas = []
    return evaluate(namespace, candidates, quotas, applied, int(time.time()), not_read, notes)


PAGE = 500
"""Items per page of a LIST (``limit``; the ``continue`` token fetches the next)."""


async def _read(
    what: str,
    lister: Callable[..., Awaitable[Any]],
    not_read: list[tuple[str, str]],
    without: str,
) -> list[dict[str, Any]] | None:
    """The items of one LIST of ``what`` (``pods in team-a``: ``lister`` is the
    kubernetes_asyncio ``list_namespaced_...`` method), page by page, or ``None`` after a
    403 (named in ``not_read``, with what the answer does ``without`` it)."""
    from dynquota._k8s.errors import ForbiddenError
    from dynquota._k8s.paginate import ListPage, paginate
    from dynquota._k8s.request import call_json

    resource, namespace = what.split()[0], what.split()[-1]

    async def page(token: str | None) -> ListPage:
        more = {"_continue": token} if token else {}
        body = await _allowed(
            f"listing {what}",
            call_json(
                "list",
                resource,
                lambda t: lister(
                    namespace, limit=PAGE, _request_timeout=t, _preload_content=False, **more
                ),
            ),
        )
        return ListPage.from_body(body, what)

    items: list[dict[str, Any]] = []
    try:
        async for listed in paginate(page):
            items += [dict(item) for item in listed.items]
    except ForbiddenError as exc:
        not_read.append((what, f"{exc.status}: {exc.message}; {without}"))
        return None
    return items


_READERS: Final = {
    "Deployment": ("apps", "deployments", "read_namespaced_deployment"),
    "ReplicaSet": ("apps", "replicasets", "read_namespaced_replica_set"),
    "StatefulSet": ("apps", "statefulsets", "read_namespaced_stateful_set"),
    "Job": ("batch", "jobs", "read_namespaced_job"),
}
"""The kinds whose live object ``fit`` reads: API group, resource, kubernetes_asyncio method."""


async def _live(
    apis: Mapping[str, Any], namespace: str, workload: Workload, not_read: list[tuple[str, str]]
) -> dict[str, Any] | None:
    """The workload as it exists (one GET), or ``None``: new (404), a Pod, or not readable
    (a 403, named in ``not_read``)."""
    from dynquota._k8s.errors import ForbiddenError, NotFoundError
    from dynquota._k8s.request import call_json

    if workload.kind not in _READERS:
        return None
    group, resource, method = _READERS[workload.kind]
    read = getattr(apis[group], method)
    what = f"{resource}/{workload.name} in {namespace}"

    async def get(t: Any) -> Any:
        return await read(workload.name, namespace, _request_timeout=t, _preload_content=False)

    try:
        live = await call_json("get", resource, get)
    except NotFoundError:
        return None
    except ForbiddenError as exc:
        if exc.status != 403:
            raise (explain(exc, f"reading {what}") or exc) from exc
        not_read.append((what, f"{exc.status}: {exc.message}; taken as new"))
        return None
    except Exception as exc:
        error = explain(exc, f"reading {what}")
        if error is not None:
            raise error from exc
        raise
    return {**live, "kind": workload.kind}


async def _existing(
    api: Any, namespace: str, candidates: list[Candidate], not_read: list[tuple[str, str]]
) -> list[Candidate]:
    """The candidates with what of them exists (:mod:`dynquota.cli.fit_workload`): the live
    workload (one GET each; 404: new), its pods (one LIST of the namespace's pods, and of its
    ReplicaSets for a Deployment), a rollout's surge, and the namespace's claims for a
    StatefulSet's templates (one LIST). What may not be read is named in ``not_read``."""
    from kubernetes_asyncio import client

    from dynquota.cli.fit_workload import owned_pods, rollout_surge

    core: Any = client.CoreV1Api(api)
    apis: Any = {"apps": client.AppsV1Api(api), "batch": client.BatchV1Api(api)}
    lives = [await _live(apis, namespace, c.workload, not_read) for c in candidates]
    pods: list[dict[str, Any]] = []
    replica_sets: list[dict[str, Any]] = []
    if any(lives):
        own = "the workload's own pods are counted as other usage"
        pods = await _read(f"pods in {namespace}", core.list_namespaced_pod, not_read, own) or []
        if any(live and live["kind"] == "Deployment" for live in lives):
            replica_sets = (
                await _read(
                    f"replicasets in {namespace}",
                    apis["apps"].list_namespaced_replica_set,
                    not_read,
                    own,
                )
                or []
            )
    claims: frozenset[str] = frozenset()
    if any(c.workload.claims for c in candidates):
        listed = await _read(
            f"persistentvolumeclaims in {namespace}",
            core.list_namespaced_persistent_volume_claim,
            not_read,
            "every claim of a StatefulSet's replicas is taken as new",
        )
        claims = frozenset(str((c.get("metadata") or {}).get("name")) for c in listed or ())
    return [
        replace(
            candidate,
            own=tuple(owned_pods(live, pods, replica_sets)) if live is not None else (),
            surge=rollout_surge(candidate.workload, live, candidate.workload.replicas),
            existing_claims=claims,
        )
        for candidate, live in zip(candidates, lives, strict=True)
    ]


async def _allowed(what: str, call: Awaitable[T]) -> T:
    """Await ``call``: a 403 is raised as it is (the caller names what it could not read);
    a 404 is a :class:`UserError` with the apiserver's message (``namespaces "x" not
    found``); any other failure :func:`~dynquota.cli.errors.explain` understands is a
    :class:`UserError` prefixed with ``what``."""
    from dynquota._k8s.errors import ForbiddenError, NotFoundError

    try:
        return await call
    except ForbiddenError as exc:
        if exc.status == 403:
            raise
        error = explain(exc, what)
        raise (error or exc) from exc
    except NotFoundError as exc:
        raise UserError(f"{what}: {exc.message}") from exc
    except Exception as exc:
        error = explain(exc, what)
        if error is not None:
            raise error from exc
        raise


async def _applied(
    call: Awaitable[dict[str, Any] | None], namespace: str, not_read: list[tuple[str, str]]
) -> dict[str, Any] | None:
    """The namespace's AppliedDynamicQuota, or ``None`` (none, or a 403 named in
    ``not_read``)."""
    from dynquota._k8s.errors import ForbiddenError

    what = f"applieddynamicquotas/dynquota in {namespace}"
    try:
        return await _allowed(f"reading {what}", call)
    except ForbiddenError as exc:
        not_read.append((what, f"{exc.status}: {exc.message}; dynquota's quota is taken as fixed"))
        return None


async def _candidate(
    core: Any,
    namespace: str,
    workload: Workload,
    ranges: list[dict[str, Any]],
    not_read: list[tuple[str, str]],
    notes: list[str],
) -> Candidate:
    """The workload's pod as admission sees it: the dry run's answer, or the manifest's pod
    with the LimitRange defaults applied here (module docs, step 1)."""
    from dynquota._k8s.errors import ApiError, ForbiddenError
    from dynquota._k8s.request import call_json
    from dynquota.admission.limitranger import apply_limit_range_defaults, limit_range_refusal

    pod: dict[str, Any] = dict(workload.pod)
    pod["metadata"] = {**dict(workload.pod.get("metadata") or {}), "namespace": namespace}
    try:
        answer: Mapping[str, Any] = await _allowed(
            f"a dry-run create of {workload.title}'s pod",
            call_json(
                "create",
                "pods",
                lambda t: core.create_namespaced_pod(
                    namespace, pod, dry_run="All", _request_timeout=t, _preload_content=False
                ),
            ),
        )
        return Candidate(workload, answer)
    except ForbiddenError as exc:
        message = exc.message
        if "cannot create resource" in message:  # RBAC: not allowed to create pods
            not_read.append(
                (
                    f"a dry-run create of {workload.title}'s pod",
                    f"{exc.status}: {message}; LimitRange defaults applied here, webhooks and "
                    "Pod Security not checked",
                )
            )
        elif "exceeded quota" in message or "failed quota" in message:
            notes.append(
                f"the dry run of {workload.title}'s pod was refused by quota ({message}): the "
                "pod evaluated is the manifest's with the namespace's LimitRange defaults"
            )
        elif BUDGET_GUARD in message:  # for seconds: until a slice (or a raise) is enforced
            notes.append(
                f"the dry run of {workload.title}'s pod was refused by dynquota's budget guard "
                f"({message}): creates wait until the quota's new hard is enforced, usually "
                "seconds; the pod evaluated is the manifest's with the LimitRange defaults"
            )
        else:
            return Candidate(workload, pod, f"refused by the apiserver: {message}")
    except ApiError as exc:
        if exc.status in (400, 422):  # the pod itself is invalid
            return Candidate(workload, pod, f"refused by the apiserver: {exc.message}")
        raise
    defaulted, _ = apply_limit_range_defaults(pod, ranges)
    refused = limit_range_refusal(defaulted, ranges)
    if refused is not None:  # what the apiserver's LimitRanger would answer (no dry run here)
        name, why = refused
        return Candidate(workload, defaulted, f"refused by LimitRange {name} (checked here): {why}")
    return Candidate(workload, defaulted)
