"""``dynquota run``: the operator, after a pre-flight check of what it needs.

Flags override the ``DYNQUOTA_*`` environment; they are defined once, with the settings
(:data:`dynquota.settings.RUN_FLAGS`).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import socket

from dynquota.cli.errors import UserError, check_kubeconfig, explain
from dynquota.cli.flags import given
from dynquota.settings import Settings, flag_overrides

__all__ = ["check_impersonation", "check_ports", "cmd_run", "preflight", "settings_from_args"]

log = logging.getLogger("dynquota.cli")


def settings_from_args(args: argparse.Namespace) -> Settings:
    """:class:`Settings` from the environment, overridden by the flags given to ``run``.

    Raises ``pydantic.ValidationError`` on a malformed value.
    """
    return Settings(**flag_overrides(args))


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


async def preflight(settings: Settings, attempts: int | None = None, delay: float = 1.0) -> None:
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


def check_ports(settings: Settings) -> None:
    """Fail early, with one line, when the metrics or probe port (``0``: off) cannot be bound
    on ``0.0.0.0`` (taken by another process): the metrics server starts inside kopf's
    startup, where a bind failure is a traceback retried every 60 s.

    Raises :class:`UserError` (``metrics port 8080 is in use ...``). Racy by nature (the port
    is released before the server binds it): it catches the common case, a second operator
    or another server already listening."""
    for what, port, flag in (
        ("metrics", settings.metrics_port, "--metrics-port/DYNQUOTA_METRICS_PORT"),
        ("probe", settings.probe_port, "--probe-port/DYNQUOTA_PROBE_PORT"),
    ):
        if not port:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
            try:
                probe.bind(("0.0.0.0", port))
            except OSError as exc:
                why = "in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
                raise UserError(
                    f"{what} port {port} is {why}: another process listens there; choose "
                    f"another with {flag} (0 turns it off)"
                ) from exc


def check_impersonation(settings: Settings) -> None:
    """Refuse a kubeconfig whose user impersonates (``as``, ``as-groups``, ``as-uid``,
    ``as-user-extra``): dynquota's own requests would carry the ``Impersonate-*`` headers,
    but kopf's would not (``kopf.ConnectionInfo`` has no field for them), so the operator
    would act as two identities. In a pod (no kubeconfig) nothing is checked.

    Raises :class:`UserError` naming the impersonated user."""
    import os

    from dynquota.kube.identity import KubeconfigMissingError, read_kubeconfig

    if not settings.kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return
    check_kubeconfig(settings.kubeconfig or None)
    try:
        _, identity = read_kubeconfig(settings.kubeconfig or None, None)
    except KubeconfigMissingError:
        return  # no kubeconfig at all: preflight says so, in its words
    except Exception as exc:
        error = explain(exc)
        if error is not None:
            raise error from exc
        raise
    if identity.impersonating:
        who = identity.user or "(no user)"
        raise UserError(
            f"run cannot act as the kubeconfig user's impersonation (as: {who}): kopf's own "
            "requests cannot carry Impersonate-* headers, so the operator would act as two "
            "identities; give run a kubeconfig whose user is the operator's own identity"
        )


def cmd_run(args: argparse.Namespace) -> int:
    """Run the operator until SIGINT/SIGTERM.

    Raises :class:`UserError` (exit 2) for a busy metrics or probe port
    (:func:`check_ports`), identity flags (``run`` acts as its kubeconfig's user, the
    ``as*`` fields of that user included: the chart runs it as its ServiceAccount), and
    what :func:`preflight` finds."""
    from dynquota.operator.runtime import run

    refused = [
        flag
        for flag, dest in (
            ("--context", "context"),
            ("--as", "as_user"),
            ("--as-group", "as_groups"),
            ("--as-uid", "as_uid"),
        )
        if given(args, dest) is not None
    ]
    if refused:
        raise UserError(
            f"run does not take {', '.join(refused)}: the operator acts as its kubeconfig's "
            "current context and user (the user's as/as-groups/as-uid fields apply)"
        )
    if args.kubeconfig is None and given(args, "kubeconfig") is not None:
        args.kubeconfig = given(args, "kubeconfig")  # `dynquota --kubeconfig K run`
    settings = settings_from_args(args)
    check_ports(settings)
    check_impersonation(settings)
    _setup_logging(settings)
    asyncio.run(preflight(settings))
    if not settings.leader_election:
        log.warning(
            "leader election is off (DYNQUOTA_LEADER_ELECTION): this operator writes without a "
            "Lease, so a second one started beside it would write too; the chart turns it on"
        )
    asyncio.run(run(settings))
    return 0
