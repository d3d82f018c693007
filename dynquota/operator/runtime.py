"""One operator process: start-up order, background tasks, probes, and kopf as plumbing.

:func:`run` builds a :class:`Runtime` and runs kopf (``standalone``, cluster-wide) with a
private registry of activities only — no event or changing handlers, timers or daemons, so
kopf neither watches nor writes anything: ``@kopf.on.startup``/``cleanup`` start and stop
:class:`Runtime`; ``@kopf.on.probe`` is the liveness check; ``@kopf.on.login`` hands kopf the
same credentials as our own client.

Every watched kind is dynquota's own informer, with client-go's semantics (replace on relist,
resourceVersion ordered, tombstones, a synced signal; :mod:`dynquota._k8s.store`):
:class:`~dynquota.kube.objects.ObjectInformers` for Namespaces (-> :meth:`Operator.on_namespace
<dynquota.operator.assembly.Operator.on_namespace>`: labels, termination, the kill switch on
``kube-system``), the ResourceQuotas and LimitRanges named ``dynquota`` (server-side field
selector; -> ``Operator.on_quota``, ``Operator.on_limit_range``), DynamicQuotaPolicies and
QuotaBudgets; the metadata informers of :class:`~dynquota.kube.informer.UsageWatcher` for what
quotas count.

Start-up order (:meth:`Runtime.start`): read ``kube-system`` (a consistent GET, retried
until it succeeds; nothing is written before), start the metadata informers and leader
election (or lead at once: the kill switch needs only the read and the Lease); start the
object informers (until the policies' and budgets' first full lists every managed-quota write
is held; a list never overwrites a newer event: one stream lists, then watches); then in the
background wait for the metadata informers' and the Namespace, quota and LimitRange informers'
first lists, start the workqueue and queue every namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import kopf
from kopf._core.engines.peering import Identity
from kubernetes_asyncio import client
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    wait_exponential_jitter,
)

from dynquota._k8s.clock import ServerClock
from dynquota._k8s.errors import KubeError
from dynquota.kube.admission_guard import AdmissionGuardReader
from dynquota.kube.applied import AppliedClient
from dynquota.kube.client import new_api_client, replica_user_agent
from dynquota.kube.cluster import ClusterClient
from dynquota.kube.events import EventRecorder
from dynquota.kube.flowschema import FlowSchemaClient
from dynquota.kube.informer import UsageWatcher
from dynquota.kube.leader import AlwaysLeader, LeaderGate
from dynquota.kube.objects import (
    LIMIT_RANGES,
    NAMESPACES,
    QUOTAS,
    ObjectInformers,
    Stream,
)
from dynquota.kube.quotas import QuotaClient
from dynquota.kube.workloads import WorkloadClient
from dynquota.metrics import InformerCollector, Metrics, MetricsServer
from dynquota.operator.applied import AppliedWriter
from dynquota.operator.assembly import Operator
from dynquota.operator.ports import KUBE_SYSTEM
from dynquota.operator.wake_wiring import node_informer_for
from dynquota.policy import KILL_SWITCH, parse_kill_switch
from dynquota.settings import Settings

__all__ = ["Runtime", "build_registry", "connection_info", "kopf_settings", "run"]

log = logging.getLogger("dynquota.operator")


def _until_it_succeeds(
    on_failure: Callable[[KubeError, float], None],
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> AsyncRetrying:
    """Retry a start-up read for as long as it fails with a ``KubeError`` (anything else
    propagates), waiting 1 s doubling to 30 s plus up to 1 s of jitter between attempts
    (``sleep``); ``on_failure(error, seconds until the next attempt)`` logs each failure."""

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        assert isinstance(error, KubeError)
        on_failure(error, delay)

    return AsyncRetrying(
        retry=retry_if_exception_type(KubeError),
        wait=wait_exponential_jitter(initial=1.0, max=30.0, jitter=1.0),
        before_sleep=before_sleep,
        sleep=sleep,
    )


class Runtime:
    """Everything one operator replica runs besides kopf itself.

    Args:
        settings: operator settings.
        api_client: kubernetes_asyncio ``ApiClient`` for dynquota's own I/O (not closed).
        metrics: where to report (fresh registry if omitted).
    """

    def __init__(
        self, settings: Settings, api_client: client.ApiClient, metrics: Metrics | None = None
    ) -> None:
        self.settings = settings
        self.api_client = api_client
        self.metrics = metrics if metrics is not None else Metrics()
        observer = self.metrics.observe_api
        self.cluster = ClusterClient(api_client, observer)
        self.gate: LeaderGate | AlwaysLeader
        if settings.leader_election:
            if not settings.namespace:
                raise ValueError("leader election needs DYNQUOTA_NAMESPACE (the Lease's home)")
            self.gate = LeaderGate(
                api_client,
                namespace=settings.namespace,
                name=settings.lease_name,
                identity=settings.pod_name,
                lease_duration=settings.lease_duration_seconds,
                renew_deadline=settings.lease_renew_deadline_seconds,
                retry_period=settings.lease_retry_period_seconds,
                observer=observer,
            )
        else:
            self.gate = AlwaysLeader()
        self.clock = ServerClock()
        """The cluster's time on the monotonic clock, re-anchored to the apiserver's ``Date``."""
        self.informer_clock = ServerClock(monotonic=self.clock.monotonic)
        """The informers' freshness clock: epoch seconds that only advance with the monotonic
        clock, never re-anchored (a re-anchored step would make a dead watch look fresh)."""
        guard = AdmissionGuardReader(api_client, settings.budget_guard_name, observer).seen
        self.operator = Operator(
            settings,
            clock=self.clock,
            monotonic=self.clock.monotonic,
            quotas=QuotaClient(api_client, observer),
            events=EventRecorder(api_client, instance=settings.pod_name, observer=observer),
            policy_status=self.cluster,
            metrics=self.metrics,
            gate=self.gate,
            namespace_reader=self.cluster,
            limit_ranges=self.cluster,
            budget_status=self.cluster,
            workloads=WorkloadClient(api_client, observer),
            budget_guard=lambda: guard(settings.budget_guard_kinds or ()),
            tarpit=FlowSchemaClient(api_client, observer) if settings.tarpit_flow_schema else None,
        )
        operator = self.operator
        self.applied = AppliedWriter(
            AppliedClient(api_client, observer),
            settings=settings,
            namespaces=operator.cluster.namespaces,
            governance=operator.cluster.governance,
            switch=operator.switch.state,
            budgets=operator.budgets,
            leader=self.gate,
            write_gate=operator.write_gate,
            clock=self.clock,
            write_rate=operator.governor.facts,
        )
        """The tenant projections (``AppliedDynamicQuota``), fed after every reconcile."""
        operator.governor.on_change = self.applied.poke
        operator.on_policy_spec = self.applied.policies_changed  # writeRate etc.: shown at once
        operator.reporter.on_reported = self.applied.observe
        operator.budgets.on_status = self.applied.budget_status  # a joiner's figures, promptly
        if isinstance(self.gate, LeaderGate):
            self.gate.on_change = self.operator.on_leadership
        else:
            self.metrics.leader.set(1)
        self.watcher = UsageWatcher.for_cluster(
            api_client,
            on_change=self.operator.on_usage_change,
            on_write=self.operator.governor.observe,
            watch_timeout=settings.watch_timeout_seconds,
            clock=self.informer_clock,
        )
        operator.cluster.usage = self.watcher
        self.objects = ObjectInformers(
            api_client,
            namespaces=Stream(operator.on_namespace, operator.cluster.lineage.synced),
            quotas=Stream(operator.on_quota),
            limit_ranges=Stream(operator.on_limit_range),
            policies=Stream(operator.on_policy, operator.on_policies_synced),
            budgets=Stream(operator.budgets.on_budget, operator.budgets.on_budgets_synced),
            budgets_absent_ok=lambda: operator.cluster.policies_listed,
            watch_timeout=settings.watch_timeout_seconds,
            clock=self.informer_clock,
            on_date=self.clock.observe_date,
        )
        """Namespaces, the quotas and LimitRanges named dynquota, policies and budgets (replace
        on relist); the workqueue starts once the first three listed, and the policies' and
        budgets' first lists hold every write."""
        operator.cluster.objects_fresh = lambda margin: self.objects.healthy(margin)
        self.node_growth_informer = node_informer_for(
            operator.node_growth, api_client, settings, self.informer_clock
        )
        self.metrics.registry.register(
            InformerCollector(lambda: {**self.watcher.stats(), **self.objects.stats()})
        )
        self.metrics_server: MetricsServer | None = None
        self.ready = asyncio.Event()
        """Set once the workqueue runs (informers synced, leadership settled)."""
        self._tasks: list[asyncio.Task[Any]] = []
        self._leader_task: asyncio.Task[Any] | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Read the cluster's state, start informers and the metrics server, then finish
        starting in the background (see the module docs). Returns once ``kube-system`` was
        read. Raises ``OSError`` if the metrics port is taken."""
        await self._prime()
        if self.settings.metrics_port:
            self.metrics_server = MetricsServer(self.metrics, port=self.settings.metrics_port)
            await self.metrics_server.start()
        self.watcher.start()
        if isinstance(self.gate, LeaderGate):
            self._leader_task = asyncio.create_task(self.gate.run(), name="dynquota-leader")
            self._tasks.append(self._leader_task)
        else:
            await self.operator.on_leadership(True)
        self.objects.start()
        if self.node_growth_informer is not None:
            self._tasks.append(
                asyncio.create_task(self.node_growth_informer.run(), name="dynquota-informer-nodes")
            )
        self._tasks.append(asyncio.create_task(self._finish_start(), name="dynquota-start"))

    async def _prime(self) -> None:
        async for attempt in _until_it_succeeds(
            lambda exc, delay: log.warning(
                "reading %s for the kill switch failed (%s); nothing is written until it "
                "succeeds; retrying in %.1f s",
                KUBE_SYSTEM,
                exc,
                delay,
            )
        ):
            with attempt:
                kube_system = await self.cluster.read_namespace(KUBE_SYSTEM)
        value = ((kube_system.get("metadata") or {}).get("annotations") or {}).get(KILL_SWITCH)
        if value is not None and parse_kill_switch(value).engaged is None:
            # invalid at start-up: whether managed quotas exist tells the last valid state
            async for attempt in _until_it_succeeds(
                lambda exc, _: log.warning("listing managed quotas failed (%s); retrying", exc)
            ):
                with attempt:
                    found = await self.operator.quotas.list_managed()
            self.operator.switch.state.managed_quotas_exist = bool(found)
        self.operator.on_namespace(None, kube_system)
        state = {True: "ENGAGED", False: "released", None: "UNKNOWN (nothing is written)"}
        log.info("kill switch is %s", state[self.operator.switch.state.engaged])

    async def _finish_start(self) -> None:
        started = time.monotonic()
        await self.watcher.wait_synced()
        await self.objects.wait_synced(NAMESPACES, QUOTAS, LIMIT_RANGES)
        log.info(
            "informers synced in %.1f s: %d namespaces",
            time.monotonic() - started,
            len(self.operator.cluster.namespaces),
        )
        self.operator.queue.start()
        self.operator.requeue_all()
        self.operator.wake_sweep()
        self.operator.budget_tasks.start()
        self.operator.status.mark_dirty()
        self._tasks.append(asyncio.create_task(self.operator.status.run(), name="dynquota-status"))
        self._tasks.append(asyncio.create_task(self._resync(), name="dynquota-resync"))
        self._tasks.append(asyncio.create_task(self.applied.run(), name="dynquota-applied"))
        if self.operator.governor.enabled:
            self._tasks.append(
                asyncio.create_task(self.operator.governor.run(), name="dynquota-governor")
            )
        self._tasks.append(
            asyncio.create_task(self.operator.stall.run(self.operator.clock), name="dynquota-stall")
        )
        self.ready.set()

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.settings.resync_seconds)
            self.operator.requeue_all()
            self.operator.wake_sweep()

    async def stop(self) -> None:
        """Stop everything started here (idempotent); a leader gives its Lease up."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.operator.queue.stop()
        await self.operator.budget_tasks.stop()
        await self.operator.stop_background()
        await self.operator.waker.stop()
        await self.operator.node_growth.stop()
        # nothing writes any more: give the Lease up before the informers stop, so a rolling
        # update hands over at the standby's next retry whatever their shutdown takes (CI:
        # 14 s, a whole lease duration, with seven informers to stop first)
        await self.gate.release()
        await self.watcher.stop()
        await self.objects.stop()
        if self.metrics_server is not None:
            await self.metrics_server.stop()
            self.metrics_server = None

    def healthy(self) -> bool:
        """Liveness: every informer's list/watch loop made progress (an attempt ended, in
        success or error) within the watch timeout plus the margin, and the leader election
        task (if any) is alive. An unreachable apiserver does not fail it: restarting would
        not help and would lose the in-memory peak history."""
        if self._leader_task is not None and (self._leader_task.done() or not self.gate.healthy()):
            return False  # a dead or stuck elector: no replica may ever write again
        margin = float(self.settings.liveness_margin_seconds)
        return self.watcher.alive(margin=margin) and self.objects.alive(margin=margin)


