"""The ``dynquota`` command line.

- ``dynquota run``: the operator (flags override the ``DYNQUOTA_*`` environment, see
  :class:`dynquota.settings.Settings`);
- ``dynquota plan``: a read-only table per namespace and resource: usage, status.used, hard,
  target, next action and why;
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from dynquota.settings import Settings

__all__ = [
    "CleanupReport",
    "UserError",
    "build_parser",
    "check_kubeconfig",
    "delete_managed_quotas",
    "explain",
    "list_managed_quotas",
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

    from dynquota.kube.errors import ApiError, ForbiddenError, NotFoundError, TransportError

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

    from dynquota.kube.errors import ApiError, TransportError

    if isinstance(exc, ApiError):
        return exc.status in (0, 429) or exc.status >= 500
    return isinstance(exc, TransportError | aiohttp.ClientError | ConnectionError | TimeoutError)


def _refused_for_now(exc: BaseException) -> bool:
    """Whether ``exc`` is a 401, 403 or 404 (RBAC, credentials or the CRD): fatal if it
    lasts, but what an apiserver answers for a few seconds after a restart."""
    from dynquota.kube.errors import ApiError

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
    from dynquota.kube.backoff import Backoff
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
    """Print what the operator would do now (read-only)."""
    from dynquota.operator.plan import compute_plan, format_table, read_cluster

    settings = Settings()
    api = _guard("connecting", lambda: _sync_client(args.kubeconfig))
    with api:
        snapshot = _guard(
            "reading the cluster (dynamicquotapolicies...)", lambda: read_cluster(api)
        )
    rows = compute_plan(
        snapshot,
        operator_namespace=args.operator_namespace or settings.namespace,
        override_ttl=settings.override_ttl,
        excluded=frozenset(
            ns["metadata"]["name"]
            for ns in snapshot.namespaces
            if settings.excluded(ns["metadata"]["name"])
        ),
    )
    if args.namespace:
        rows = [r for r in rows if r.namespace in args.namespace]
    if args.output == "json":
        print(json.dumps([r.__dict__ for r in rows], indent=2))
    else:
        print(format_table(rows))
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
            quota = core.read_namespaced_resource_quota(MANAGED_QUOTA_NAME, args.namespace)
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
                "reading namespace kube-system", lambda: core.read_namespace("kube-system")
            )
            raw = (namespace.metadata.annotations or {}).get(KILL_SWITCH)
            reading = parse_kill_switch(raw)
            quotas = _guard(
                "listing managed quotas",
                lambda: core.list_resource_quota_for_all_namespaces(
                    label_selector=MANAGED_SELECTOR
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
                "kube-system", {"metadata": {"annotations": {KILL_SWITCH: value}}}
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

    Quotas: lists the managed ones by label (:func:`list_managed_quotas`) and deletes each with
    a ``uid`` precondition (:func:`delete_managed_quotas`): one replaced meanwhile by another
    object is left alone. Lists again until a list comes back empty, at most
    :data:`CLEANUP_ROUNDS` times.

    Raises:
        UserError: RBAC refusal (403), unreachable API, pods left at the deadline, or managed
            quotas still present after the last round (exit 2).
    """
    import time

    import kubernetes

    from dynquota.kube.quotas import MANAGED_QUOTA_NAME

    settings = Settings()
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
        interval = 1.0 / settings.kill_switch_delete_qps
        if not args.yes:
            quotas = list_managed_quotas(core, timeout)
            for quota in quotas:
                print(f"would delete resourcequota {quota.metadata.namespace}/{MANAGED_QUOTA_NAME}")
            print(f"{len(quotas)} managed quotas; run with --yes to delete them")
            return 0
        report = CleanupReport()
        for _ in range(CLEANUP_ROUNDS):
            quotas = list_managed_quotas(core, timeout)
            if not quotas:
                break
            report.add(delete_managed_quotas(core, quotas, interval=interval, timeout=timeout))
        else:
            left = sorted(q.metadata.namespace for q in list_managed_quotas(core, timeout))
            if left:
                raise UserError(
                    f"{len(left)} managed quotas still present after {CLEANUP_ROUNDS} rounds "
                    f"(in {', '.join(left[:10])}{', ...' if len(left) > 10 else ''}): something "
                    "keeps creating them; is an operator still running?"
                )
    print(
        f"deleted {len(report.deleted)} managed quotas"
        f" ({len(report.gone)} already gone, {len(report.replaced)} replaced meanwhile and "
        "left alone)"
    )
    return 0


