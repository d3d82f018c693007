"""QuotaControllerStalled (issue 27, part 2) on the real control plane: with
kube-controller-manager stopped nothing shows at rest; a raise not copied into status.hard and
deletions not recounted each raise the signal within their bound; raises resting on
status.used are held meanwhile; all clears once kube-controller-manager is back."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from dynquota.policy.stall import COPY_AFTER, RECOUNT_GRACE
from dynquota.testing.operator import OperatorCluster, OperatorThread
from dynquota.testing.wait import holds_for, wait_until

pytestmark = pytest.mark.integration

SYNC = 5  # the operator's quotaSyncPeriod here: the recount bound is SYNC + RECOUNT_GRACE
CHECK = 5 + 2  # the check interval, and the policy status debounce and write
PODS = {"bufferPercent": 40, "minimum": 10, "maximum": 100, "upscaleCooldown": "2s",
        "downscaleCooldown": "1h"}  # fmt: skip
SECRETS = {"bufferPercent": 40, "minimum": 5, "maximum": 50, "upscaleCooldown": "2s",
           "downscaleCooldown": "1h"}  # fmt: skip


def _condition(c: OperatorCluster, policy: str) -> dict[str, Any]:
    status = c.get_policy(policy).get("status") or {}
    found = [x for x in status.get("conditions") or [] if x["type"] == "QuotaControllerStalled"]
    return found[0] if found else {}


def test_a_stalled_quota_controller_is_reported_and_holds_raises_on_status_used(
    op_cluster: OperatorCluster,
    scope: dict[str, str],
    start_operator: Callable[..., OperatorThread],
) -> None:
    c = op_cluster
    ns = c.new_namespace(scope)
    c.policy("p-stall", scope, pods=PODS, secrets=SECRETS)
    op = start_operator(quota_sync_period=SYNC)
    c.wait_hard(ns, {"pods": "10", "configmaps": "50", "secrets": "5"})  # and enforced
    c.create_pods(ns, 4)
    wait_until(lambda: _condition(c, "p-stall").get("reason") == "Running", "Running")

    def stalled(signal: str) -> bool:
        return op.sample("dynquota_quota_controller_stalled", {"signal": signal}) == 1

    c.cp.stop_controller_manager()
    try:
        # at rest a stopped controller leaves no trace: nothing past either bound
        holds_for(lambda: not stalled("copy") and not stalled("recount")
                  and _condition(c, "p-stall")["status"] == "False",
                  "no stall at rest", SYNC + RECOUNT_GRACE + CHECK, interval=1)  # fmt: skip
        # a raise: pods filled to 10 (charged by admission) -> 14, never copied
        c.create_pods(ns, 6)
        c.wait_hard(ns, {"pods": "14", "configmaps": "50", "secrets": "5"}, enforced=False)
        raised = time.monotonic()
        # deletions: status.used stays at 10 with 7 pods
        c.delete_pods(ns, 3)
        deleted = time.monotonic()
        wait_until(lambda: stalled("copy"), "the copy signal", timeout=COPY_AFTER + CHECK + 5)
        copy_after = time.monotonic() - raised
        condition = wait_until(
            lambda: (x := _condition(c, "p-stall")).get("status") == "True" and x,
            "QuotaControllerStalled=True",
            timeout=15,
        )
        assert condition["reason"] == "SpecNotCopied"
        assert "not copied into status.hard" in condition["message"]
        wait_until(lambda: stalled("recount"), "the recount signal",
                   timeout=SYNC + RECOUNT_GRACE + CHECK + 5)  # fmt: skip
        recount_after = time.monotonic() - deleted
        # a raise resting on status.used (secrets) is held meanwhile
        for i in range(5):
            c.core.create_namespaced_secret(
                ns, {"metadata": {"name": f"s{i}"}, "type": "Opaque"}, _request_timeout=30
            )
        # three cooldowns and a check
        holds_for(
            lambda: (c.hard(ns) or {}).get("secrets") == "5", "secrets held at 5", 3 * 2 + CHECK
        )
        assert (c.hard(ns) or {}).get("pods") == "14"  # tally-driven: 7 pods, no raise
    finally:
        c.cp.start_controller_manager()
        c.cp.wait_controller_manager_working()  # before the next test's namespaces
    started = time.monotonic()
    wait_until(lambda: not stalled("copy") and not stalled("recount"), "recovery", timeout=60)
    cleared = time.monotonic() - started
    wait_until(lambda: _condition(c, "p-stall").get("reason") == "Running", "Running", timeout=20)
    # the held raise, enforced
    c.wait_hard(ns, {"pods": "14", "configmaps": "50", "secrets": "7"}, timeout=30)
    print(f"\nmeasured: copy signal {copy_after:.1f} s after the raise (bound {COPY_AFTER:.0f} + "
          f"{CHECK} s), recount signal {recount_after:.1f} s after the deletions (bound "
          f"{SYNC + RECOUNT_GRACE:.0f} + {CHECK} s), cleared {cleared:.1f} s after "
          "kube-controller-manager started")  # fmt: skip
