"""The server-side Lease fence (issue 24, case 3): the chart's ValidatingAdmissionPolicy with the
operator's Lease as its parameter refuses a write by the operator's ServiceAccount from a pod
that is not the Lease's holder — checked by the apiserver at admission, after every client-side
check. The operators authenticate with tokens bound to Pod objects named after their
``pod_name`` (dynquota.testing.podtoken), as a real replica's projected token is.

v0.2 had only the client-side check: a replica paused after it wrote when it resumed.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from dynquota._k8s.errors import ApiError
from dynquota.operator.ports import WRITE_TIMEOUT
from dynquota.policy import Decision
from dynquota.testing.chart import render_lease_fence
from dynquota.testing.operator import (
    MANAGED_LABELS,
    OPERATOR_NS,
    OPERATOR_SA,
    OperatorCluster,
    OperatorThread,
)
from dynquota.testing.podtoken import pod_kubeconfig
from dynquota.testing.wait import WaitTimeoutError, wait_until

pytestmark = pytest.mark.integration

StartOperator = Callable[..., OperatorThread]
LEASE = "dynquota"
PODS = {
    "bufferPercent": 40,
    "minimum": 10,
    "maximum": 100,
    "upscaleCooldown": "1s",
    "downscaleCooldown": "1h",
}


def core_for(c: OperatorCluster, pod: str, tmp: Any) -> Any:
    """A CoreV1Api authenticating as the operator's ServiceAccount, bound to Pod ``pod``."""
    path = pod_kubeconfig(c.cp, c.core, tmp, (OPERATOR_NS, OPERATOR_SA), pod)
    return kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=path))


def probe(core: Any, ns: str) -> int:
    """A server-side dry-run create of the managed quota ``dynquota`` (labelled as dynquota's:
    what the fence selects; the operator's RBAC and the chart's operator-writes policy allow it)
    in ``ns``, which has none: the HTTP status (201 admitted, 403 refused)."""
    body = {
        "metadata": {"name": "dynquota", "labels": MANAGED_LABELS},
        "spec": {"hard": {"pods": "1"}},
    }
    try:
        core.create_namespaced_resource_quota(ns, body, dry_run="All", _request_timeout=10)
    except ApiException as exc:
        REFUSALS[int(exc.status)] = str(exc.body)[:400]  # the last of each status, for a report
        return int(exc.status)
    return 201


REFUSALS: dict[int, str] = {}
"""The body of the last refusal per HTTP status (a failing test prints them: who refused)."""


def set_holder(c: OperatorCluster, holder: str) -> None:
    c.cp.kubectl(
        "patch", "lease", LEASE, "-n", OPERATOR_NS, "--type=merge",
        "-p", f'{{"spec": {{"holderIdentity": "{holder}"}}}}',
    )  # fmt: skip


@pytest.fixture
def fence(op_cluster: OperatorCluster) -> Iterator[None]:
    """The chart's Lease fence installed for one test; removed afterwards with the Lease."""
    c = op_cluster
    rendered = render_lease_fence(c.cp, OPERATOR_NS)
    c.cp.kubectl("apply", "-f", "-", input=rendered)
    yield
    # every fence the template renders (the wake's too): a fence left on this session's control
    # plane refused a later test's wake marks (CI)
    c.cp.kubectl("delete", "-f", "-", "--ignore-not-found", input=rendered)
    c.cp.kubectl("delete", "lease", LEASE, "-n", OPERATOR_NS, "--ignore-not-found")


class LeaseFenceRaceError(AssertionError):
    """The paused write met a 409 first (rerun by ``make test``: not a fence failure)."""


