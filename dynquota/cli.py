"""The ``dynquota`` command line.

- ``dynquota run``: the operator (flags override the ``DYNQUOTA_*`` environment, see
  :class:`dynquota.settings.Settings`);
- ``dynquota plan``: a read-only table per namespace and resource: usage, status.used, hard,
  target, next action and why, with the running release's settings (found in the cluster);
  the namespaces not managed or not enforced, and why; the other quotas of each namespace;
- ``dynquota override NAMESPACE [--off]``: request (or cancel) the tenant override on the
  namespace's managed quota;
- ``dynquota kill-switch on|off|status``: the admin kill switch on ``kube-system``;
- ``dynquota cleanup [--yes] [--scale-down DEPLOYMENT]``: delete every managed quota (the
  chart's uninstall hook; ``--scale-down`` stops the operator first);
- ``dynquota demo``: a local control plane and a real workload (see :mod:`dynquota.demo`).

Errors a user can fix (no kubeconfig, cluster unreachable, CRD missing, RBAC) are printed as
one clear line on stderr with exit code 2; other failures exit with 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from dynquota._k8s.timeouts import REQUEST_TIMEOUT
from dynquota.settings import Settings

__all__ = [
    "UserError",
    "build_parser",
    "check_kubeconfig",
    "explain",
    "main",
    "settings_from_args",
]

CRD_HINT = (
    "the DynamicQuotaPolicy CRD (dynamicquotapolicies.dynquota.io) is not installed: "
    "kubectl apply -f crds/dynamicquotapolicies.yaml, or install the Helm chart"
)


class UserError(Exception):
    """A problem the user can fix; the message says what and how."""


def explain(exc: BaseException, what: str = "") -> UserError | None:
    """Turn a client failure into a :class:`UserError` with a clear message, or ``None``.

    Understands both clients' config errors, ``ApiException`` (401/403/404 on the CRD) and
    connection failures (urllib3, aiohttp, dynquota's ``TransportError``).
    """
    import aiohttp
    import kubernetes
    import kubernetes_asyncio
    import urllib3
    import yaml

    from dynquota._k8s.errors import ApiError, ForbiddenError, NotFoundError, TransportError

    prefix = f"{what}: " if what else ""
    if isinstance(exc, yaml.YAMLError):
        mark = getattr(exc, "problem_mark", None)
        where = (
            f"{mark.name} (line {mark.line + 1}, column {mark.column + 1})"
            if mark is not None
            else "file"
        )
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return UserError(f"{prefix}kubeconfig {where} is not valid YAML: {problem}")
    if isinstance(
        exc, kubernetes.config.ConfigException | kubernetes_asyncio.config.ConfigException
    ):
        return UserError(
            f"{prefix}no usable Kubernetes configuration ({exc}); set KUBECONFIG or "
            "--kubeconfig, or run inside a cluster"
        )
    if isinstance(exc, FileNotFoundError):
        return UserError(f"{prefix}kubeconfig not found: {exc.filename}")
    status: int | None = None
    message = ""
    if isinstance(exc, kubernetes.client.exceptions.ApiException):
        status = exc.status
        message = _status_message(exc.body) or str(exc.reason)
    elif isinstance(exc, ApiError):
        status, message = exc.status, exc.message
    if status is not None:
        if status in (401,):
            return UserError(f"{prefix}the cluster refused the credentials (401): {message}")
        if status == 403 or isinstance(exc, ForbiddenError):
            return UserError(f"{prefix}insufficient RBAC permissions (403): {message}")
        if status == 404 and (isinstance(exc, NotFoundError) or "dynamicquotapolicies" in what):
            return UserError(f"{prefix}{CRD_HINT}")
        if status == 0:
            return UserError(f"{prefix}cannot reach the Kubernetes API: {message or exc}")
        return None
    if isinstance(
        exc,
        urllib3.exceptions.HTTPError | aiohttp.ClientError | TransportError | ConnectionError,
    ):
        return UserError(f"{prefix}cannot reach the Kubernetes API: {exc}")
    return None


def _status_message(body: object) -> str:
    try:
        decoded = json.loads(body) if isinstance(body, str | bytes) else None
    except ValueError:
        return ""
    return str(decoded.get("message") or "") if isinstance(decoded, dict) else ""


# -- sync client helpers (plan, override, kill-switch) -----------------------------------------


def check_kubeconfig(kubeconfig: str | None) -> None:
    """Fail early, naming the path, when the kubeconfig to be used does not exist.

    ``kubeconfig`` is the ``--kubeconfig`` path; without it (and outside a pod), the files
    listed in ``$KUBECONFIG`` (``:``-separated) are checked: at least one must exist.

    Raises :class:`UserError` (``kubeconfig not found: PATH``).
    """
    if kubeconfig:
        if not os.path.isfile(kubeconfig):
            raise UserError(f"kubeconfig not found: {kubeconfig}")
        return
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed and not any(os.path.isfile(p) for p in listed):
        raise UserError(f"kubeconfig not found: {os.pathsep.join(listed)} (from $KUBECONFIG)")


def _sync_client(kubeconfig: str | None) -> Any:
    import kubernetes

    check_kubeconfig(kubeconfig)
    configuration = kubernetes.client.Configuration()
    if not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
        kubernetes.config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig or None, client_configuration=configuration
        )
    configuration.retries = 1
    return kubernetes.client.ApiClient(configuration)


def _guard(what: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception as exc:
        error = explain(exc, what)
        if error is not None:
            raise error from exc
        raise


# -- commands ------------------------------------------------------------------------------------


def _setup_logging(settings: Settings) -> None:
    import kopf

    kopf.configure(
        debug=settings.log_level == "DEBUG",
        verbose=settings.log_level == "DEBUG",
        log_format=kopf.LogFormat.JSON if settings.log_format == "json" else kopf.LogFormat.FULL,
        log_prefix=False,
    )
    logging.getLogger().setLevel(settings.log_level)
    # kopf logs every handled event at INFO; ours are the interesting lines
    logging.getLogger("kopf.objects").setLevel(
        logging.DEBUG if settings.log_level == "DEBUG" else logging.WARNING
    )


def _unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the apiserver is not reachable (yet): no answer, 429 or 5xx."""
    import aiohttp

    from dynquota._k8s.errors import ApiError, TransportError

    if isinstance(exc, ApiError):
        return exc.status in (0, 429) or exc.status >= 500
    return isinstance(exc, TransportError | aiohttp.ClientError | ConnectionError | TimeoutError)


def _refused_for_now(exc: BaseException) -> bool:
    """Whether ``exc`` is a 401, 403 or 404 (RBAC, credentials or the CRD): fatal if it
    lasts, but what an apiserver answers for a few seconds after a restart."""
    from dynquota._k8s.errors import ApiError

    return isinstance(exc, ApiError) and exc.status in (401, 403, 404)


async def _preflight(settings: Settings, attempts: int | None = None, delay: float = 1.0) -> None:
    """Check what ``run`` needs before starting kopf: the kubeconfig, then reading
    ``kube-system`` and listing policies.

    A missing or malformed kubeconfig raises :class:`UserError` at once. Anything the
    apiserver answers is retried with exponential backoff (``delay`` seconds doubling, capped
    at 30 s) until it succeeds — or, with ``attempts`` (tests), that many attempts failed
    (then :class:`UserError`): an unreachable apiserver (no answer, 429, 5xx) logged at
    WARNING; a 401/403 or a missing CRD logged at ERROR with what to fix, because right after
    an apiserver restart its authorizer and CRD caches answer exactly that for a few seconds
    (an operator that exited then would crash-loop through the incident it exists for).
    """
    from dynquota._k8s.backoff import Backoff
    from dynquota.kube.client import new_api_client
    from dynquota.kube.cluster import ClusterClient

    log = logging.getLogger("dynquota.cli")
    check_kubeconfig(settings.kubeconfig or None)
    try:
        api_client = await new_api_client(settings.kubeconfig or None)
    except Exception as exc:
        error = explain(exc)
        if error is not None:
            raise error from exc
        raise
    backoff = Backoff(initial=delay, maximum=30.0)
    async with api_client:
        cluster = ClusterClient(api_client)
        for what, call in (
            ("reading namespace kube-system", lambda: cluster.read_namespace("kube-system")),
            ("listing dynamicquotapolicies", cluster.list_policies),
        ):
            while True:
                try:
                    await call()
                    break
                except Exception as exc:
                    error = explain(exc, what)
                    refused = _refused_for_now(exc)
                    if not (_unreachable(exc) or refused) or (
                        attempts is not None and backoff.failures + 1 >= attempts
                    ):
                        if error is not None:
                            raise error from exc
                        raise
                    wait = backoff.next_delay()
                    log.log(
                        logging.ERROR if refused else logging.WARNING,
                        "%s (attempt %d); retrying in %.1f s",
                        error or f"{what}: {exc}",
                        backoff.failures,
                        wait,
                    )
                    await asyncio.sleep(wait)


def settings_from_args(args: argparse.Namespace) -> Settings:
    """:class:`Settings` from the environment, overridden by the flags given to ``run``.

    Raises ``pydantic.ValidationError`` on a malformed value.
    """
    overrides = {
        key: value
        for key, value in vars(args).items()
        if key in Settings.model_fields and value is not None
    }
    return Settings(**overrides)


def cmd_run(args: argparse.Namespace) -> int:
    """Run the operator until SIGINT/SIGTERM."""
    from dynquota.operator.runtime import run

    settings = settings_from_args(args)
    _setup_logging(settings)
    asyncio.run(_preflight(settings))
    asyncio.run(run(settings))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """Print what the operator would do now (read-only), with the running release's settings.

    The settings come from the release's operator Deployment
    (:mod:`dynquota.operator.release`: found by the chart's labels, narrowed by ``--release``
    and ``--release-namespace``); with ``--local``, or when no release is found (said on the
    first line), from the local ``DYNQUOTA_*`` environment. ``--operator-namespace``
    overrides the operator's own namespace either way.

    Raises:
        UserError: several releases match, RBAC refusal, unreachable API, CRD missing.
    """
    from kubernetes.client.exceptions import ApiException

    from dynquota.operator.plan import build_plan, format_plan, read_cluster
    from dynquota.operator.release import (
        ReleaseNotFoundError,
        describe,
        find_release,
        release_settings,
    )

    api = _guard("connecting", lambda: _sync_client(args.kubeconfig))
    header: list[str] = []
    source: dict[str, Any] = {}
    with api:
        if args.local:
            settings = Settings()
            header.append("settings: the local environment (--local, DYNQUOTA_*)")
            source = {"from": "local"}
        else:
            try:
                deployment = find_release(api, args.release, args.release_namespace)
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
                forbidden = isinstance(exc, ApiException) and exc.status == 403
                hint = " (or plan with --local settings)" if forbidden else ""
                raise UserError(f"{error}{hint}") from exc
            else:
                release = _guard(
                    "reading the release's settings", lambda: release_settings(api, deployment)
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
        snapshot = _guard(
            "reading the cluster (dynamicquotapolicies...)", lambda: read_cluster(api)
        )
    plan = build_plan(snapshot, settings)
    if args.namespace:
        plan = plan.only(args.namespace)
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
        }
        print(json.dumps(document, indent=2))
    else:
        print(format_plan(plan, [*header, ""]))
    return 0


def cmd_override(args: argparse.Namespace) -> int:
    """Request (or with --off cancel) the tenant override on NAMESPACE's managed quota."""
    import kubernetes

    from dynquota.kube.quotas import MANAGED_BY_LABEL, MANAGED_BY_VALUE, MANAGED_QUOTA_NAME
    from dynquota.policy import OVERRIDE, OVERRIDE_EXPIRES_AT

    api = _guard("connecting", lambda: _sync_client(args.kubeconfig))
    with api:
        core: Any = kubernetes.client.CoreV1Api(api)
        try:
            quota = core.read_namespaced_resource_quota(
                MANAGED_QUOTA_NAME, args.namespace, _request_timeout=REQUEST_TIMEOUT
            )
        except kubernetes.client.exceptions.ApiException as exc:
            if exc.status == 404:
                raise UserError(
                    f"namespace {args.namespace} has no managed quota {MANAGED_QUOTA_NAME} "
                    "(not managed, or the kill switch is engaged)"
                ) from exc
            raise explain(exc, f"reading quota in {args.namespace}") or exc from exc
        except Exception as exc:
            raise explain(exc, "connecting") or exc from exc
        labels = quota.metadata.labels or {}
        if labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
            raise UserError(
                f"the quota {MANAGED_QUOTA_NAME} in {args.namespace} is not managed by dynquota"
            )
        value = None if args.off else "max"
        _guard(
            f"annotating quota {MANAGED_QUOTA_NAME} in {args.namespace}",
            lambda: core.patch_namespaced_resource_quota(
                MANAGED_QUOTA_NAME,
                args.namespace,
                {"metadata": {"annotations": {OVERRIDE: value}}},
                _request_timeout=REQUEST_TIMEOUT,
            ),
        )
    if args.off:
        print(f"override cancelled in {args.namespace}: sizing resumes from peak usage")
    else:
        expires = (quota.metadata.annotations or {}).get(OVERRIDE_EXPIRES_AT)
        note = f" (already granted until {expires})" if expires else ""
        print(
            f"override requested in {args.namespace}: every tracked resource to its maximum{note}"
            f" for the configured TTL; the grant (or why not) is an Event: kubectl -n "
            f"{args.namespace} get events --field-selector involvedObject.name="
            f"{MANAGED_QUOTA_NAME}"
        )
    return 0


def cmd_kill_switch(args: argparse.Namespace) -> int:
    """Engage, release or show the kill switch."""
    import kubernetes

    from dynquota.kube.quotas import MANAGED_SELECTOR
    from dynquota.policy import KILL_SWITCH, parse_kill_switch
    from dynquota.policy.state import quoted

    api = _guard("connecting", lambda: _sync_client(args.kubeconfig))
    with api:
        core: Any = kubernetes.client.CoreV1Api(api)
        if args.state == "status":
            namespace = _guard(
                "reading namespace kube-system",
                lambda: core.read_namespace("kube-system", _request_timeout=REQUEST_TIMEOUT),
            )
            raw = (namespace.metadata.annotations or {}).get(KILL_SWITCH)
            reading = parse_kill_switch(raw)
            quotas = _guard(
                "listing managed quotas",
                lambda: core.list_resource_quota_for_all_namespaces(
                    label_selector=MANAGED_SELECTOR, _request_timeout=REQUEST_TIMEOUT
                ),
            )
            state = {True: "ENGAGED", False: "released", None: "INVALID"}[reading.engaged]
            where = f"{KILL_SWITCH}={quoted(raw)}" if raw is not None else f"no {KILL_SWITCH}"
            print(f"kill switch: {state} ({where} on kube-system)")
            if reading.warning:
                print(f"warning: {reading.warning}")
            print(f"managed quotas in the cluster: {len(quotas.items)}")
            return 0
        value = "true" if args.state == "on" else None
        _guard(
            "annotating namespace kube-system",
            lambda: core.patch_namespace(
                "kube-system",
                {"metadata": {"annotations": {KILL_SWITCH: value}}},
                _request_timeout=REQUEST_TIMEOUT,
            ),
        )
    if args.state == "on":
        print("kill switch ENGAGED: the operator deletes every managed quota and creates none")
    else:
        print("kill switch released: the operator re-creates quotas for every managed namespace")
    return 0


def _selector_string(selector: Any) -> str:
    """A ``V1LabelSelector`` as label-selector text (``a=b,c in (d,e),!f``)."""
    parts = [f"{k}={v}" for k, v in sorted((selector.match_labels or {}).items())]
    for requirement in selector.match_expressions or []:
        values = ",".join(requirement.values or [])
        parts.append(
            {
                "In": f"{requirement.key} in ({values})",
                "NotIn": f"{requirement.key} notin ({values})",
                "Exists": requirement.key,
                "DoesNotExist": f"!{requirement.key}",
            }[requirement.operator]
        )
    return ",".join(parts)


def _owned_by(pod: Any, deployment: str) -> bool:
    """Whether ``pod`` is controlled by a ReplicaSet of ``deployment``
    (``<deployment>-<pod-template-hash>``)."""
    for ref in pod.metadata.owner_references or []:
        if ref.kind == "ReplicaSet" and ref.controller and ref.name.startswith(f"{deployment}-"):
            return True
    return False


def cmd_cleanup(args: argparse.Namespace) -> int:
    """Delete every managed quota (the chart's uninstall hook); optionally stop the operator
    first. Without --yes only lists what it would delete.

    ``--scale-down`` patches the Deployment to ``replicas: 0`` *and* a RollingUpdate strategy
    (maxSurge 0, maxUnavailable 100%): a Recreate Deployment caught with two active ReplicaSets
    (an unfinished rollout that was reverted) ignores ``replicas`` — upstream
    ``pkg/controller/deployment/sync.go`` ``scale()`` scales several active ReplicaSets
    proportionally only for RollingUpdate — so a plain scale to 0 would never remove its pods.
    It then waits at most ``--timeout`` seconds for the pods of the Deployment's ReplicaSets;
    every API call has a 30 s request timeout, so the command never hangs.

    Quotas: lists the managed ones by label and name
    (:func:`dynquota.kube.cleanup.list_managed_quotas`) and deletes them in parallel (at most
    ``--concurrency`` in flight), rate-limited (``--qps``, default
    ``$DYNQUOTA_KILL_SWITCH_DELETE_QPS``), each with a ``uid`` precondition (one replaced
    meanwhile by another object is left alone), within a deadline derived from the count
    (``ceil(count / qps) + 30`` s, or ``--deadline``), printing a progress line every
    ``--progress-interval`` seconds (:func:`dynquota.kube.cleanup.delete_managed_quotas`).
    Lists again until a list comes back empty, at most :data:`CLEANUP_ROUNDS` times.

    Raises:
        UserError: RBAC refusal (401/403), unreachable API, pods left at the deadline, the
            delete deadline passed, or managed quotas still present after the last round
            (exit 2).
    """
    import time

    import kubernetes

    settings = Settings()
    qps = args.qps if args.qps is not None else settings.kill_switch_delete_qps
    if qps <= 0:
        raise UserError(f"--qps must be positive: {qps:g}")
    if args.concurrency < 1:
        raise UserError(f"--concurrency must be at least 1: {args.concurrency}")
    timeout = 30.0  # seconds, per API request
    api = _guard("connecting", lambda: _sync_client(args.kubeconfig))
    with api:
        core: Any = kubernetes.client.CoreV1Api(api)
        apps: Any = kubernetes.client.AppsV1Api(api)
        if args.scale_down:
            namespace = settings.namespace
            if not namespace:
                raise UserError("--scale-down needs DYNQUOTA_NAMESPACE (the operator's namespace)")
            if args.yes:
                deployment = _guard(
                    f"reading deployment {namespace}/{args.scale_down}",
                    lambda: apps.read_namespaced_deployment(
                        args.scale_down, namespace, _request_timeout=timeout
                    ),
                )
                stop = {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "100%"},
                }
                _guard(
                    f"scaling deployment {namespace}/{args.scale_down}",
                    lambda: apps.patch_namespaced_deployment(
                        args.scale_down,
                        namespace,
                        {"spec": {"replicas": 0, "strategy": stop}},
                        _request_timeout=timeout,
                    ),
                )
                selector = _selector_string(deployment.spec.selector)
                print(f"scaled deployment {namespace}/{args.scale_down} to 0; waiting for its pods")
                deadline = time.monotonic() + args.timeout
                while True:
                    listed = _guard(
                        f"listing pods in {namespace}",
                        lambda: core.list_namespaced_pod(
                            namespace, label_selector=selector, _request_timeout=timeout
                        ),
                    ).items
                    # other pods of the release carry the same labels (this hook's own pod,
                    # a `helm test` pod): only pods of the Deployment's ReplicaSets count
                    pods = [p for p in listed if _owned_by(p, args.scale_down)]
                    if not pods:
                        break
                    if time.monotonic() > deadline:
                        names = ", ".join(sorted(p.metadata.name for p in pods))
                        raise UserError(
                            f"{len(pods)} pods of deployment {namespace}/{args.scale_down} "
                            f"still present after {args.timeout:.0f} s ({names}); is "
                            "kube-controller-manager running?"
                        )
                    time.sleep(1)
                print(f"operator pods gone ({selector})")
            else:
                print(f"would scale deployment {namespace}/{args.scale_down} to 0")
    return asyncio.run(_cleanup_quotas(args, qps))


