"""``dynquota demo``: the operator on a real local control plane and a real workload.

Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and three kwok-simulated
nodes (:mod:`dynquota.testing.controlplane`; pods are scheduled and run),
installs the CRD, the chart's RBAC and a demo policy with short cooldowns (up 10 s, down 30 s),
runs the operator in-process as the chart's ServiceAccount, and drives:

1. ``demo-web``: a Deployment scaled 5 -> 40 (pods made by the real ReplicaSet controller);
2. ``demo-runaway``: a Deployment with ``replicas: 100000``, throttled one step per cooldown up
   to the maximum, then scaled to 0 and sized down after the window;
3. ``demo-helm``: a burst of 200 ConfigMaps like a Helm install: denied at the quota, the
   tenant requests the override, the burst completes, the override expires (30 s TTL);
4. the kill switch on (every managed quota deleted) and off (re-created);
5. (printed as act 6) two teams under one QuotaBudget (:mod:`dynquota.demo.budget_act`): one
   mints ConfigMaps until refused and gets only the free budget; the other is never squeezed
   below its usage;
6. (printed as act 7) the README's commands (:mod:`dynquota.demo.cli_act`): ``plan --at-risk``
   as the admin, ``status`` as a tenant with only ``admin`` in its namespace.

The ReplicaSet controller backs off exponentially after quota denials and is not woken by a
quota change; the operator wakes the ReplicaSets a quota refused after each raise, and the demo
prints its ``Woken`` Events (it writes nothing on workloads itself). The demo prints a
live table and a closing summary, writes a picture of each namespace's hard and usage over time
(:mod:`dynquota.demo.picture`, with matplotlib when installed) and prints its path, and stops
everything it started.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import kubernetes

from dynquota.demo.picture import SeriesRecorder, default_picture_path, write_picture
from dynquota.demo.scenario import Demo
from dynquota.demo.watch import HELM, RUNAWAY, WEB, Show, Timing
from dynquota.settings import Settings
from dynquota.testing.controlplane import ControlPlaneError, LocalControlPlane
from dynquota.testing.operator import OperatorCluster, OperatorThread, install_operator
from dynquota.testing.wait import WaitTimeoutError

__all__ = ["main"]

DEMO_NODES = 3  # kwok nodes of 110 pods: room for every demo pod
PICTURE_PANELS = (
    (WEB, "pods", "a normal scale-up, in buffer steps"),
    (RUNAWAY, "pods", "a runaway throttled to one step per cooldown, then sized down"),
    (HELM, "configmaps", "a burst denied, the tenant override, its expiry"),
)


def main(fast: bool = False, picture: Path | None = None) -> int:
    """Run the demo; returns the exit code (0 on success). The picture of hard and usage over
    time goes to ``picture`` (default :func:`~dynquota.demo.picture.default_picture_path`)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # the operator runs in a thread here, where kopf cannot install signal handlers: expected
    logging.getLogger("kopf._core.reactor.running").setLevel(logging.ERROR)
    show = Show()
    timing = Timing.fast() if fast else Timing()
    started = time.monotonic()
    print(
        "dynquota demo: a local control plane (etcd, kube-apiserver, kube-controller-manager, "
        f"kube-scheduler and {DEMO_NODES} kwok-simulated nodes: pods run), the operator, a real "
        "workload.",
        flush=True,
    )
    running: list[OperatorThread] = []

    def start_operator(settings: Settings) -> OperatorThread:
        op = OperatorThread(settings)
        running.append(op)
        return op.start()

    try:
        with LocalControlPlane(resource_quota_sync_period=5, nodes=DEMO_NODES) as cp:
            show.line("demo", f"control plane up at {cp.server} (logs: {cp.log_dir})")
            with tempfile.TemporaryDirectory(prefix="dynquota-demo-") as tmp:
                kubeconfig = install_operator(cp, Path(tmp))
                show.line("demo", "CRD, chart RBAC and operator ServiceAccount installed")
                api: Any = kubernetes.config.new_client_from_config(config_file=cp.kubeconfig)  # type: ignore[no-untyped-call]
                demo = Demo(OperatorCluster(cp, api, kubeconfig), timing, show)
                recorder = SeriesRecorder(demo.observe_series).start()
                try:
                    demo.run(start_operator)
                    demo.summary(started)
                    recorder.stop()
                    where = picture or default_picture_path()
                    print(
                        "    " + write_picture(recorder.samples, PICTURE_PANELS, where), flush=True
                    )
                finally:
                    recorder.stop()
                    for op in running:
                        with contextlib.suppress(Exception):
                            op.stop()
                    api.close()
    except ControlPlaneError as exc:
        print(f"dynquota demo: the control plane failed: {exc}", file=sys.stderr)
        return 1
    except WaitTimeoutError as exc:
        print(f"dynquota demo: a step did not complete: {exc}", file=sys.stderr)
        return 1
    print("everything stopped: control plane, operator, temporary files.", flush=True)
    return 0
