"""Fakes at the operator's ports (:mod:`dynquota.operator.ports`) and the builder of a whole
operator on them (:class:`World`), shared by the operator's unit tests."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Mapping
from typing import Any

from dynquota._k8s.errors import ConflictError, NotFoundError
from dynquota._k8s.workqueue import Outcome
from dynquota.kube.events import ObjectRef
from dynquota.kube.quotas import MANAGED_BY_LABEL, QuotaSnapshot
from dynquota.operator.assembly import Operator
from dynquota.operator.brake import UnmanageBrake
from dynquota.operator.decision import Lineage
from dynquota.operator.ports import (
    BudgetStatusSink,
    LimitRangeReader,
    NamespaceReader,
    NamespaceView,
)
from dynquota.policy import Governance
from dynquota.settings import Settings
from dynquota.usage import PeakWindows

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping):
            _merge(target.setdefault(key, {}), value)
        else:
            target[key] = value


class FakeQuotas:
    """In-memory ResourceQuotas named dynquota, with a write log and injectable failures."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, str]] = []
        self.fail: list[Exception] = []
        self.rv = 100
        self.patch_versions: list[str | None] = []
        self.selectors: list[str | None] = []

    def _snap(self, ns: str) -> QuotaSnapshot:
        return QuotaSnapshot.from_object(self.objects[ns])

    def _maybe_fail(self) -> None:
        if self.fail:
            raise self.fail.pop(0)

    def put(
        self,
        ns: str,
        hard: dict[str, str],
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> None:
        self.rv += 1
        self.objects[ns] = {
            "metadata": {
                "name": "dynquota",
                "namespace": ns,
                "uid": f"uid-{ns}-{self.rv}",
                "resourceVersion": str(self.rv),
                "labels": {MANAGED_BY_LABEL: "dynquota"} if labels is None else labels,
                "annotations": annotations or {},
            },
            "spec": {"hard": dict(hard)},
            "status": {"hard": dict(hard), "used": {}},
        }

    def set_used(self, ns: str, used: dict[str, str]) -> None:
        self.objects[ns]["status"]["used"] = dict(used)

    def hard(self, ns: str) -> dict[str, str]:
        return dict(self.objects[ns]["spec"]["hard"])

    def annotations(self, ns: str) -> dict[str, str]:
        return dict(self.objects[ns]["metadata"].get("annotations") or {})

    async def get(self, namespace: str) -> QuotaSnapshot | None:
        self._maybe_fail()
        return self._snap(namespace) if namespace in self.objects else None

    async def list_managed(self, label_selector: str | None = None) -> list[QuotaSnapshot]:
        """The managed quotas, or those whose labels also match ``label_selector`` (``k=v``
        terms only, as dynquota sends); each call's selector is kept in ``selectors``."""
        self.selectors.append(label_selector)
        terms = [t.split("=", 1) for t in (label_selector or "").split(",") if t]
        return [
            s
            for ns in sorted(self.objects)
            if (s := self._snap(ns)).managed and all(s.labels.get(k) == v for k, v in terms)
        ]

    async def create(
        self, namespace: str, hard: Mapping[str, str], annotations: Mapping[str, str]
    ) -> QuotaSnapshot:
        self._maybe_fail()
        if namespace in self.objects:
            raise ConflictError(409, "AlreadyExists", "exists")
        self.put(namespace, dict(hard), annotations=dict(annotations))
        self.writes.append(("create", namespace))
        return self._snap(namespace)

    async def patch(
        self, namespace: str, body: Mapping[str, Any], resource_version: str | None = None
    ) -> QuotaSnapshot:
        self._maybe_fail()
        if namespace not in self.objects:
            raise NotFoundError(404, "NotFound", "gone")
        self.patch_versions.append(resource_version)
        if resource_version != self.objects[namespace]["metadata"]["resourceVersion"]:
            raise ConflictError(409, "Conflict", "the object has been modified")
        _merge(self.objects[namespace], copy.deepcopy(dict(body)))
        self.rv += 1
        self.objects[namespace]["metadata"]["resourceVersion"] = str(self.rv)
        self.writes.append(("patch", namespace))
        return self._snap(namespace)

    async def delete(self, namespace: str, uid: str | None = None) -> bool:
        self._maybe_fail()
        if namespace not in self.objects:
            return False
        del self.objects[namespace]
        self.writes.append(("delete", namespace))
        return True


class FakeEvents:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str, str]] = []

    async def emit(self, ref: ObjectRef, type_: str, reason: str, message: str) -> bool:
        self.posted.append((ref.namespace or ref.name, type_, reason, message))
        await asyncio.sleep(0)  # a real post is I/O: other tasks run meanwhile
        return True

    def reasons(self, target: str) -> list[str]:
        return [reason for ns, _, reason, _ in self.posted if ns == target]