# -- kopf ------------------------------------------------------------------------------------


async def connection_info(api_client: client.ApiClient) -> kopf.ConnectionInfo:
    """kopf credentials equal to those of ``api_client`` (server, CA, token or client cert)."""
    config: Any = api_client.configuration
    maybe = config.get_api_key_with_prefix("BearerToken")
    header: str | None = await maybe if inspect.isawaitable(maybe) else maybe
    parts = header.split(" ", 1) if header else []
    scheme, token = (
        (None, None) if not parts else (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])
    )
    return kopf.ConnectionInfo(
        server=config.host,
        ca_path=config.ssl_ca_cert,
        insecure=not config.verify_ssl,
        scheme=scheme,
        token=token,
        certificate_path=config.cert_file,
        private_key_path=config.key_file,
        default_namespace="default",
    )


def kopf_settings(settings: Settings) -> kopf.OperatorSettings:
    """kopf settings for dynquota: no Event posting from kopf's loggers, standalone (no
    peering), request timeouts and backoffs like ours (kopf watches nothing: the registry holds
    activities only)."""
    ks = kopf.OperatorSettings()
    ks.posting.enabled = False
    ks.watching.server_timeout = settings.watch_timeout_seconds
    ks.watching.client_timeout = settings.watch_timeout_seconds + 30
    ks.peering.standalone = True
    ks.networking.error_backoffs = [1, 2, 5, 10, 20]
    # kopf's own requests (its lists, Events) get the same bounds as ours: 10 s / 3 s
    ks.networking.request_timeout = 10
    ks.networking.connect_timeout = 3
    return ks


