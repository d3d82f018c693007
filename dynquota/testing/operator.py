"""Running the operator against a local control plane: identity, admin helpers, a thread.

Used by the operator's integration tests, its benchmarks and ``dynquota demo``; never by the
operator itself.

- :func:`install_operator` applies the CRD, the operator's namespace and the chart's RBAC
  (ServiceAccount, ClusterRole and binding, leader-election Role) and its operator-confinement
  admission policy (rendered with ``helm template`` from ``helm/dynquota``), and returns a
  kubeconfig holding a TokenRequest token of that ServiceAccount: the operator runs with the
  chart's least privilege and under its confinement policy, never as cluster admin.
- :class:`OperatorCluster`: admin-side helpers over the official sync ``kubernetes`` client
  (an independent path from the code under test).
- :class:`OperatorThread`: :func:`dynquota.operator.runtime.run` in a thread with its own
  event loop, so callers stay synchronous.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes.client.exceptions import ApiException

from dynquota.names import (
    APPLIED_PLURAL,
    BUDGET_KIND,
    BUDGET_PLURAL,
    GROUP,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    PLURAL,
    VERSION,
)
from dynquota.operator.runtime import Runtime, run
from dynquota.settings import Settings
from dynquota.testing.chart import APPLIED_CRD, BUDGET_CRD, BUDGET_GUARD, CRD, render_rbac
from dynquota.testing.controlplane import LocalControlPlane
from dynquota.testing.credentials import write_kubeconfig
from dynquota.testing.podtoken import PAUSE as PAUSE  # re-exported: the tests' pod image
from dynquota.testing.podtoken import pod_kubeconfig, service_account_token
from dynquota.testing.quotaaudit import upstream_race_explains
from dynquota.testing.wait import wait_until

OPERATOR_NS = "dynquota-system"
OPERATOR_SA = "dynquota"
MANAGED_LABELS = {MANAGED_BY_LABEL: MANAGED_BY_VALUE}


@dataclass
class OperatorCluster:
    """The operator tests' control plane, with admin helpers (official sync client)."""

    cp: LocalControlPlane
    api: kubernetes.client.ApiClient
    sa_kubeconfig: str
    core: Any = field(init=False)
    apps: Any = field(init=False)
    batch: Any = field(init=False)
    custom: Any = field(init=False)

    def __post_init__(self) -> None:
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.apps = kubernetes.client.AppsV1Api(self.api)
        self.batch = kubernetes.client.BatchV1Api(self.api)
        self.custom = kubernetes.client.CustomObjectsApi(self.api)

    # -- namespaces, policies -----------------------------------------------------------------

    def new_namespace(self, labels: dict[str, str] | None = None) -> str:
        name = f"t-{uuid.uuid4().hex[:8]}"
        self.core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
        # a pod created before the serviceaccount controller made `default` is refused (CI
        # under load: "serviceaccount \"default\" not found")
        wait_until(
            lambda: _try(
                lambda: self.core.read_namespaced_service_account(
                    "default", name, _request_timeout=10
                )
            ),
            f"the default ServiceAccount of {name}",
            timeout=120,  # (a kube-controller-manager just restarted may take a while)
        )
        return name

    def delete_namespace(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            self.core.delete_namespace(name)

    def policy(
        self,
        name: str,
        selector: dict[str, str],
        priority: int = 0,
        dry_run: bool = False,
        extra_spec: dict[str, Any] | None = None,
        **resources: dict[str, Any],
    ) -> dict[str, Any]:
        """Create a DynamicQuotaPolicy over the namespaces labelled ``selector``;
        ``resources``: the profile of each quota key (``pods=...``, ``secrets=...``,
        ``**{"requests.cpu": ...}``); ``extra_spec``: other spec fields (``defaultRequests``)."""
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "DynamicQuotaPolicy",
            "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {"matchLabels": selector},
                "priority": priority,
                "resources": resources,
                "dryRun": dry_run,
                **(extra_spec or {}),
            },
        }
        result: dict[str, Any] = self.custom.create_cluster_custom_object(
            GROUP, VERSION, PLURAL, body
        )
        return result

    def delete_policy(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            self.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)

    def budget(self, name: str, hard: dict[str, Any]) -> str:
        """Create the QuotaBudget ``name`` with ``spec.hard`` = ``hard``; returns ``name``."""
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": BUDGET_KIND,
            "metadata": {"name": name},
            "spec": {"hard": hard},
        }
        self.custom.create_cluster_custom_object(GROUP, VERSION, BUDGET_PLURAL, body)
        return name

    def delete_budget(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            self.custom.delete_cluster_custom_object(GROUP, VERSION, BUDGET_PLURAL, name)

    def get_policy(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        return result

    # -- quotas --------------------------------------------------------------------------------

    def quota(self, ns: str, name: str = "dynquota") -> Any:
        try:
            return self.core.read_namespaced_resource_quota(name, ns)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def hard(self, ns: str) -> dict[str, str] | None:
        quota = self.quota(ns)
        return dict(quota.spec.hard or {}) if quota is not None else None

    def wait_hard(
        self, ns: str, expected: dict[str, str], timeout: float = 60, enforced: bool = True
    ) -> Any:
        """Wait until spec.hard (and, with ``enforced``, status.hard) equals ``expected``."""

        def check() -> Any:
            quota = self.quota(ns)
            if quota is None or dict(quota.spec.hard or {}) != expected:
                return None
            if enforced and dict((quota.status and quota.status.hard) or {}) != expected:
                return None
            return quota

        return wait_until(check, f"hard of {ns} == {expected}", timeout=timeout)

    def annotations(self, ns: str) -> dict[str, str]:
        quota = self.quota(ns)
        assert quota is not None
        return dict(quota.metadata.annotations or {})

    def events(self, ns: str, reason: str | None = None) -> list[Any]:
        items = self.core.list_namespaced_event(ns).items
        return [e for e in items if reason is None or e.reason == reason]

    def wait_event(self, ns: str, reason: str, contains: str = "", timeout: float = 30) -> Any:
        return wait_until(
            lambda: next(
                (e for e in self.events(ns, reason) if contains in (e.message or "")), None
            ),
            f"Event {reason} in {ns} containing {contains!r}",
            timeout=timeout,
        )

    # -- workload ------------------------------------------------------------------------------

    def create_pod(self, ns: str, name: str | None = None) -> None:
        self.core.create_namespaced_pod(
            ns,
            {
                "metadata": {"name": name or f"p-{uuid.uuid4().hex[:8]}"},
                "spec": {"containers": [{"name": "c", "image": PAUSE}]},
            },
            _request_timeout=30,
        )

    def race_explains(self, ns: str, *keys: str) -> contextlib.AbstractContextManager[None]:
        """A failed assertion in the block becomes :class:`UpstreamQuotaRaceError`, which
        ``make test`` reruns, when the audit log (the control plane needs ``audit=True`` with
        :data:`QUOTA_AUDIT_POLICY`) shows the quota controller lowering ``status.used`` of one
        of ``keys`` in ``ns`` meanwhile (kubernetes#123434; :func:`upstream_race_explains`)."""
        return upstream_race_explains(self.cp.audit_log_path, ns, keys)

    def fill_pods(self, ns: str, limit: int = 10_000) -> int:
        """Create pods until the quota refuses one (:func:`fill`); returns how many."""
        return fill(lambda: self.create_pod(ns), limit)

    def create_pods(self, ns: str, count: int) -> None:
        for _ in range(count):
            self.create_pod(ns)

    def delete_pods(self, ns: str, count: int) -> None:
        pods = self.core.list_namespaced_pod(ns).items[:count]
        for pod in pods:
            self.core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)

    def kill_switch(self, value: str | None) -> None:
        self.core.patch_namespace(
            "kube-system", {"metadata": {"annotations": {"dynquota.io/kill-switch": value}}}
        )


def install_operator(cp: LocalControlPlane, workdir: Path, crd: Path = CRD) -> str:
    """Apply the CRD, the namespace ``dynquota-system`` and the chart's RBAC; wait until the
    CRD is established and the ServiceAccount exists; return the path of a kubeconfig (in
    ``workdir``) that authenticates as that ServiceAccount (TokenRequest, 6 h).

    Raises ``subprocess.CalledProcessError`` if kubectl or helm fail.
    """
    api = kubernetes.config.new_client_from_config(config_file=cp.kubeconfig)  # type: ignore[no-untyped-call]
    try:
        core: Any = kubernetes.client.CoreV1Api(api)
        cp.kubectl("apply", "-f", str(crd))
        if BUDGET_CRD.exists():
            cp.kubectl("apply", "-f", str(BUDGET_CRD))
        if APPLIED_CRD.exists():
            cp.kubectl("apply", "-f", str(APPLIED_CRD))
        if not _try(lambda: core.read_namespace(OPERATOR_NS)):
            cp.kubectl("create", "namespace", OPERATOR_NS)
        cp.kubectl("apply", "-f", "-", input=render_rbac(cp, OPERATOR_NS))
        cp.kubectl("wait", "--for=condition=Established", f"crd/{PLURAL}.{GROUP}", "--timeout=60s")
        if BUDGET_CRD.exists():
            cp.kubectl(
                "wait", "--for=condition=Established", f"crd/{BUDGET_PLURAL}.{GROUP}",
                "--timeout=60s",
            )  # fmt: skip
        if APPLIED_CRD.exists():
            cp.kubectl(
                "wait", "--for=condition=Established", f"crd/{APPLIED_PLURAL}.{GROUP}",
                "--timeout=60s",
            )  # fmt: skip
        wait_until(
            lambda: _try(
                lambda: core.read_namespaced_service_account(
                    OPERATOR_SA, OPERATOR_NS, _request_timeout=10
                )
            ),
            "operator ServiceAccount",
        )
        return _kubeconfig(cp, _token(core), workdir / "operator.kubeconfig")
    finally:
        api.close()


def _token(core: Any) -> str:
    return service_account_token(core, OPERATOR_SA, OPERATOR_NS)


def _kubeconfig(cp: LocalControlPlane, token: str, path: Path) -> str:
    return write_kubeconfig(
        path, server=cp.server, ca_file=cp.ca_file, user=OPERATOR_SA, token=token, context="op"
    )


def _try(call: Callable[[], Any]) -> bool:
    try:
        call()
    except ApiException:
        return False
    return True


class OperatorThread:
    """An operator running in a thread (its own event loop) until :meth:`stop`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.runtime: Runtime | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="operator", daemon=True)

    def _main(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await run(self.settings, stop_flag=self._stop, on_runtime=self._got_runtime)

        try:
            asyncio.run(main())
        except BaseException as exc:
            self._error = exc

    def _got_runtime(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def start(self, timeout: float = 60) -> OperatorThread:
        self._thread.start()
        wait_until(
            lambda: (
                self._error is not None
                or (self.runtime is not None and self.runtime.ready.is_set())
            ),
            "operator ready",
            timeout=timeout,
        )
        if self._error is not None:
            raise self._error
        return self

    def crash(self, timeout: float = 30) -> None:
        """Stop without any cleanup a dying process could not do: the loop is torn down
        without giving the Lease up (as after SIGKILL)."""
        assert self.runtime is not None
        gate = self.runtime.gate

        async def no_release() -> None:
            return None

        gate.release = no_release  # type: ignore[method-assign]
        self.stop(timeout)

    def stop(self, timeout: float = 30) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "operator did not stop"
        # Sockets the stopped loop left open (kopf's and the clients' keep-alive connections)
        # are reclaimed here, not at a random later garbage collection inside another test,
        # where pytest would report them as that test's unraisable ResourceWarnings.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        if self._error is not None:
            raise self._error

    def call(self, coro_fn: Callable[[], Any], timeout: float = 30) -> Any:
        """Run ``coro_fn()`` in the operator's loop and return its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro_fn(), self._loop).result(timeout)

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float:
        """A metric sample from the operator's registry (0 when absent)."""
        assert self.runtime is not None
        value = self.runtime.metrics.registry.get_sample_value(name, labels or {})
        return value or 0.0

    def writes(self) -> float:
        """Quota writes so far (create + patch + delete)."""
        return sum(
            self.sample("dynquota_quota_writes_total", {"verb": v})
            for v in ("create", "patch", "delete")
        )

    def idle(self, timeout: float = 30) -> None:
        """Wait until the operator's workqueue has nothing runnable."""
        assert self.runtime is not None
        queue = self.runtime.operator.queue
        self.call(lambda: queue.wait_idle(timeout), timeout=timeout + 5)


QUOTA_CONFLICT_RETRIES = 20
"""Retries of one create that quota admission answered 409 (see :func:`fill`)."""


def fill(create: Callable[[], object], limit: int = 10_000) -> int:
    """Call ``create`` (one create of an object charged to a quota) until quota admission
    refuses one (403 ``exceeded quota``), or the chart's budget guard does (docs/budgets.md);
    returns how many were created, at most ``limit``.

    A 409 Conflict on ``resourcequotas`` is retried, up to :data:`QUOTA_CONFLICT_RETRIES` times
    per object, as every controller does: the apiserver's quota admission lost the race to
    update ``status.used`` (``staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/
    controller.go``, ``checkQuotas``) and created nothing. Any other error raises
    (``ApiException``)."""
    for created in range(limit):
        for attempt in range(QUOTA_CONFLICT_RETRIES + 1):
            try:
                create()
                break
            except ApiException as exc:
                if exc.status == 403 and "exceeded quota" in str(exc.body):
                    return created
                if exc.status in (403, 422) and f"'{BUDGET_GUARD}'" in str(exc.body):
                    return created  # the budget guard: the slice not enforced yet
                if exc.status != 409 or "resourcequotas" not in str(exc.body):
                    raise
                if attempt == QUOTA_CONFLICT_RETRIES:
                    raise
    return limit


def operator_settings(op_cluster: OperatorCluster, **overrides: Any) -> Settings:
    """Short settings for tests (cooldowns come from each test's policy); unless
    ``kubeconfig`` is given, the operator authenticates with a token bound to a Pod named
    after its ``pod_name`` (:func:`~dynquota.testing.podtoken.pod_kubeconfig`)."""
    values: dict[str, Any] = {
        "kubeconfig": op_cluster.sa_kubeconfig,
        "namespace": OPERATOR_NS,
        "metrics_port": 0,
        "probe_port": 0,
        "watch_timeout_seconds": 60,
        "resync_seconds": 10,
        "coalesce_seconds": 0.05,
        "override_ttl": "8s",
        "quota_sync_period": 10,  # the test bed's kube-controller-manager (controlplane.py)
        "kill_switch_delete_qps": 50,
        # tests delete policies to un-manage namespaces: the brake is off unless a test sets it
        "unmanage_brake_share": 1.0,
        "pod_name": f"test-{uuid.uuid4().hex[:6]}",
    }
    values.update(overrides)
    if "kubeconfig" not in overrides:
        # a token bound to a Pod of that name, so the Lease fence applies (when installed)
        values["kubeconfig"] = pod_kubeconfig(
            op_cluster.cp,
            op_cluster.core,
            Path(op_cluster.sa_kubeconfig).parent,
            (OPERATOR_NS, OPERATOR_SA),
            values["pod_name"],
        )
    return Settings(**values)