class FakeUsage:
    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self.expiry: dict[str, float] = {}
        self.synced = True
        self.fresh = True

    def healthy(self, now: float | None = None, margin: float = 60.0) -> bool:
        return self.fresh

    def usage(self, namespace: str, resource: str, now: float | None = None) -> int:
        return self.counts.get((namespace, resource), 0)

    def next_expiry(self, namespace: str, now: float | None = None) -> float | None:
        return self.expiry.get(namespace)


class FakeStatus:
    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def patch_policy_status(self, name: str, status: Mapping[str, Any]) -> None:
        self.patches.append((name, dict(status)))


class Leader:
    def __init__(self, leading: bool = True) -> None:
        self.is_leader = leading
        self.valid_for = float("inf")  # seconds a write may take and still finish leading

    def can_write(self, seconds: float) -> bool:
        return self.is_leader and seconds < self.valid_for


def policy(
    name: str = "p",
    pods: dict[str, Any] | None = None,
    selector: dict[str, Any] | None = None,
    priority: int = 0,
    dry_run: bool = False,
    generation: int = 1,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "generation": generation, "resourceVersion": "1"},
        "spec": {
            "namespaceSelector": selector or {},
            "priority": priority,
            "dryRun": dry_run,
            "resources": {
                "pods": pods
                or {
                    "bufferPercent": 40,
                    "minimum": 10,
                    "maximum": 100,
                    "upscaleCooldown": "60s",
                    "downscaleCooldown": "300s",
                }
            },
        },
    }


def namespace(
    name: str,
    labels: dict[str, str] | None = None,
    rv: int = 1,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": str(rv),
            "labels": labels or {},
            "annotations": annotations or {},
        }
    }


def policy_list(op: Operator, items: list[dict[str, Any]]) -> None:
    """The policies as a full list gives them (what the policy informer's relist does: each
    applied, a stored policy the list lacks deleted, then the synced signal)."""
    names = {str((obj.get("metadata") or {}).get("name") or "") for obj in items}
    for obj in items:
        op.on_policy(None, obj)
    for name in [n for n in op.cluster.policy_records if n not in names]:
        op.on_policy("DELETED", {"metadata": {"name": name}})
    op.on_policies_synced()


class Wired(Operator):
    """The production :class:`~dynquota.operator.assembly.Operator`, plus the read-outs the
    tests' assertions name (each is the part that owns it, looked up)."""

    @property
    def kill_switch(self) -> bool | None:
        return self.switch.state.engaged

    @property
    def views(self) -> dict[str, NamespaceView]:
        return self.reporter.views

    @property
    def peaks(self) -> PeakWindows:
        return self.cluster.peaks

    @property
    def lineage(self) -> Lineage:
        return self.cluster.lineage

    @property
    def brake(self) -> UnmanageBrake:
        return self.writer.brake

    @property
    def _warned(self) -> Mapping[tuple[str, str, str], tuple[str, float]]:
        return self.reporter._warned

    def governance(self, namespace: str) -> Governance | None:
        return self.cluster.governance(namespace)

    def informers_fresh(self) -> bool:
        return self.cluster.informers_fresh()

    async def engage_kill_switch(self) -> int:
        return await self.switch.engage()

    async def write_policy_status(self) -> int:
        return await self.status.write()