def build_registry(runtime_of: Callable[[Any], Runtime]) -> kopf.OperatorRegistry:
    """A kopf registry with dynquota's handlers; ``runtime_of(memo)`` finds the Runtime."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    async def login(memo: Any, **_: Any) -> kopf.ConnectionInfo:
        return await connection_info(runtime_of(memo).api_client)

    @kopf.on.startup(registry=registry)
    async def startup(memo: Any, **_: Any) -> None:
        await runtime_of(memo).start()

    @kopf.on.cleanup(registry=registry)
    async def cleanup(memo: Any, **_: Any) -> None:
        await runtime_of(memo).stop()

    @kopf.on.probe(id="informers", registry=registry)
    async def probe(memo: Any, **_: Any) -> dict[str, Any]:
        runtime = runtime_of(memo)
        if not runtime.healthy():
            raise kopf.PermanentError(
                "an informer or the elector is stuck: no list/watch attempt ended within the "
                "watch timeout plus margin, or a task died"
            )
        stats = {**runtime.watcher.stats(), **runtime.objects.stats()}
        return {r: s.get("watch_cycles") for r, s in stats.items()}

    # Namespaces, quotas and LimitRanges come from dynquota's own informers (ObjectInformers),
    # not from kopf: its watcher re-lists without DELETED for what vanished and keeps no store.
    return registry


def _drop_thread_signal_warning(record: logging.LogRecord) -> bool:
    """Logging filter: drop kopf's expected "OS signals are ignored: running not in the
    main thread" warning (an operator run in a thread is stopped by its ``stop_flag``)."""
    return not record.getMessage().startswith("OS signals are ignored: running not in the main")