CLEANUP_ROUNDS = 3
"""``dynquota cleanup --yes`` lists and deletes at most this many times until a list of
managed quotas comes back empty (a quota re-created meanwhile is found by the next list)."""


@dataclass
class CleanupReport:
    """What :func:`delete_managed_quotas` did, as namespace names.

    ``deleted``: the listed quota was deleted. ``gone``: it no longer existed (404).
    ``replaced``: a quota named ``dynquota`` exists there but is another object (its uid
    differs from the listed one: deleted and re-created meanwhile, e.g. by a user without the
    label), so the uid precondition refused the delete (409) and it was left alone.
    """

    deleted: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)

    def add(self, other: CleanupReport) -> None:
        """Append ``other``'s namespaces to this report."""
        self.deleted += other.deleted
        self.gone += other.gone
        self.replaced += other.replaced


def list_managed_quotas(core: Any, timeout: float = 30.0) -> list[Any]:
    """Every managed quota in the cluster: ResourceQuotas named ``dynquota`` labelled
    ``app.kubernetes.io/managed-by=dynquota``, listed with label and field selectors (one
    consistent list, no ``resourceVersion=0``).

    ``core``: a sync ``kubernetes.client.CoreV1Api``; ``timeout``: seconds per request.
    Returns ``V1ResourceQuota`` objects. Raises :class:`UserError` (RBAC, unreachable).
    """
    from dynquota.kube.quotas import MANAGED_QUOTA_NAME, MANAGED_SELECTOR

    result = _guard(
        "listing managed quotas",
        lambda: core.list_resource_quota_for_all_namespaces(
            label_selector=MANAGED_SELECTOR,
            field_selector=f"metadata.name={MANAGED_QUOTA_NAME}",
            _request_timeout=timeout,
        ),
    )
    items: list[Any] = result.items
    return items


def delete_managed_quotas(
    core: Any, quotas: Sequence[Any], *, interval: float = 0.0, timeout: float = 30.0
) -> CleanupReport:
    """Delete each of ``quotas`` (as listed by :func:`list_managed_quotas`) with a ``uid``
    precondition, so a quota replaced since the list (another object under the same name,
    labelled or not) is never deleted by mistake: the apiserver answers 409 and it is left
    alone. 404 (already gone) is not an error. Prints one line per quota.

    ``core``: a sync ``kubernetes.client.CoreV1Api``; ``interval``: seconds between two
    deletes (the client-side rate limit); ``timeout``: seconds per request.

    Raises:
        UserError: RBAC refusal or unreachable API (the deletes done so far stay done).
        kubernetes.client.exceptions.ApiException: any other refusal.
    """
    import time

    import kubernetes

    from dynquota.kube.quotas import MANAGED_QUOTA_NAME

    report = CleanupReport()
    for i, quota in enumerate(quotas):
        if i and interval > 0:
            time.sleep(interval)
        ns, uid = quota.metadata.namespace, quota.metadata.uid
        where = f"resourcequota {ns}/{MANAGED_QUOTA_NAME}"
        try:
            core.delete_namespaced_resource_quota(
                MANAGED_QUOTA_NAME,
                ns,
                body={"preconditions": {"uid": uid}},
                _request_timeout=timeout,
            )
        except kubernetes.client.exceptions.ApiException as exc:
            if exc.status == 404:
                report.gone.append(ns)
                print(f"{where} already gone")
                continue
            if exc.status == 409:
                report.replaced.append(ns)
                print(f"{where} left alone: replaced since it was listed (uid {uid} is gone)")
                continue
            raise explain(exc, f"deleting {where}") or exc from exc
        except Exception as exc:
            raise explain(exc, f"deleting {where}") or exc from exc
        report.deleted.append(ns)
        print(f"deleted {where} (uid {uid})")
    return report


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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``dynquota``."""
    from dynquota import __version__

    parser = argparse.ArgumentParser(
        prog="dynquota", description="Size one ResourceQuota per namespace from observed usage."
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dynquota`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except UserError as exc:
        _fail(str(exc), 2)
    except ValidationError as exc:
        _fail(f"invalid setting: {exc}", 2)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