class World:
    """One operator on the fakes: the production wiring (:class:`Wired`), with the start-up
    lists done (kube-system read, no policy, no budget). Optional ports: ``limit_ranges``,
    ``budget_status``, ``namespace_reader`` (``None``: as the unit tests of v0.2 ran)."""

    def __init__(
        self,
        *,
        limit_ranges: LimitRangeReader | None = None,
        budget_status: BudgetStatusSink | None = None,
        namespace_reader: NamespaceReader | None = None,
        **settings: Any,
    ) -> None:
        self.clock = Clock()
        self.monotonic: Callable[[], float] | None = None
        self.quotas = FakeQuotas()
        self.events = FakeEvents()
        self.usage = FakeUsage()
        self.status = FakeStatus()
        self.leader = Leader()
        self.limit_ranges = limit_ranges
        self.budget_status = budget_status
        self.namespace_reader = namespace_reader
        # the brake on mass un-management is off unless a test sets it (test_brake.py)
        settings.setdefault("unmanage_brake_share", 1.0)
        self.settings = Settings(metrics_port=0, probe_port=0, coalesce_seconds=0, **settings)
        self.op = self.new_operator()

    def new_operator(self, *, listed: bool = True) -> Wired:
        """A new operator (a restart: no memory) on this world's fakes; ``listed``: its
        start-up lists are done."""
        op = Wired(
            self.settings,
            quotas=self.quotas,
            events=self.events,
            policy_status=self.status,
            gate=self.leader,
            clock=self.clock,
            monotonic=self.monotonic,
            limit_ranges=self.limit_ranges,
            budget_status=self.budget_status,
            namespace_reader=self.namespace_reader,
        )
        op.cluster.usage = self.usage
        if listed:
            op.on_namespace(None, namespace("kube-system"))
            policy_list(op, [])  # the start-up LIST succeeded (tests of holds undo this)
            op.budgets.on_budget_list([])  # as did the budgets' (no budget)
        return op

    async def reconcile(self, ns: str) -> Outcome:
        return await self.op.reconcile(ns)


async def setup_team(world: World, pods: int = 0, **policy_args: Any) -> None:
    world.op.on_policy(None, policy(**policy_args))
    world.op.on_namespace(None, namespace("team-a"))
    world.usage.counts[("team-a", "pods")] = pods


class FakeBudgetStatus:
    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def patch_budget_status(self, name: str, status: Mapping[str, Any]) -> None:
        self.patches.append((name, dict(status)))


def budget(name: str, hard: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "generation": 1},
        "spec": {"hard": hard},
    }


LABELLED = {"app.kubernetes.io/managed-by": "dynquota"}


class FakeLimitRanges:
    """In-memory LimitRanges per namespace, with a call log and injectable failures."""

    def __init__(self) -> None:
        self.objects: dict[str, list[dict[str, Any]]] = {}
        self.calls: list[tuple[str, str]] = []
        self.fail: list[Exception] = []
        self.rv = 500

    def put(self, ns: str, name: str, item: dict[str, Any], labels: dict[str, str]) -> None:
        self.rv += 1
        self.objects.setdefault(ns, []).append(
            {
                "metadata": {"name": name, "labels": labels, "resourceVersion": str(self.rv)},
                "spec": {"limits": [item]},
            }
        )

    async def list_limit_ranges(self, namespace: str) -> list[dict[str, Any]]:
        self.calls.append(("list", namespace))
        return copy.deepcopy(self.objects.get(namespace, []))

    async def create_limit_range(self, namespace: str, item: Mapping[str, Any]) -> None:
        self.calls.append(("create", namespace))
        if self.fail:
            raise self.fail.pop(0)
        self.put(namespace, "dynquota", dict(item), dict(LABELLED))

    async def patch_limit_range(
        self, namespace: str, item: Mapping[str, Any], resource_version: str
    ) -> None:
        self.calls.append(("patch", namespace))
        found = next(o for o in self.objects[namespace] if o["metadata"]["name"] == "dynquota")
        if found["metadata"]["resourceVersion"] != resource_version:
            raise ConflictError(409, "Conflict", "modified")
        found["spec"]["limits"] = [dict(item)]
