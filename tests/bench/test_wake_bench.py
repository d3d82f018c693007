"""The wake against no wake, in one process (issue 26): the issue's 60-replica Deployment
(pods buffer 40 %, minimum 10, maximum 100, upscale cooldown 10 s) grown once with
``DYNQUOTA_WAKE=false`` and once with the wake on, on the same control plane.

``make bench`` (or ``pytest -m bench -s tests/bench/test_wake_bench.py``); the baseline run
waits up to ``DYNQUOTA_WAKE_BENCH_TIMEOUT`` seconds (default 300) for its pods.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from figures import pooled_cluster  # same directory

from dynquota.testing.growth import FillRun, grow
from dynquota.testing.operator import OperatorCluster, OperatorThread, operator_settings

pytestmark = [pytest.mark.bench, pytest.mark.timeout(1200)]

TIMEOUT = float(os.environ.get("DYNQUOTA_WAKE_BENCH_TIMEOUT", "300"))
PROFILE = {"bufferPercent": 40, "minimum": 10, "maximum": 100, "upscaleCooldown": "10s",
           "downscaleCooldown": "1h"}  # fmt: skip


@pytest.fixture(scope="module")
def bench_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorCluster]:
    with pooled_cluster(tmp_path_factory.mktemp("wake")) as c:
        yield c


def one_run(c: OperatorCluster, wake: bool) -> FillRun:
    label = {"dq-wake-bench": uuid.uuid4().hex[:8]}
    ns = c.new_namespace(label)
    c.policy(f"p-{label['dq-wake-bench']}", label, pods=PROFILE)
    op = OperatorThread(operator_settings(c, wake=wake)).start()
    try:
        c.wait_hard(ns, {"pods": "10", "configmaps": "50"})
        return grow(c, ns, 60, TIMEOUT, start_hard=10)
    finally:
        op.stop()
        c.delete_policy(f"p-{label['dq-wake-bench']}")
        c.delete_namespace(ns)


def test_the_wake_fills_each_raise_where_the_backoff_waits(bench_cluster: OperatorCluster) -> None:
    off = one_run(bench_cluster, wake=False)
    on = one_run(bench_cluster, wake=True)
    for name, run in (("no wake", off), ("wake", on)):
        delays = sorted(run.delays)
        print(
            f"\n{name}: raises {[h for _, h in run.raises]}, fill delays (s) "
            f"{[round(d, 2) for d in run.delays]}, unfilled {run.unfilled}, pods "
            f"{run.pods}/60 after {run.seconds:.1f} s, max delay "
            f"{delays[-1] if delays else float('nan'):.2f} s"
        )
    assert on.pods == 60
    assert on.unfilled == []
    assert max(on.delays) <= 5.0
