"""``python -m dynquota.testing.controlplane``: a :class:`LocalControlPlane` run by hand
until Ctrl-C, with signals to stage faults (docs/controlplane.md)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

from dynquota.testing.controlplane import LocalControlPlane

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dynquota.testing.controlplane``: start, print the kubeconfig, wait.

    SIGINT/SIGTERM stop everything; SIGHUP restarts kube-apiserver alone (etcd keeps its
    data); SIGUSR1 stops kube-controller-manager, or starts it again when stopped (a stalled
    quota controller, staged by hand).
    """
    parser = argparse.ArgumentParser(
        prog="python -m dynquota.testing.controlplane",
        description="Run etcd, kube-apiserver and kube-controller-manager on 127.0.0.1 until "
        "Ctrl-C. `kill -HUP <pid>` restarts kube-apiserver alone; `kill -USR1 <pid>` stops "
        "kube-controller-manager, or starts it again.",
    )
    parser.add_argument(
        "--resource-quota-sync-period",
        type=int,
        default=10,
        metavar="SECONDS",
        help="the quota controller's full resync period (default: 10)",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        default=0,
        metavar="N",
        help="start kube-scheduler and kwok with N simulated nodes (default: 0, pods stay Pending)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory (data, logs) on exit"
    )
    args = parser.parse_args(argv)
    signals = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    with LocalControlPlane(
        resource_quota_sync_period=args.resource_quota_sync_period,
        keep_workdir=args.keep,
        nodes=args.nodes,
    ) as cp:
        print(f"export KUBECONFIG={cp.kubeconfig}", flush=True)
        print(
            f"kubectl, helm: {cp.bin_dir}; logs: {cp.log_dir}; pid {os.getpid()}: "
            "Ctrl-C stops everything, kill -HUP restarts kube-apiserver, kill -USR1 stops or "
            "starts kube-controller-manager",
            file=sys.stderr,
            flush=True,
        )
        kcm_stopped = False
        while (received := signal.sigwait(signals)) in (signal.SIGHUP, signal.SIGUSR1):
            if received == signal.SIGHUP:
                cp.restart_apiserver()
            elif kcm_stopped:
                cp.start_controller_manager()
            else:
                cp.stop_controller_manager()
            kcm_stopped = kcm_stopped != (received == signal.SIGUSR1)
            print(f"done: {signal.Signals(received).name}", file=sys.stderr, flush=True)
    return 0