CLEANUP_ROUNDS = 3
"""``dynquota cleanup --yes`` lists and deletes at most this many times until a list of
managed quotas comes back empty (a quota re-created meanwhile is found by the next list)."""


async def _cleanup_quotas(args: argparse.Namespace, qps: float) -> int:
    """The quota part of ``cleanup``: list, then (with ``--yes``) delete in rounds."""
    from dynquota.kube.cleanup import (
        CleanupReport,
        ListedQuota,
        Outcome,
        deadline_for,
        delete_managed_quotas,
        list_managed_quotas,
    )
    from dynquota.kube.client import new_api_client
    from dynquota.kube.quotas import MANAGED_QUOTA_NAME

    try:
        api_client = await new_api_client(args.kubeconfig or None)
    except Exception as exc:
        raise explain(exc, "connecting") or exc from exc

    async def listed() -> list[ListedQuota]:
        try:
            return await list_managed_quotas(api_client)
        except Exception as exc:
            raise explain(exc, "listing managed quotas") or exc from exc

    def on_result(quota: ListedQuota, outcome: Outcome, detail: str) -> None:
        where = f"resourcequota {quota.namespace}/{MANAGED_QUOTA_NAME}"
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

    async with api_client:
        if not args.yes:
            quotas = await listed()
            for quota in quotas:
                print(f"would delete resourcequota {quota.namespace}/{MANAGED_QUOTA_NAME}")
            print(
                f"{len(quotas)} managed quotas; run with --yes to delete them (at {qps:g}/s: "
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
                f"deleting {len(quotas)} managed quotas at {qps:g}/s, {args.concurrency} in "
                f"parallel; deadline {deadline:.0f} s",
                flush=True,
            )
            try:
                report = await delete_managed_quotas(
                    api_client,
                    quotas,
                    qps=qps,
                    concurrency=args.concurrency,
                    deadline=deadline,
                    on_result=on_result,
                    on_progress=on_progress,
                    progress_interval=args.progress_interval,
                )
            except Exception as exc:
                raise explain(exc, "deleting managed quotas") or exc from exc
            total.add(report)
            if report.left:
                raise UserError(
                    f"deadline of {deadline:.0f} s passed with {len(report.left)} of "
                    f"{len(quotas)} managed quotas not deleted (rate {qps:g}/s); deleted so "
                    f"far: {len(total.deleted)}. Run `dynquota cleanup --yes` again (it "
                    "continues), or give more time with --deadline"
                )
        else:
            left = sorted(q.namespace for q in await listed())
            if left:
                failed = "".join(
                    f"; {ns}: {total.failed[ns]}" for ns in left[:3] if ns in total.failed
                )
                raise UserError(
                    f"{len(left)} managed quotas still present after {CLEANUP_ROUNDS} rounds "
                    f"(in {', '.join(left[:10])}{', ...' if len(left) > 10 else ''}): "
                    f"something keeps creating them (is an operator still running?) or "
                    f"their deletes fail{failed}"
                )
    print(
        f"deleted {len(total.deleted)} managed quotas"
        f" ({len(total.gone)} already gone, {len(total.replaced)} replaced meanwhile and "
        "left alone)"
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the demo on a local control plane.

    Raises:
        UserError: the ``testing`` extra is not installed (as in the operator image).
    """
    try:
        from dynquota.demo import main as demo_main
    except ImportError as exc:
        raise UserError(
            f"dynquota demo needs the 'testing' extra ({exc.name or exc} is not installed) and "
            "a dynquota source checkout: it builds and starts a local control plane from the "
            "repository (git clone, then `make demo`); the operator image does not include it"
        ) from exc
    return demo_main(fast=args.fast, picture=args.picture)


# -- parser ------------------------------------------------------------------------------------


def build_parser(prog: str = "dynquota") -> argparse.ArgumentParser:
    """The argument parser of ``dynquota`` (``prog``: the command name its messages show)."""
    from dynquota import __version__

    parser = argparse.ArgumentParser(
        prog=prog, description="Size one ResourceQuota per namespace from observed usage."
    )
    parser.add_argument("--version", action="version", version=f"dynquota {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run the operator")
    run.add_argument("--kubeconfig", help="kubeconfig path (default: $KUBECONFIG or in-cluster)")
    run.add_argument("--dry-run", action="store_true", default=None, help="write no quota")
    run.add_argument("--namespace", help="the operator's own namespace (excluded; Lease home)")
    run.add_argument("--exclude-namespaces", help="comma list of namespaces never managed")
    run.add_argument("--include-namespaces", help="comma list: manage only these")
    run.add_argument("--metrics-port", type=int, help="Prometheus /metrics port (0: off)")
    run.add_argument("--probe-port", type=int, help="liveness /healthz port (0: off)")
    run.add_argument("--override-ttl", help="tenant override lifetime, e.g. 168h")
    run.add_argument(
        "--leader-election", action="store_true", default=None, help="gate writes on a Lease"
    )
    run.add_argument("--lease-name", help="name of the Lease")
    run.add_argument("--pod-name", help="identity in the Lease (default: hostname)")
    run.add_argument("--watch-timeout-seconds", type=int, help="server-side watch timeout")
    run.add_argument("--kill-switch-delete-qps", type=float, help="kill-switch delete rate")
    run.add_argument("--resync-seconds", type=int, help="re-queue every namespace this often")
    run.add_argument("--log-level", help="DEBUG, INFO, WARNING or ERROR")
    run.add_argument("--log-format", help="text or json")
    run.set_defaults(handler=cmd_run)

    plan = commands.add_parser("plan", help="show what the operator would do now (read-only)")
    plan.add_argument("--kubeconfig")
    plan.add_argument("-n", "--namespace", action="append", help="only these namespaces")
    plan.add_argument(
        "--operator-namespace", default="", help="the operator's namespace (excluded)"
    )
    plan.add_argument(
        "--release", help="the Helm release whose settings to use (default: the only one)"
    )
    plan.add_argument("--release-namespace", help="the namespace of that release")
    plan.add_argument(
        "--local",
        action="store_true",
        help="use the local DYNQUOTA_* environment instead of the release's settings",
    )
    plan.add_argument("-o", "--output", choices=("table", "json"), default="table")
    plan.set_defaults(handler=cmd_plan)

    override = commands.add_parser(
        "override",
        help="request the tenant override (it lasts the configured TTL: the governing policy's "
        "spec.override.ttl, else the operator's overrideTTL)",
    )
    override.add_argument("namespace")
    override.add_argument("--off", action="store_true", help="cancel the override")
    override.add_argument("--kubeconfig")
    override.set_defaults(handler=cmd_override)

    kill = commands.add_parser("kill-switch", help="the admin kill switch")
    kill.add_argument("state", choices=("on", "off", "status"))
    kill.add_argument("--kubeconfig")
    kill.set_defaults(handler=cmd_kill_switch)

    cleanup = commands.add_parser(
        "cleanup", help="delete every managed quota (after uninstalling the operator)"
    )
    cleanup.add_argument("--yes", action="store_true", help="really delete (else: list)")
    cleanup.add_argument(
        "--scale-down",
        metavar="DEPLOYMENT",
        help="first scale this operator Deployment (in $DYNQUOTA_NAMESPACE) to 0 and wait",
    )
    cleanup.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for pods")
    cleanup.add_argument(
        "--qps",
        type=float,
        help="deletes per second at most (default: $DYNQUOTA_KILL_SWITCH_DELETE_QPS, 20)",
    )
    cleanup.add_argument(
        "--concurrency", type=int, default=16, help="deletes in flight at most (default 16)"
    )
    cleanup.add_argument(
        "--deadline",
        type=float,
        help="seconds for the deletes of one round (default: count / qps + 30)",
    )
    cleanup.add_argument(
        "--progress-interval",
        type=float,
        default=5.0,
        help="seconds between two progress lines (default 5)",
    )
    cleanup.add_argument("-v", "--verbose", action="store_true", help="one line per deleted quota")
    cleanup.add_argument("--kubeconfig")
    cleanup.set_defaults(handler=cmd_cleanup)

    demo = commands.add_parser("demo", help="run the demo on a local control plane")
    demo.add_argument(
        "--fast", action="store_true", help="shorter scenario (for tests), about 2 minutes"
    )
    demo.add_argument(
        "--picture",
        type=Path,
        help="where to write the picture of hard and usage over time (PNG, or SVG by suffix; "
        "default: a new file under $TMPDIR/dynquota-demo/)",
    )
    demo.set_defaults(handler=cmd_demo)
    return parser


def _fail(message: str, code: int) -> NoReturn:
    print(f"dynquota: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None, prog: str = "dynquota") -> int:
    """Entry point of the ``dynquota`` console script; returns the exit code.

    ``prog``: the command name usage and errors show (``python -m dynquota``,
    ``kubectl dynquota``)."""
    args = build_parser(prog).parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except UserError as exc:
        _fail(str(exc), 2)
    except ValidationError as exc:
        _fail(f"invalid setting: {exc}", 2)
    except KeyboardInterrupt:
        return 130


def kubectl_plugin() -> int:
    """Entry point of the ``kubectl-dynquota`` console script: on ``$PATH`` it makes
    ``kubectl dynquota plan`` (any command) work as a kubectl plugin; kubectl passes the
    arguments after ``dynquota`` unchanged."""
    return main(prog="kubectl dynquota")


if __name__ == "__main__":
    raise SystemExit(main())
