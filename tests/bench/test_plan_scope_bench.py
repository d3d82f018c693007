"""``dynquota plan -n NS`` against ``plan`` of the whole cluster at 300 namespaces, in the same
run, on a private local control plane (``-m bench``, not in ``make test``;
``make bench-plan``).

The bed: ``DYNQUOTA_PLAN_BENCH_NAMESPACES`` (default 300) namespaces selected by one policy,
each with a managed quota, ``DYNQUOTA_PLAN_BENCH_CONFIGMAPS`` (default 20) ConfigMaps and a
LimitRange. Each command runs ``DYNQUOTA_PLAN_BENCH_RUNS`` (default 5) times as a user runs it
in this process (``main(["plan", "--local", ..., "-o", "json"])``, imports done: the
command's own work), interleaved; prints the wall time of each, the median and the requests
sent (counted at ``ApiClient.request``), then each once as a new process (what a user waits
for, Python's start-up and imports included); asserts the rows (one namespace's keys for
``-n``, every namespace's for ``-A``) and the 8 requests of ``-n``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import kubernetes_asyncio
import pytest
from figures import pooled_cluster, report  # same directory

from dynquota.cli import main
from dynquota.testing.operator import OperatorCluster

pytestmark = pytest.mark.timeout(1800)

COUNT = int(os.environ.get("DYNQUOTA_PLAN_BENCH_NAMESPACES", "300"))
CONFIGMAPS = int(os.environ.get("DYNQUOTA_PLAN_BENCH_CONFIGMAPS", "20"))
RUNS = int(os.environ.get("DYNQUOTA_PLAN_BENCH_RUNS", "5"))
LABEL = {"dq-plan-bench": "yes"}
MANAGED = {"app.kubernetes.io/managed-by": "dynquota"}


async def _fill(kubeconfig: str) -> None:
    async with await kubernetes_asyncio.config.new_client_from_config(
        config_file=kubeconfig
    ) as api:
        core: Any = kubernetes_asyncio.client.CoreV1Api(api)
        gate = asyncio.Semaphore(32)

        async def one(i: int) -> None:
            ns = f"plan-{i:04d}"
            async with gate:
                await core.create_namespace({"metadata": {"name": ns, "labels": LABEL}})
                await core.create_namespaced_resource_quota(
                    ns,
                    {
                        "metadata": {"name": "dynquota", "labels": MANAGED},
                        "spec": {"hard": {"pods": "10", "configmaps": "50"}},
                    },
                )
                await core.create_namespaced_limit_range(
                    ns,
                    {
                        "metadata": {"name": "defaults"},
                        "spec": {
                            "limits": [{"type": "Container", "defaultRequest": {"cpu": "100m"}}]
                        },
                    },
                )
                for c in range(CONFIGMAPS):
                    await core.create_namespaced_config_map(
                        ns, {"metadata": {"name": f"cm-{c}"}, "data": {"k": "v"}}
                    )

        await asyncio.gather(*(one(i) for i in range(COUNT)))


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorCluster]:
    with pooled_cluster(tmp_path_factory.mktemp("plan-bench")) as cluster:
        started = time.monotonic()
        asyncio.run(_fill(cluster.cp.kubeconfig))
        cluster.policy("bench", LABEL, pods={"minimum": 10, "maximum": 100, "bufferPercent": 40})
        print(f"\ncreated {COUNT} namespaces in {time.monotonic() - started:.1f} s", flush=True)
        yield cluster


def _plan(kubeconfig: str, *scope: str) -> tuple[float, dict[str, Any]]:
    """``plan --local SCOPE -o json`` as a new process: wall seconds and the document."""
    argv = [sys.executable, "-m", "dynquota.cli", "plan", "--local", "--kubeconfig", kubeconfig,
            *scope, "-o", "json"]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    return seconds, json.loads(done.stdout)


def _in_process(kubeconfig: str, *scope: str) -> tuple[float, int, dict[str, Any]]:
    """The same command in this process (imports done): wall seconds, the requests it sent
    (counted at ``ApiClient.request``) and the document."""
    sent: list[str] = []
    request = kubernetes_asyncio.client.ApiClient.request

    async def counted(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(url)
        return await request(self, method, url, *args, **kwargs)

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.setattr(kubernetes_asyncio.client.ApiClient, "request", counted)
        started = time.monotonic()
        code = main(["plan", "--local", "--kubeconfig", kubeconfig, *scope, "-o", "json"])
        seconds = time.monotonic() - started
    assert code == 0
    return seconds, len(sent), json.loads(out.getvalue())


def test_plan_of_one_namespace_against_the_whole_cluster(bed: OperatorCluster) -> None:
    kubeconfig = bed.cp.kubeconfig
    one = f"plan-{COUNT // 2:04d}"
    everyone = {f"plan-{i:04d}" for i in range(COUNT)}
    times: dict[str, list[float]] = {"-n": [], "-A": []}
    requests: dict[str, int] = {}
    for _ in range(RUNS):  # interleaved: the machine's load hits both alike
        seconds, requests["-n"], document = _in_process(kubeconfig, "-n", one)
        times["-n"].append(seconds)
        assert {r["namespace"] for r in document["rows"]} == {one}
        seconds, requests["-A"], document = _in_process(kubeconfig, "-A")
        times["-A"].append(seconds)
        assert everyone <= {r["namespace"] for r in document["rows"]}
    process = {scope: _plan(kubeconfig, *scope)[0] for scope in (("-n", one), ("-A",))}
    scoped, whole = statistics.median(times["-n"]), statistics.median(times["-A"])
    report(
        f"dynquota plan --local -o json at {COUNT} namespaces ({CONFIGMAPS} ConfigMaps each), "
        f"{RUNS} runs in this process (imports done), wall seconds",
        [
            f"plan -n {one}: "
            + " ".join(f"{t:.3f}" for t in times["-n"])
            + f"  median {scoped:.3f}  requests {requests['-n']}",
            "plan -A:        "
            + " ".join(f"{t:.3f}" for t in times["-A"])
            + f"  median {whole:.3f}  requests {requests['-A']}",
            f"ratio whole / one: {whole / scoped:.1f}",
            f"as a new process (python -m dynquota.cli, imports included), once each: "
            f"-n {process[('-n', one)]:.2f} s, -A {process[('-A',)]:.2f} s",
        ],
    )
    print(
        f"RESULT namespaces={COUNT} plan_n_median_s={scoped:.3f} plan_all_median_s={whole:.3f} "
        f"requests_n={requests['-n']} requests_all={requests['-A']}",
        flush=True,
    )
    assert requests["-n"] == 8
    assert scoped < whole
