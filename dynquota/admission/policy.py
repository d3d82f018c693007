"""How the evaluator batches requests and reacts to failed quota status writes.

Three policies, so the benchmark can run them side by side:

* :data:`DYNQUOTA` (default) — batches per namespace; a 409 Conflict re-reads the failed quota
  documents live (past informer and caches) and retries **without** consuming the retry
  budget, bounded by the requests' deadlines; other errors consume the budget (3). This is
  the fix for kubernetes/kubernetes#67761, where concurrent apiserver replicas fight over a
  quota's status and a conflict used up one of only three retries, so a create was answered
  409 although the quota had room.
* :data:`UPSTREAM` — kube-apiserver's behaviour (``quotaEvaluator.checkQuotas`` in
  ``staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go``): batches
  per namespace; every failed write, conflicts included, consumes one of 3 retries; the
  retry re-reads through the accessor's caches.
* :data:`NAIVE` — no batching: each request reads, checks and writes on its own
  (read-modify-write), with the upstream retry rule.

All three keep the fix of kubernetes/kubernetes#141904: a retry re-evaluates only requests
still waiting for a verdict, so a request denied by one quota is never allowed (or charged)
on the retry of another quota's failed write.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DYNQUOTA", "NAIVE", "POLICIES", "UPSTREAM", "ConflictPolicy"]


@dataclass(frozen=True)
class ConflictPolicy:
    """Batching and retry rules of an :class:`~dynquota.admission.Evaluator`.

    Attributes:
        name: label in logs and benchmark tables.
        batching: per-namespace batches on a workqueue (False: every request on its own).
        retries: retry budget for failed status writes (upstream 3: four attempts in all).
        conflicts_consume_retries: whether a round whose failures were all 409 Conflicts
            consumes the budget. When False such rounds continue until the latest deadline of
            the requests still waiting.
        reread_live_on_conflict: after a round of conflicts, read the failed quotas with one
            live list instead of through the informer and caches.
        requeue_on_conflict: when a round wrote nothing and all its writes conflicted, send
            the undecided requests back to the head of the namespace's queue (next batch, with
            the requests that arrived meanwhile, after a live read) instead of retrying alone.
            Only with ``batching``.
        live_read_window: seconds after a conflict round during which every batch of that
            namespace starts from a live read instead of the informer (0: only the retry).
        conflict_backoff: seconds; from the second conflict round in a row, pause a random
            time up to ``conflict_backoff * 2**(n-2)`` (at most 16x) before retrying, so
            writers that keep colliding spread out. 0 disables.
    """

    name: str
    batching: bool = True
    retries: int = 3
    conflicts_consume_retries: bool = False
    reread_live_on_conflict: bool = True
    requeue_on_conflict: bool = True
    live_read_window: float = 0.0
    conflict_backoff: float = 0.0


DYNQUOTA = ConflictPolicy("dynquota")
UPSTREAM = ConflictPolicy(
    "upstream",
    conflicts_consume_retries=True,
    reread_live_on_conflict=False,
    requeue_on_conflict=False,
)
NAIVE = ConflictPolicy(
    "naive",
    batching=False,
    conflicts_consume_retries=True,
    reread_live_on_conflict=False,
    requeue_on_conflict=False,
)
POLICIES: dict[str, ConflictPolicy] = {p.name: p for p in (NAIVE, UPSTREAM, DYNQUOTA)}
"""The three policies by name."""
