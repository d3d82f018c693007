"""What one budget pass reads (issue #13, docs/budgets.md "One LIST of its quotas"): the LIST of
every managed quota in the cluster (the first pass, a joiner) against the LIST of the budget's
own quotas (label ``dynquota.io/budget=<name>``, the steady state), in the same process on the
same control plane, through the operator's own adapter (``QuotaClient.list_managed``).

``DQ_BENCH_LIST_NAMESPACES`` (default 2,000) namespaces each get a managed quota; ``MEMBERS``
(3) of them carry the budget's label. Each LIST runs ``ROUNDS`` times; the table gives the
median wall time of each, the quotas returned and the ratio, and, as a baseline, the LIST of
every quota decoded into kubernetes_asyncio's generated models (the adapter before it read raw
JSON; 2,000 quotas cost 1.8 s there, on the event loop). Gate: the budget's own
LIST at least 5x faster than the LIST of every quota at 2,000 namespaces. ``make bench-budgets``
runs it beside the budget benchmark; about 2 minutes, most of it creating the namespaces.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import kubernetes_asyncio
import pytest
from figures import pooled_cluster, report  # same directory

from dynquota.kube.quotas import QuotaClient, QuotaSnapshot
from dynquota.names import (
    BUDGET_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_SELECTOR,
    MANAGED_BY_VALUE,
    MANAGED_QUOTA_NAME,
)

pytestmark = pytest.mark.bench

NAMESPACES = int(os.environ.get("DQ_BENCH_LIST_NAMESPACES", "2000"))
MEMBERS = 3
ROUNDS = 15
GATE = 5.0


async def _median(run: Callable[[], Awaitable[list[QuotaSnapshot]]]) -> tuple[float, int]:
    """Median wall seconds of ``ROUNDS`` calls, and how many quotas the last one returned."""
    times, count = [], 0
    for _ in range(ROUNDS):
        start = time.perf_counter()
        count = len(await run())
        times.append(time.perf_counter() - start)
    return statistics.median(times), count


async def test_a_budget_pass_lists_its_own_quotas_not_the_cluster(tmp_path: Path) -> None:
    with pooled_cluster(tmp_path) as c:
        tag = uuid.uuid4().hex[:6]
        budget = f"b-{tag}"
        names = [f"l-{tag}-{i:05d}" for i in range(NAMESPACES)]

        def make(index: int) -> None:
            ns = names[index]
            c.core.create_namespace({"metadata": {"name": ns}})
            labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE}
            if index < MEMBERS:
                labels[BUDGET_LABEL] = budget
            c.core.create_namespaced_resource_quota(
                ns,
                {
                    "metadata": {"name": MANAGED_QUOTA_NAME, "labels": labels},
                    "spec": {"hard": {"pods": "10", "configmaps": "50"}},
                },
            )

        started = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(make, range(NAMESPACES)))
        created = time.monotonic() - started
        client = await kubernetes_asyncio.config.new_client_from_config(config_file=c.cp.kubeconfig)
        async with client:
            quotas = QuotaClient(client)
            own_selector = f"{BUDGET_LABEL}={budget}"
            # warm both paths (connections, the apiserver's watch cache) before timing
            await quotas.list_managed()
            await quotas.list_managed(own_selector)
            core = kubernetes_asyncio.client.CoreV1Api(client)

            async def models() -> list[QuotaSnapshot]:
                # the adapter before this change: generated models, turned back into dicts
                listed = await core.list_resource_quota_for_all_namespaces(
                    label_selector=MANAGED_BY_SELECTOR, _request_timeout=60
                )
                body = client.sanitize_for_serialization(listed)
                return [QuotaSnapshot.from_object(item) for item in body["items"]]

            await models()
            before, before_count = await _median(models)
            every, every_count = await _median(quotas.list_managed)
            own, own_count = await _median(lambda: quotas.list_managed(own_selector))
        ratio = every / own
        report(
            f"one budget pass's LIST: {NAMESPACES} managed quotas, {MEMBERS} in the budget "
            f"(median of {ROUNDS}; {created:.0f} s to create)",
            [
                f"every managed quota, generated models (before)  {before * 1000:8.1f} ms   "
                f"{before_count} quotas",
                f"every managed quota   {every * 1000:8.1f} ms   {every_count} quotas   "
                f"({before / every:.1f}x faster than with models)",
                f"the budget's own      {own * 1000:8.1f} ms   {own_count} quotas",
                f"ratio                 {ratio:8.1f}x (gate: at least {GATE:.0f}x)",
            ],
        )
        assert own_count == MEMBERS
        assert every_count == NAMESPACES
        assert ratio >= GATE, f"the budget's own LIST only {ratio:.1f}x faster"