async def run(
    settings: Settings,
    *,
    api_client: client.ApiClient | None = None,
    stop_flag: asyncio.Event | None = None,
    on_runtime: Callable[[Runtime], None] | None = None,
) -> None:
    """Run the operator until ``stop_flag`` is set (or SIGINT/SIGTERM in the main thread).

    ``api_client``: use this client (closed by the caller) instead of one built from
    ``settings.kubeconfig``/in-cluster config (closed here). ``on_runtime`` receives the
    :class:`Runtime` once built (tests, the demo).

    Raises ``kubernetes_asyncio.config.ConfigException`` without a usable configuration.
    """
    if threading.current_thread() is not threading.main_thread():
        # embedded (tests, the demo): stopping is stop_flag's job, not OS signals'
        logging.getLogger("kopf._core.reactor.running").addFilter(_drop_thread_signal_warning)
    own_client = api_client is None
    if api_client is None:
        api_client = await new_api_client(settings.kubeconfig or None)
    # per replica, so the apiserver's audit log tells replicas apart
    api_client.user_agent = replica_user_agent(settings.pod_name)
    try:
        runtime = Runtime(settings, api_client)
        if on_runtime is not None:
            on_runtime(runtime)
        memo = kopf.Memo(runtime=runtime)
        liveness = f"http://0.0.0.0:{settings.probe_port}/healthz" if settings.probe_port else None
        await kopf.operator(
            registry=build_registry(lambda m: m.runtime),
            settings=kopf_settings(settings),
            standalone=True,
            clusterwide=True,
            # kopf derives a default identity from getpass.getuser(), which fails for a uid
            # without a passwd entry (the image's 65532)
            identity=Identity(settings.pod_name),
            liveness_endpoint=liveness,
            memo=memo,
            stop_flag=stop_flag,
        )
    finally:
        if own_client:
            await api_client.close()