def test_the_old_leaders_write_after_its_check_is_refused_by_the_apiserver(
    op_cluster: OperatorCluster,
    scope: dict[str, str],
    start_operator: StartOperator,
    fence: None,
    tmp_path: Any,
) -> None:
    c = op_cluster
    suffix = uuid.uuid4().hex[:6]
    old, new = f"fence-a-{suffix}", f"fence-b-{suffix}"
    ns = c.new_namespace(scope)
    c.create_pods(ns, 5)
    c.policy("p-fence", scope, pods=PODS)
    op = start_operator(leader_election=True, pod_name=old)
    c.wait_hard(ns, {"pods": "10", "configmaps": "50"})  # the holder's create: admitted
    runtime = op.runtime
    assert runtime is not None
    operator = runtime.operator

    old_core = core_for(c, old, tmp_path)  # the paused replica's identity, for a probe
    bare = c.new_namespace()  # no quota there: the probe's dry-run create meets only admission
    checked, proceed = threading.Event(), threading.Event()
    seen: list[tuple[str, bool]] = []
    refused: list[ApiError] = []

    async def pause_after_the_check(namespace: str, decision: Decision) -> None:
        # the upscale to 13 (9 pods): decided once every pod was created and charged, so no
        # admission bumps the quota's resourceVersion under the paused patch (a 409 first)
        if namespace != ns or decision.hard.get("pods") != 13 or checked.is_set():
            return
        seen.append((decision.action, operator.gate.can_write(WRITE_TIMEOUT)))
        # paused (SIGSTOP, a VM pause): the whole replica, so its elector does not notice the
        # Lease change either — its leadership stays valid by its own clock (valid_until), and
        # a write retried after a 409 passes the client-side check again
        assert runtime._leader_task is not None
        runtime._leader_task.cancel()
        checked.set()
        await asyncio.to_thread(proceed.wait, 60)

    real = operator.quotas
    real_patch = real.patch

    conflicts: list[ApiError] = []

    async def recording_patch(*args: Any, **kwargs: Any) -> Any:
        try:
            return await real_patch(*args, **kwargs)
        except ApiError as exc:
            # a conflict is read and decided again
            (conflicts if exc.status == 409 else refused).append(exc)
            raise

    # every part writes through the one QuotaStore the operator was built with
    real.patch = recording_patch  # type: ignore[method-assign]
    operator.writer.after_check = pause_after_the_check
    c.create_pods(ns, 4)  # 9 pods: an upscale to 13
    assert checked.wait(60), "the upscale reached the write"
    assert seen == [("patch", True)]  # every client-side check passed
    set_holder(c, new)  # another replica took the Lease meanwhile
    # the fence's parameter informer lags the Lease (test_residual_window_of_the_fence): wait
    # until the apiserver refuses the old holder, or the paused patch may land in that window
    # (CI: admitted, nothing refused)
    wait_until(
        lambda: (
            probe(old_core, bare) == 403 and f"pod {old} is not the holder" in REFUSALS.get(403, "")
        ),
        "the apiserver's fence sees the new holder",
        timeout=30,
    )
    proceed.set()
    try:
        wait_until(lambda: refused, "the old leader's patch answered", timeout=30)
    except WaitTimeoutError as exc:
        if conflicts:
            # the quota's resourceVersion moved under the pause (a status write): the patch
            # was decided again after a 409, by which time this replica's own lease clock may
            # have run out and its client-side gate held the write: not the fence's failure
            raise LeaseFenceRaceError(
                f"a 409 under the pause, then no write: {conflicts[0]}"
            ) from exc
        raise
    operator.writer.after_check = None
    assert refused[0].status == 403
    assert f"pod {old} is not the holder of Lease {OPERATOR_NS}/{LEASE}" in str(refused[0])
    assert f"(held by {new})" in str(refused[0])
    assert c.hard(ns) == {"pods": "10", "configmaps": "50"}


def test_residual_window_of_the_fence(
    op_cluster: OperatorCluster, scope: dict[str, str], fence: None, tmp_path: Any
) -> None:
    """How long the apiserver still admits the old holder after ``holderIdentity`` changed:
    its view of the Lease (the policy's parameter informer) lags the Lease. 20 handovers; the
    figures are printed (docs/operator.md) and bounded here."""
    c = op_cluster
    ns = c.new_namespace(scope)
    suffix = uuid.uuid4().hex[:6]
    a, b = f"fence-x-{suffix}", f"fence-y-{suffix}"
    cores = {a: core_for(c, a, tmp_path), b: core_for(c, b, tmp_path)}
    # apply, not create: an operator of another test on this control plane may have left
    # its Lease `dynquota` (CI: AlreadyExists)
    c.cp.kubectl(
        "apply", "-f", "-",
        input=(
            "apiVersion: coordination.k8s.io/v1\nkind: Lease\n"
            f"metadata: {{name: {LEASE}, namespace: {OPERATOR_NS}}}\n"
            f"spec: {{holderIdentity: {a}, leaseDurationSeconds: 15}}\n"
        ),
    )  # fmt: skip
    # admitted without the fence, refused before its binding sees the Lease: wait for both
    seen: list[tuple[int, int]] = []

    def active() -> bool:
        seen.append((probe(cores[a], ns), probe(cores[b], ns)))
        return seen[-1] == (201, 403)

    try:
        wait_until(active, "the fence active: the holder admitted, the other refused", 60)
    except WaitTimeoutError:
        lease = c.cp.kubectl("get", "lease", LEASE, "-n", OPERATOR_NS, "-o", "yaml")
        raise AssertionError(
            f"(holder, other) answers {sorted(set(seen))}; last refusals {REFUSALS}; {lease}"
        ) from None
    windows: list[float] = []
    late: list[int] = []  # the old holder's writes admitted after the change, per handover
    holder = a
    for _ in range(20):
        previous, holder = holder, (b if holder == a else a)
        set_holder(c, holder)  # returns once the apiserver committed it
        changed = time.monotonic()
        admitted = 0
        while probe(cores[previous], ns) != 403:
            admitted += 1
            assert time.monotonic() - changed < 10
        windows.append(time.monotonic() - changed)
        late.append(admitted)
        assert probe(cores[holder], ns) == 201
    print(
        f"lease fence residual window over {len(windows)} handovers: "
        f"median {statistics.median(windows) * 1000:.0f} ms, "
        f"max {max(windows) * 1000:.0f} ms; old holder's writes admitted after the change: "
        f"{sum(late)}"
    )
    assert max(windows) < 2.0
